"""``fedqr estimate --data FILE``: the same constants as the built-in data set, any model, the
cache, and bad input (exit 2 naming the option, no file)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from fedqr.cli import app
from fedqr.cli.constants import ESTIMATE_VERSION, EstimateSpec
from fedqr.data import DatasetName, DataSpec, FederatedData, PartitionKind
from fedqr.privacy import Mechanism

runner = CliRunner()
CONSTANTS = ("N", "d_i", "p", "mu", "lambda", "G", "Gamma", "Y0", "xi", "q", "Lambda2")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def digits_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built-in digits, three iid clients, written as a data file."""
    built = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.IID, num_clients=3,
                     seed=0).build()
    path = tmp_path_factory.mktemp("data") / "digits3.npz"
    FederatedData.from_client_data(built).to_npz(path)
    return path


@pytest.fixture(scope="module")
def small_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three clients of 40 rows, 5 features, 3 classes, with a test set."""
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("small") / "small.npz"
    np.savez(path, x=rng.standard_normal((120, 5)), y=np.arange(120) % 3,
             client=np.repeat([0, 1, 2], 40), x_test=rng.standard_normal((30, 5)),
             y_test=np.arange(30) % 3)
    return path


def _estimate(args: list[str], out: Path) -> dict[str, Any]:
    res = runner.invoke(app, ["estimate", *args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "the clients' data WITHOUT differential privacy" in said
    # what reads none of it: not --proxy-fraction, which reads a share without privacy
    assert "(--proxy-fraction reads less of it, still without privacy)" in said
    assert ("share of" in said) == ("--proxy-fraction" in args)
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def test_data_file_gives_the_built_in_estimate(digits_file: Path, tmp_path: Path) -> None:
    common = ["--mechanism", "laplace", "--clip", "30", "--eps", "2", "--proxy-fraction", "0.5"]
    own = _estimate(["--data", str(digits_file), "--no-standardize", "--model", "logreg",
                     *common], tmp_path / "own.json")
    built = _estimate(["--dataset", "digits", "--partition", "iid", "--num-clients", "3",
                       *common], tmp_path / "built.json")
    assert {k: own[k] for k in CONSTANTS} == {k: built[k] for k in CONSTANTS}
    assert own["eps_i"] == [2.0] * 3
    est = own["estimate"]
    assert est["reads_private_data"] is True and "WITHOUT differential privacy" in est["warning"]
    digest = FederatedData.from_file(digits_file, standardize=False).digest
    assert est["spec"]["data"] == est["data"]["sha256"] == digest
    assert est["spec"]["dataset"] is None and est["model"]["name"] == "logreg"
    cached = sorted((tmp_path / "cache" / "constants").glob("*.json"))
    assert len(cached) == 2  # one per workload
    again = _estimate(["--data", str(digits_file), "--no-standardize", "--model", "logreg",
                       *common], tmp_path / "again.json")
    assert again == own
    assert sorted((tmp_path / "cache" / "constants").glob("*.json")) == cached
    # the file's default model is linear (an intercept): its own estimate, cached apart
    default = _estimate(["--data", str(digits_file), "--no-standardize", *common],
                        tmp_path / "default.json")
    assert default["estimate"]["model"] == {"name": "linear", "num_params": 650}
    assert len(sorted((tmp_path / "cache" / "constants").glob("*.json"))) == 3


def test_data_file_with_an_mlp(digits_file: Path, tmp_path: Path) -> None:
    doc = _estimate(["--data", str(digits_file), "--model", "mlp", "--hidden", "8",
                     "--mechanism", "gaussian", "--clip", "1", "--proxy-fraction", "0.2"],
                    tmp_path / "mlp.json")
    assert doc["estimate"]["model"]["name"] == "mlp"
    assert doc["p"] == doc["estimate"]["model"]["num_params"] == 64 * 8 + 8 + 8 * 10 + 10
    assert doc["estimate"]["spec"]["model"] == "mlp" and doc["estimate"]["spec"]["hidden"] == "8"
    for key in ("mu", "lambda", "G", "Y0"):
        assert math.isfinite(doc[key]) and doc[key] > 0, key
    assert math.isfinite(doc["Gamma"]) and doc["Gamma"] >= 0
    assert doc["q"] == 0.01 and doc["delta_i"] == [1e-5] * 3


def test_a_model_file_is_estimated_but_not_cached(small_file: Path, tmp_path: Path) -> None:
    model = tmp_path / "net.py"
    model.write_text("from torch import nn\n\n\ndef net(shape, k):\n"
                     "    return nn.Sequential(nn.Linear(shape[0], 4), nn.Tanh(), "
                     "nn.Linear(4, k))\n")
    doc = _estimate(["--data", str(small_file), "--model", f"{model}:net", "--clip", "5"],
                    tmp_path / "c.json")
    assert doc["p"] == 5 * 4 + 4 + 4 * 3 + 3 and doc["estimate"]["model"]["name"] == "net"
    assert not list((tmp_path / "cache").glob("**/*.json"))


@pytest.mark.parametrize(("args", "needle"), [
    (["--data", "nowhere.npz"], "data must be an existing .npz, .csv or .parquet file"),
    (["--data", "{small}", "--dataset", "digits"], "got --dataset=digits with data"),
    (["--data", "{small}", "--partition", "iid"], "got --partition=iid with data"),
    (["--data", "{small}", "--num-clients", "4"], "--num-clients must match the clients"),
    (["--data", "{small}", "--model", "resnet"],
     "model must be logreg, linear, mlp, cnn or FILE.py"),
    (["--data", "{small}", "--model", "mlp", "--hidden", "8,x"], "hidden must be"),
    (["--data", "{small}", "--test-data", "nowhere.npz"], "--test-data must be an existing"),
    (["--test-share", "0.2"], "--test-share needs --data FILE"),
    (["--dataset", "digits", "--delta", "1e-6"], "--delta must be left out for --mechanism "
                                                 "laplace"),
    (["--dataset", "digits", "--sample-rate", "0.5"], "uses each client's full local data"),
    (["--dataset", "digits", "--alpha", "2"], "--alpha must be left out: it sets the "
                                              "concentration of --partition dirichlet"),
    (["--data", "{small}", "--alpha", "2"], "the clients of --data FILE are its own"),
])
def test_bad_data_input_exits_2_naming_the_option(small_file: Path, tmp_path: Path,
                                                  args: list[str], needle: str) -> None:
    out = tmp_path / "never.json"
    res = runner.invoke(app, ["estimate", *[a.format(small=small_file) for a in args],
                              "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert needle in " ".join(res.output.split())
    assert not out.exists()
    assert "without privacy" not in res.output  # nothing was read: no note, only the error


def test_bad_columns_exit_2_naming_the_column(heart_like: Path, tmp_path: Path) -> None:
    out = tmp_path / "never.json"
    res = runner.invoke(app, ["estimate", "--data", str(heart_like), "--test-share", "0.3",
                              "--label-column", "diagnosis", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "diagnosis" in res.output and not out.exists()


@pytest.fixture
def heart_like(tmp_path: Path) -> Path:
    path = tmp_path / "h.csv"
    rows = ["client,label,age,chol"] + [f"{i % 3},{i % 2},{40 + i},{200 + 3 * i}"
                                        for i in range(60)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_the_key_of_a_built_in_estimate_is_the_one_cached_before() -> None:
    """A built-in data set with its paper model keeps the key it had before the model and data
    fields: the sha256 of its fields and the version, as ``EstimateSpec.key`` wrote it."""
    spec = EstimateSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.TWO_DIGITS,
                        num_clients=4, alpha=0.5, mechanism=Mechanism.LAPLACE, clip=30.0,
                        sample_rate=1.0, weight_decay=0.01, proxy_fraction=None, seed=0)
    fields = {"dataset": "digits", "partition": "two-digits", "num_clients": 4, "alpha": 0.5,
              "mechanism": "laplace", "clip": 30.0, "sample_rate": 1.0, "weight_decay": 0.01,
              "proxy_fraction": None, "seed": 0, "gd_steps": 20, "version": ESTIMATE_VERSION}
    expected = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    assert spec.key() == expected
    from dataclasses import replace

    assert replace(spec, model="mlp", hidden="8").key() != expected


def test_a_file_of_one_client_is_named_not_num_clients(tmp_path: Path) -> None:
    path = tmp_path / "one.csv"
    path.write_text("\n".join(["client,label,age"] + [f"a,{i % 2},{40 + i}"
                                                       for i in range(30)]) + "\n")
    out = tmp_path / "never.json"
    res = runner.invoke(app, ["estimate", "--data", str(path), "--test-share", "0.3",
                              "--out", str(out)])
    text = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "--data must hold at least 2 clients for the bound's constants, got 1 client" in text
    assert "--num-clients" not in text and not out.exists()


def test_a_model_with_frozen_parameters_is_estimated_over_the_trainable_ones(
        small_file: Path, tmp_path: Path) -> None:
    model = tmp_path / "frozen.py"
    model.write_text("import torch\nfrom torch import nn\n\n\ndef net(shape, k):\n"
                     "    m = nn.Sequential(nn.Linear(shape[0], 4), nn.Tanh(), nn.Linear(4, k))\n"
                     "    with torch.no_grad():\n        m[0].weight.fill_(0.1)\n"
                     "    m[0].weight.requires_grad_(False)\n    return m\n")
    doc = _estimate(["--data", str(small_file), "--model", f"{model}:net", "--mechanism",
                     "gaussian", "--clip", "1"], tmp_path / "frozen.json")
    assert doc["p"] == 4 + 4 * 3 + 3  # the first layer's bias and the second layer


def test_a_mechanism_without_noise_is_refused_naming_the_private_ones(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    res = runner.invoke(app, ["estimate", "--dataset", "digits", "--mechanism", "none",
                              "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert ("must be a private mechanism (laplace, gaussian, discrete-laplace), got "
            "--mechanism='none'") in " ".join(res.output.split())
    assert not out.exists()
