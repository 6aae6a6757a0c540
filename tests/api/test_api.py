"""The public API and --data: the README example, --data against --dataset, bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import fedqr
from fedqr.cli import app
from fedqr.data import DatasetName, DataSpec

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_block(heading: str, fence: str) -> str:
    text = README.read_text()
    start = text.index(fence, text.index(heading)) + len(fence) + 1
    return text[start:text.index("```", start)]


@pytest.mark.slow
def test_readme_python_example_runs_as_written(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path))
    scope: dict[str, object] = {}
    exec(compile(_readme_block("## Your own data and model", "```python"), "README", "exec"),
         scope)
    plan, result = scope["plan"], scope["result"]
    assert isinstance(plan, fedqr.PlanResult) and plan.useful
    assert isinstance(result, fedqr.SimulationResult)
    assert result.document["provenance"]["model"]["name"] == "my_model"
    assert result.final_test_accuracy > 0.6  # above the majority class on this data


def _builtin_npz(tmp_path: Path, dataset: str, fraction: float) -> Path:
    data = DataSpec(dataset=dataset, fraction=fraction, num_clients=6, seed=3).build()
    path = tmp_path / f"{dataset}.npz"
    fedqr.FederatedData.from_client_data(data).to_npz(path)
    return path


@pytest.mark.parametrize(("dataset", "fraction", "mechanism"), [
    ("digits", 1.0, "laplace"), ("digits", 1.0, "gaussian"),
    ("mnist", 0.1, "laplace"), ("mnist", 0.1, "gaussian")])
def test_data_file_gives_the_builtin_numbers(tmp_path: Path, dataset: str, fraction: float,
                                             mechanism: str) -> None:
    """The built-in data and partition written to a file (with the partition's client ids)
    run to the same numbers through --data as through --dataset (logistic regression: the
    built-in sets' model, named for the file, whose own default is linear)."""
    common = ["--mechanism", mechanism, "--eps", "3", "--clip", "5", "--rounds", "4",
              "--clients-per-round", "3", "--repeats", "2", "--seed", "3", "--eval-train", "every",
              *(["--sample-rate", "0.2"] if mechanism == "gaussian" else [])]
    runner = CliRunner()
    a = runner.invoke(app, ["run", "--dataset", dataset, "--fraction", str(fraction),
                            "--num-clients", "6", "--out", str(tmp_path / "a"), *common])
    b = runner.invoke(app, ["run", "--data", str(_builtin_npz(tmp_path, dataset, fraction)),
                            "--no-standardize", "--model", "logreg", "--out",
                            str(tmp_path / "b"), *common])
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)
    ra = json.loads((tmp_path / "a" / "result.json").read_text())
    rb = json.loads((tmp_path / "b" / "result.json").read_text())
    assert [c["num_samples"] for c in ra["clients"]] == [c["num_samples"] for c in rb["clients"]]
    for run_a, run_b in zip(ra["runs"], rb["runs"], strict=True):
        for x, y in zip(run_a["rounds"], run_b["rounds"], strict=True):
            assert x["test_loss"] == pytest.approx(y["test_loss"], rel=1e-6)
            assert x["train_loss"] == pytest.approx(y["train_loss"], rel=1e-6)


def test_api_simulate_equals_the_engine_on_builtin_data() -> None:
    spec = DataSpec(dataset=DatasetName.DIGITS, num_clients=5, seed=1)
    own = fedqr.FederatedData.from_client_data(spec.build())
    kw = dict(mechanism="laplace", eps=2.0, clip=5.0, rounds=3, clients_per_round=2,
              repeats=2, seed=1)
    a = fedqr.simulate(data=spec, **kw)  # type: ignore[arg-type]
    b = fedqr.simulate(data=own, model="logreg", **kw)  # type: ignore[arg-type]
    assert a.document["runs"] == b.document["runs"]
    # own data's default is softmax regression with an intercept: another model
    c = fedqr.simulate(data=own, **kw)  # type: ignore[arg-type]
    assert c.document["provenance"]["model"] == {"name": "linear", "num_params": 650,
                                                  "parameter_shapes": {"theta": [10, 65]}}


@pytest.mark.parametrize(("args", "needle"), [
    (["--data", "missing.csv"], "data must be an existing"),
    (["--data", "{csv}", "--model", "nomodel.py:f"], "does not exist"),
    (["--data", "{csv}", "--model", "{bn}"], "BatchNorm"),
    (["--data", "{csv}", "--num-clients", "7"], "--num-clients must match"),
    (["--data", "{csv}", "--hidden", "0"], "hidden"),
    (["--test-share", "0.2"], "--test-share needs --data"),
])
def test_bad_data_options_exit_2_and_write_nothing(tmp_path: Path, args: list[str],
                                                   needle: str) -> None:
    rng = np.random.default_rng(0)
    csv = tmp_path / "d.csv"
    rows = ["client,label,a,b"] + [f"{i % 3},{int(v > 0)},{v:.4f},{w:.4f}"
                                   for i, (v, w) in enumerate(rng.normal(size=(60, 2)))]
    csv.write_text("\n".join(rows) + "\n")
    bn = tmp_path / "bn.py"
    bn.write_text("import torch\n\ndef f(shape, k):\n    return torch.nn.Sequential("
                  "torch.nn.Linear(shape[0], 4), torch.nn.BatchNorm1d(4), "
                  "torch.nn.Linear(4, k))\n")
    filled = [a.format(csv=csv, bn=f"{bn}:f") for a in args]
    if "--data" in filled and "--test-share" not in filled:
        filled += ["--test-share", "0.25"]
    out = tmp_path / "out"
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        res = CliRunner().invoke(app, ["run", *filled, "--mechanism", "laplace",
                                       "--rounds", "2", "--clients-per-round", "1",
                                       "--out", str(out)])
    finally:
        os.chdir(cwd)
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert not out.exists()


def test_api_takes_option_strings_as_the_enums() -> None:
    """Strings name the same options as the enums (a plain "round-robin" is not silently
    random selection)."""
    from fedqr.sim.config import Aggregation, Selection

    kw = dict(mechanism="laplace", eps=2.0, clip=5.0, rounds=3, clients_per_round=2, seed=1)
    spec = DataSpec(dataset="digits", partition="iid", num_clients=4, seed=1)
    a = fedqr.simulate(data=spec, selection="round-robin", aggregation="paper",  # type: ignore[arg-type]
                       accountant="pure", **kw)  # type: ignore[arg-type]
    b = fedqr.simulate(data=spec, selection=Selection.ROUND_ROBIN,  # type: ignore[arg-type]
                       aggregation=Aggregation.PAPER, **kw)
    assert a.document["runs"] == b.document["runs"]
    assert [c["replies"] for c in a.document["clients"]] == [2, 2, 1, 1]
    with pytest.raises(ValueError, match="selection must be one of"):
        fedqr.simulate(data=spec, selection="best", **kw)  # type: ignore[arg-type]
