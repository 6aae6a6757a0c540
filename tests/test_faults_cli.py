"""The bad-input and fault catalogue of issue #17, ``fedqr run`` and ``fedqr plan`` rows.

Each row ends in a clear error (exit 2 for bad input, 1 for a fault, a message naming the
option or the file, no traceback, nothing left in ``--out``) or in a correct result.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from fedqr.cli import app

from .argv import override

runner = CliRunner()
SMALL = ["run", "--dataset", "digits", "--num-clients", "4", "--clients-per-round", "2",
         "--rounds", "3", "--lr", "0.3"]


def invoke(args: list[str]) -> Result:
    res = runner.invoke(app, args)
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res


def flat(text: str) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(text.split())


def squashed(text: str) -> str:
    """The output without any white space (rich may wrap inside a long path)."""
    return "".join(text.split())


def assert_bad_input(res: Result, *needles: str, code: int = 2) -> None:
    assert res.exit_code == code, res.output
    for n in needles:
        assert squashed(n) in squashed(res.output), res.output


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody may write into (sysfs for root, who ignores permission bits)."""
    if os.geteuid() == 0:
        yield Path("/sys")
        return
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    yield ro
    ro.chmod(stat.S_IRWXU)


@pytest.fixture
def no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any simulation started fails the test: checks must come before any work."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run started before its output folder was checked")
    monkeypatch.setattr("fedqr.sim.engine.simulate", refuse)


