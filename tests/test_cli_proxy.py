"""``fedqr plan|run --data-use public-proxy``: a public proxy from another source, end to end.

MNIST planned with FEMNIST's digits (a built-in set with a class selection, and a label map
file), the three hospitals of heart disease planned with Cleveland's file; bad proxies are a
clear error naming the option, exit 2, nothing written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fedqr.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
MNIST = ["--dataset", "mnist", "--fraction", "0.02", "--num-clients", "4", "--model", "logreg",
         "--mechanism", "laplace", "--eps", "5", "--clip", "100", "--twin-repeats", "2"]


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def heart(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The prepared heart files, and ``three.csv``/``three_test.csv``: the hospitals other
    than Cleveland (Hungary, Switzerland, VA) as one federation."""
    out = tmp_path_factory.mktemp("heart")
    subprocess.run([sys.executable, str(ROOT / "examples/heart_disease/prepare.py"),
                    "--data-dir", str(data_dir / "heart-disease"), "--out", str(out)],
                   check=True, capture_output=True)
    for suffix in ("", "_test"):
        lines: list[str] = []
        for name in ("hungary", "switzerland", "va"):
            rows = (out / f"hospital_{name}{suffix}.csv").read_text().splitlines()
            lines += rows if not lines else rows[1:]
        (out / f"three{suffix}.csv").write_text("\n".join(lines) + "\n")
    return out


