"""``fedqr plan`` answered again from its stored answer (:mod:`fedqr.cli.plan_cache`).

A repeated plan prints what the first printed (tables, messages, the privacy warning; only
the call's own twin rounds, seconds and "cached" differ) without running the planner, and in
a fresh interpreter without importing torch; a changed option or input file plans afresh; a
damaged answer file is a miss, never a crash.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from click.testing import Result
from typer.testing import CliRunner

from fedqr.cli import app, plan_cache

runner = CliRunner()
CALL_FIELDS = ("simulated_rounds", "simulated", "wall_time_s", "from_cache")
"""What a plan document says about the call itself, not the plan."""
HEAVY = ("torch", "dp_accounting", "scipy", "flwr", "numpy", "matplotlib")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))


def _write_csv(path: Path, *, seed: int = 0) -> Path:
    """Three clients, 40 rows each, four features, two classes."""
    rng = np.random.default_rng(seed)
    lines = ["client,label,a,b,c,d"]
    for i in range(120):
        y = int(rng.integers(2))
        lines.append(f"{i % 3},{y}," + ",".join(f"{v:.4f}" for v in rng.normal(size=4) + y))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def args(tmp_path: Path) -> list[str]:
    """A plan of a few twin rounds (about a second)."""
    csv = _write_csv(tmp_path / "clients.csv")
    return ["plan", "--data", str(csv), "--test-share", "0.25", "--mechanism", "laplace",
            "--eps", "5", "--clip", "5", "--twin-repeats", "2", "--rounds", "5"]



def _ok(argv: list[str]) -> Result:
    res = runner.invoke(app, argv)
    assert res.exit_code == 0, res.output
    return res


def _answers() -> list[Path]:
    return sorted((Path(os.environ["FEDQR_CACHE"]) / "plans" / "answers").glob("*.json"))


def _plan_fields(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in CALL_FIELDS}


def _words(text: str) -> str:
    """The text without its line wrapping, the call's own rounds and seconds replaced."""
    return re.sub(r"\d+ twin rounds in [\d.]+ s( \(cached\))?", "ROUNDS", " ".join(text.split()))


def test_a_repeated_plan_prints_the_same_tables_without_the_planner(
        args: list[str], planner_calls: list[int]) -> None:
    first = _ok(args)
    second = _ok(args)
    assert planner_calls == [1] and len(_answers()) == 1
    assert "WITHOUT differential privacy" in _words(first.stderr)
    assert second.stderr == first.stderr  # the privacy warning, printed again
    assert "best schedules" in first.stdout and "(cached)" not in first.stdout
    assert re.search(r"0 twin rounds in [\d.]+ s \(cached\)", " ".join(second.stdout.split()))
    assert _words(second.stdout) == _words(first.stdout)


def test_a_repeated_json_plan_prints_the_same_document(
        args: list[str], planner_calls: list[int]) -> None:
    first = json.loads(_ok([*args, "--json"]).stdout)
    second = json.loads(_ok([*args, "--json"]).stdout)
    tables = _ok(args)  # --json is not part of the key: the same answer
    assert planner_calls == [1]
    assert first["from_cache"] is False and first["simulated_rounds"] > 0
    assert second["from_cache"] is True and second["simulated_rounds"] == 0
    # README, docs/planner.md: a replayed answer built no twin (null); a re-plan from the
    # twin's cached simulations says what it simulated, zero rounds
    assert first["simulated"]["rounds"] > 0 and second["simulated"] is None
    again = json.loads(_ok([*args, "--json", "--plot", str(Path(args[2]).parent / "p.png")]
                           ).stdout)  # --plot: planned again, from the cached simulations
    assert planner_calls == [1, 1]
    assert again["from_cache"] is True and again["simulated"]["rounds"] == 0
    assert _plan_fields(second) == _plan_fields(first)
    assert f"T={first['recommended']['rounds']}" in tables.stdout


def test_plot_and_no_cache_plan_again(args: list[str], planner_calls: list[int],
                                      tmp_path: Path) -> None:
    _ok(args)
    _ok([*args, "--no-cache"])
    png = tmp_path / "p.png"
    _ok([*args, "--plot", str(png)])
    assert planner_calls == [1, 1, 1] and png.stat().st_size > 1000


def _options(args: list[str]) -> dict[str, Any]:
    """The options ``fedqr plan`` hands :func:`plan_cache.answer_key` (nothing planned)."""
    seen: dict[str, Any] = {}

    def record(o: dict[str, Any]) -> str:
        seen.update(o)
        raise typer.Exit(0)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(plan_cache, "answer_key", record)
        _ok(args)
    return seen


def test_the_key_follows_the_options_but_not_the_output(args: list[str],
                                                        tmp_path: Path) -> None:
    o = _options(args)
    key = plan_cache.answer_key(o)
    assert key is not None and key == plan_cache.answer_key(dict(o))
    same: list[dict[str, Any]] = [{"as_json": True}, {"plot": tmp_path / "p.png"}]
    for change in same:
        assert plan_cache.answer_key({**o, **change}) == key
    other: list[dict[str, Any]] = [{"seed": 1}, {"eps": "5.5"}, {"device": "cpu"},
                                   {"twin_repeats": 3}, {"data": tmp_path / "other.csv"}]
    for change in other:
        assert plan_cache.answer_key({**o, **change}) != key, change
    assert plan_cache.answer_key({**o, "cache": False}) is None