# -- --out on a mount point: no rename may cross from outside --out into it --------------------
def test_out_on_a_mount_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "mnt"
    real_replace = os.replace

    def cross_device(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        inside = [Path(p).resolve().is_relative_to(out.resolve()) for p in (src, dst)]
        if inside[0] != inside[1]:  # out is its own file system
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", cross_device)
    res = invoke([*SMALL, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["model.npz", "result.json",
                                                     "training.png"]
    doc = json.loads((out / "result.json").read_text())
    # fedqr flower simulate|deploy write their output the same way
    from fedqr.flower.cli import _write

    flower_out = tmp_path / "mnt" / "flower"
    out = flower_out
    _write(flower_out, doc, [[0.0]])
    assert sorted(p.name for p in flower_out.iterdir()) == ["model.npz", "result.json",
                                                           "training.png"]


# -- --out FILE/sub and READ-ONLY/sub: refused before any work ---------------------------------
def test_out_under_a_file_is_refused_first(tmp_path: Path, no_simulation: None) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = invoke([*SMALL, "--out", str(blocker / "sub")])
    assert_bad_input(res, "out must be a folder path", str(blocker))
    assert blocker.read_text() == "x"


def test_out_in_a_read_only_folder_is_refused_first(read_only: Path,
                                                    no_simulation: None) -> None:
    target = read_only / "fedqr-out" / "sub"
    res = invoke([*SMALL, "--out", str(target)])
    assert_bad_input(res, "out must be a writable location", str(target))
    assert not target.exists()


# -- runs that diverge or make NaN/inf: saved (null + diverged flag), one-line warning ---------
@pytest.mark.parametrize("args", [
    ["--mechanism", "none", "--lr", "1e4", "--rounds", "30"],
    ["--mechanism", "laplace", "--eps", "1e-300"],
    ["--mechanism", "laplace", "--clip", "1e300"],
])
def test_diverged_run_is_saved_with_a_warning(tmp_path: Path, args: list[str]) -> None:
    out = tmp_path / "r"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = invoke(override(SMALL, [*args, "--out", str(out)]))
    assert res.exit_code == 0, res.output
    assert "warning: the run diverged" in flat(res.output)
    assert not [w for w in caught if "diverged" in str(w.message)]  # said once, in words
    assert len(res.output) < 5000  # no dump of the document
    text = (out / "result.json").read_text()
    doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    assert doc["diverged"] is True and isinstance(doc["diverged_round"], int)
    run = doc["runs"][0]
    assert run["diverged_round"] == doc["diverged_round"]
    first = next(r for r in run["rounds"] if r["round"] == run["diverged_round"])
    assert None in (first["test_loss"], first["test_accuracy"])  # train_loss: only at the end
    # no accuracy is reported for a model whose loss is not finite (its arg-max measures nothing)
    assert all(r["test_accuracy"] is None for r in run["rounds"] if r["test_loss"] is None)
    if run["rounds"][-1]["test_loss"] is None:
        assert doc["summary"]["final_test_accuracy_mean"] is None
    assert (out / "training.png").is_file()


# -- --seed too large --------------------------------------------------------------------------
def test_seed_out_of_range_names_the_option(tmp_path: Path) -> None:
    res = invoke([*SMALL, "--seed", str(10**20), "--out", str(tmp_path / "r")])
    assert_bad_input(res, "seed must be in [0, 9223372036854775807]", f"seed={10**20}")
    assert not (tmp_path / "r").exists()


# -- --data-dir that does not exist ------------------------------------------------------------
def test_missing_data_dir_is_an_error(tmp_path: Path) -> None:
    res = invoke([*SMALL, "--data-dir", str(tmp_path / "nowhere"), "--out",
                  str(tmp_path / "r")])
    assert_bad_input(res, "--data-dir must be an existing folder", str(tmp_path / "nowhere"))
    assert not (tmp_path / "r").exists()


# -- --mechanism gaussian --eps 1e-9: refused, without a flood of absl warnings ----------------
def test_gaussian_budget_below_the_accountant_is_refused(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    res = invoke([*SMALL, "--mechanism", "gaussian", "--eps", "1e-9", "--out",
                  str(tmp_path / "r")])
    assert_bad_input(res, "eps must be large enough for the rdp accountant", "eps=1e-09")
    assert not [r for r in caplog.records if "Renyi" in r.getMessage()]
    assert not (tmp_path / "r").exists()
    # so small that the noise it would take overflows the accountant's floats: the same error
    res = invoke([*SMALL, "--mechanism", "gaussian", "--eps", "1e-300", "--out",
                  str(tmp_path / "r")])
    assert_bad_input(res, "eps must be large enough for the rdp accountant", "overflows")
    assert not (tmp_path / "r").exists()


# -- --mechanism laplace|none --delta 2: refused (pure eps-DP; no budget) --------------------
@pytest.mark.parametrize(("mechanism", "needle"), [
    ("laplace", "--delta must be left out for --mechanism laplace (pure eps-DP: delta is 0), "
                "got --delta='2'"),
    # no mechanism spends no budget: a delta (or eps) given for it is refused, not recorded
    ("none", "--delta must be left out for --mechanism none (no noise, no privacy budget), "
             "got --delta='2'"),
])
def test_a_delta_is_refused_where_no_mechanism_uses_it(tmp_path: Path, mechanism: str,
                                                       needle: str) -> None:
    res = invoke([*SMALL, "--mechanism", mechanism, "--delta", "2", "--out",
                  str(tmp_path / "r")])
    assert_bad_input(res, needle)
    res = invoke([*SMALL, "--mechanism", "none", "--eps", "1", "--out", str(tmp_path / "r")])
    assert_bad_input(res, "--eps must be left out for --mechanism none")


# -- result.json mode: the user's umask, like the figure beside it -----------------------------
def test_result_json_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        res = invoke([*SMALL, "--out", str(tmp_path / "r")])
    finally:
        os.umask(old)
    assert res.exit_code == 0, res.output
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "r").iterdir()}
    assert modes == {"result.json": 0o640, "training.png": 0o640, "model.npz": 0o640}


# -- uncaught exceptions: typer's traceback without locals -------------------------------------
def test_tracebacks_show_no_locals() -> None:
    from fedqr.flower.cli import flower_app

    assert app.pretty_exceptions_show_locals is False
    assert flower_app.pretty_exceptions_show_locals is False


# -- plan rows ---------------------------------------------------------------------------------
CONSTANTS = {"N": 2, "d": 10, "d_i": [5, 5], "p": 3, "mu": 0.1, "lambda": 2.0, "G": 1.0,
             "Gamma": 0.5, "Y0": 1.0, "xi": 1.0}


@pytest.mark.parametrize(("d_i", "raw"), [(5, None), (["a", "b"], None), (None, b"\xff\xfe{")])
def test_plan_malformed_constants_name_option_and_file(tmp_path: Path, d_i: object,
                                                       raw: bytes | None) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(raw if raw is not None else json.dumps({**CONSTANTS, "d_i": d_i}).encode())
    res = invoke(["plan", "--eps", "1", "--constants", str(path)])
    assert_bad_input(res, "constants must be a constants JSON file", str(path))


def test_plan_negative_extra_eps(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(CONSTANTS))
    res = invoke(["plan", "--eps", "1", "-5", "--constants", str(path)])
    assert_bad_input(res, "eps must be > 0", "eps=-5.0")


def test_plan_plot_in_a_read_only_folder_is_refused_first(tmp_path: Path, read_only: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(CONSTANTS))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("planned before the plot path was checked")
    monkeypatch.setattr("fedqr.theory.tables.laplace_rows", refuse)  # imported on use
    res = invoke(["plan", "--eps", "1", "--constants", str(path), "--plot",
                  str(read_only / "x.png")])
    assert_bad_input(res, "plot must be a writable location", str(read_only / "x.png"))