def _doc(output: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(output[output.index("{"):])
    return doc


def test_mnist_planned_with_femnist_digits_as_public_proxy(data_dir: Path,
                                                           femnist_dir: Path) -> None:
    res = runner.invoke(app, ["plan", *MNIST, "--data-use", "public-proxy",
                              "--proxy-dataset", "femnist", "--proxy-classes", "0-9", "--json"])
    assert res.exit_code == 0, res.output
    rec = _doc(res.stdout)["recommended"]
    used = rec["data_used"]
    assert used["kind"] == "public-proxy" and not used["reads_private_data"]
    assert used["proxy"] == "femnist, classes 0-9"
    assert used["client_facts_used"]["split"] == ["N", "sizes"]
    assert "reported sizes" in used["split"]["by"]
    assert rec["privacy_cost"]["epsilon"] == 0.0
    shift = rec["proxy_shift"]
    assert len(shift["alternatives"]) == 4  # 2 redraws, 2 label-skewed splits
    assert rec["predicted_test_loss"]["proxy_std"] == shift["proxy_std"] >= 0
    lo, hi = shift["range"]
    assert lo <= shift["reference_loss"] <= hi


@pytest.mark.slow
def test_a_label_map_file_maps_proxy_labels_to_deployment_labels(tmp_path: Path, data_dir: Path,
                                                                 femnist_dir: Path) -> None:
    # FEMNIST's digits 0-9 are its classes 0-9; map them reversed, then back: the same
    # labels must give the same plan as the selection 0-9, the reversed map another task
    same = tmp_path / "same.json"
    same.write_text(json.dumps({str(c): c for c in range(10)}))
    by_map = runner.invoke(app, ["plan", *MNIST, "--data-use", "public-proxy",
                                 "--proxy-dataset", "femnist", "--proxy-classes", str(same),
                                 "--json"])
    by_range = runner.invoke(app, ["plan", *MNIST, "--data-use", "public-proxy",
                                   "--proxy-dataset", "femnist", "--proxy-classes", "0-9",
                                   "--json"])
    assert by_map.exit_code == 0 and by_range.exit_code == 0, by_map.output + by_range.output
    a, b = _doc(by_map.stdout)["recommended"], _doc(by_range.stdout)["recommended"]
    assert a["predicted_test_loss"]["mean"] == b["predicted_test_loss"]["mean"]
    swapped = tmp_path / "swapped.json"
    swapped.write_text(json.dumps({str(c): 9 - c for c in range(10)}))
    res = runner.invoke(app, ["plan", *MNIST, "--data-use", "public-proxy",
                              "--proxy-dataset", "femnist", "--proxy-classes", str(swapped),
                              "--json"])
    assert res.exit_code == 0, res.output
    assert _doc(res.stdout)["recommended"]["data_used"]["proxy"].endswith(str(swapped))


def test_heart_three_hospitals_planned_and_run_with_cleveland_as_proxy(heart: Path,
                                                                       tmp_path: Path) -> None:
    data = ["--data", str(heart / "three.csv"), "--test-data", str(heart / "three_test.csv"),
            "--model", "mlp", "--hidden", "8", "--mechanism", "laplace", "--eps", "8",
            "--clip", "5", "--data-use", "public-proxy",
            "--proxy-data", str(heart / "hospital_cleveland.npz")]
    res = runner.invoke(app, ["plan", *data, "--json"])
    assert res.exit_code == 0, res.output
    rec = _doc(res.stdout)["recommended"]
    assert rec["data_used"]["proxy"] == "hospital_cleveland"
    assert rec["data_used"]["model"] == "mlp"
    split = rec["data_used"]["split"]["by"]
    assert "(199)" in split and "N=3" in split  # Cleveland's 199 rows for 172 + 30 + 85
    out = tmp_path / "run"
    run = runner.invoke(app, ["run", *data, "--rounds", "auto", "--clients-per-round", "auto",
                              "--repeats", "2", "--out", str(out)])
    assert run.exit_code == 0, run.output
    doc = json.loads((out / "result.json").read_text())
    assert doc["plan"]["rounds"] == rec["rounds"]
    assert len(doc["clients"]) == 3


@pytest.mark.parametrize(("extra", "message"), [
    (["--proxy-classes", ","], "--proxy-classes selects no class"),
    (["--proxy-classes", "0-5"], "--proxy-classes: the range 0-5 reaches beyond the proxy's "
                                 "classes 0..1"),
    (["--proxy-classes", "0,1,5"], "--proxy-classes: classes must be integers in [0, 1]"),
    (["--proxy-classes", "MAP"], "--proxy-classes: classes must be integers in [0, 1]"),
    (["--proxy-classes", "BADMAP"], "--proxy-classes: the label map"),
    (["--proxy-classes", "NOFILE"], "--proxy-classes: label map file not found"),
    (["--proxy-classes", "DUPMAP"], "names proxy label 0 twice, got '0': 0 after 1"),
    (["--proxy-data", "WIDE"], "--proxy-data must have the deployment's 10 features"),
    (["--proxy-data", "MISSING"], "--proxy-data must be an existing"),
])
def test_bad_proxy_exits_2_names_the_option_and_writes_nothing(
        extra: list[str], message: str, heart: Path, tmp_path: Path) -> None:
    (tmp_path / "map.json").write_text(json.dumps({"0": 0, "7": 1}))
    (tmp_path / "bad.json").write_text("[0, 1]")
    # a repeated key: JSON readers keep the last value ({0: 0, 1: 1}, valid), silently
    (tmp_path / "dup.json").write_text('{"0": 1, "0": 0, "1": 1}')
    wide = tmp_path / "wide.csv"
    rows = (heart / "hospital_cleveland.csv").read_text().splitlines()
    wide.write_text("\n".join(r + ",1" for r in rows) + "\n")  # an 11th feature
    subs = {"MAP": str(tmp_path / "map.json"), "BADMAP": str(tmp_path / "bad.json"),
            "DUPMAP": str(tmp_path / "dup.json"),
            "NOFILE": str(tmp_path / "none.json"), "WIDE": str(wide),
            "MISSING": str(tmp_path / "none.csv")}
    extra = [subs.get(v, v) for v in extra]
    proxy = [] if "--proxy-data" in extra else ["--proxy-data",
                                                 str(heart / "hospital_cleveland.npz")]
    args = ["--data", str(heart / "three.csv"), "--test-data", str(heart / "three_test.csv"),
            "--mechanism", "laplace", "--eps", "4", "--clip", "5",
            "--data-use", "public-proxy", *proxy, *extra]
    png, out = tmp_path / "p.png", tmp_path / "run"
    res = runner.invoke(app, ["plan", *args, "--plot", str(png)])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert not png.exists()
    res = runner.invoke(app, ["run", *args, "--rounds", "auto", "--clients-per-round", "auto",
                              "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert not out.exists()


@pytest.mark.parametrize(("extra", "message"), [
    (["--proxy-dataset", "femnist"], "--proxy-dataset must have the deployment's 784 features "
                                     "and 10 classes"),
    (["--proxy-dataset", "femnist", "--proxy-classes", "0-11"],
     "--proxy-classes='0-11' gives the proxy 12 classes, the model has 10"),
    (["--proxy-dataset", "femnist", "--proxy-classes", "60-70"],
     "--proxy-classes: the range 60-70 reaches beyond the proxy's classes 0..61"),
])
def test_bad_builtin_proxy_exits_2(extra: list[str], message: str, tmp_path: Path,
                                   femnist_dir: Path) -> None:
    png = tmp_path / "p.png"
    res = runner.invoke(app, ["plan", *MNIST, "--data-use", "public-proxy", *extra,
                              "--plot", str(png)])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert not png.exists()


def test_proxy_classes_need_a_public_proxy(tmp_path: Path) -> None:
    res = runner.invoke(app, ["plan", *MNIST, "--proxy-classes", "0-9"])
    assert res.exit_code == 2
    assert "--proxy-classes needs --data-use public-proxy" in " ".join(res.output.split())


def test_a_bad_twin_budget_exits_2(tmp_path: Path) -> None:
    png = tmp_path / "p.png"
    res = runner.invoke(app, ["plan", *MNIST, "--twin-budget", "0", "--plot", str(png)])
    assert res.exit_code == 2
    assert "--twin-budget must be > 0 seconds" in " ".join(res.output.split())
    assert not png.exists()