def test_a_rewritten_data_file_is_a_miss(args: list[str], planner_calls: list[int]) -> None:
    _ok(args)
    csv = Path(args[args.index("--data") + 1])
    before = csv.stat()
    text = csv.read_text()
    csv.write_text(text.replace("0.", "1.", 1))  # the same size, other content
    assert csv.stat().st_size == before.st_size
    _ok(args)
    assert planner_calls == [1, 1] and len(_answers()) == 2


def test_a_data_folder_is_part_of_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    data = tmp_path / "data"
    (data / "mnist").mkdir(parents=True)
    (data / "mnist" / "train-labels-idx1-ubyte.gz").write_bytes(b"a" * 10)
    monkeypatch.setenv("FEDQR_DATA", str(data))
    o = _options(["plan", "--dataset", "mnist", "--eps", "1"])
    key = plan_cache.answer_key(o)
    os.utime(data / "mnist" / "train-labels-idx1-ubyte.gz", ns=(1, 1))
    assert plan_cache.answer_key(o) != key  # a file's time (set back or not)
    key = plan_cache.answer_key(o)
    (data / "mnist" / "t10k-labels-idx1-ubyte.gz").write_bytes(b"b")
    assert plan_cache.answer_key(o) != key  # a new file
    key = plan_cache.answer_key(o)
    (data / "femnist").mkdir()  # beside: the loader also looks in $FEDQR_DATA itself
    assert plan_cache.answer_key(o) != key
    key = plan_cache.answer_key(o)
    monkeypatch.setenv("FEDQR_DATA", str(tmp_path))
    assert plan_cache.answer_key(o) != key


def test_the_key_covers_every_place_the_loaders_search(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from fedqr.data.femnist import femnist_search_dirs
    from fedqr.data.mnist import mnist_cache_dir, mnist_search_dirs

    monkeypatch.setenv("FEDQR_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    given = tmp_path / "given"
    for name, searched in (("mnist", [*mnist_search_dirs(data_dir=given), mnist_cache_dir()]),
                           ("femnist", femnist_search_dirs(data_dir=given))):
        places = {p for p, _ in plan_cache._search_places(name, given)}
        assert set(searched) <= places, name


@pytest.mark.parametrize("damage", ["truncated", "not json", "empty", "binary", "no document",
                                    "bad field", "other key", "list"])
def test_a_damaged_answer_plans_again(args: list[str], planner_calls: list[int],
                                      damage: str) -> None:
    first = _ok(args)
    (path,) = _answers()
    text = path.read_text()
    stored = json.loads(text)
    broken = {
        "truncated": text[:len(text) // 2], "not json": "{'format': 1}", "empty": "",
        "binary": None, "no document": json.dumps({**stored, "document": {}}),
        "bad field": json.dumps({**stored, "document": {
            **stored["document"], "recommended": {**stored["document"]["recommended"],
                                                  "rounds": "five"}}}),
        "other key": json.dumps({**stored, "key": "0" * 32}), "list": "[1, 2]"}[damage]
    if broken is None:
        path.write_bytes(b"\xff\xfe\x00garbage")
    else:
        path.write_text(broken)
    again = _ok(args)
    assert planner_calls == [1, 1]
    assert "damaged cached plan" in " ".join(again.stderr.split())
    assert _words(again.stdout) == _words(first.stdout)
    rewritten = json.loads(path.read_text())  # written anew
    assert rewritten["key"] == stored["key"]
    assert _plan_fields(rewritten["document"]) == _plan_fields(stored["document"])
    _ok(args)
    assert planner_calls == [1, 1]


def test_an_unknown_option_is_named() -> None:
    res = runner.invoke(app, ["plan", "--eps", "1", "--cache-dir", "x"])
    assert res.exit_code == 2
    assert "no such option: --cache-dir" in res.output and "unexpected" not in res.output


# In a fresh interpreter: the plan with the given arguments as tables and as JSON, then
# which heavy packages were imported.
_PROBE = textwrap.dedent("""
    import contextlib, io, json, sys
    from fedqr.cli import app

    argv, heavy = json.loads(sys.argv[1])
    runs = []
    for extra in ([], ["--json"]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                app([*argv, *extra], prog_name="fedqr")
                code = 0
            except SystemExit as e:
                code = e.code
        runs.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
    print(json.dumps({"runs": runs, "heavy": [m for m in heavy if m in sys.modules]}))
""")


def test_a_cached_plan_imports_nothing_heavy(args: list[str]) -> None:
    first = _ok(args)
    first_json = json.loads(_ok([*args, "--json"]).stdout)
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps([args, HEAVY])],
                          capture_output=True, text=True, check=False, timeout=120,
                          env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    tables, doc = report["runs"]
    assert tables["code"] == 0 and doc["code"] == 0, report
    assert report["heavy"] == []
    assert _words(tables["stdout"]) == _words(first.stdout)
    assert "WITHOUT differential privacy" in _words(tables["stderr"])
    cached = json.loads(doc["stdout"])
    assert cached["from_cache"] is True
    assert _plan_fields(cached) == _plan_fields(first_json)
