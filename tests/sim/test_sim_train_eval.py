"""The training objective's cadence (``SimConfig.train_eval``): every, end, none, sample:N."""

from __future__ import annotations

import dataclasses
import json
import math
from importlib.resources import files
from typing import Any

import jsonschema
import numpy as np
import pytest
import torch

from fedqr.data import Dataset, Partition, load_dataset, make_partition
from fedqr.privacy import Mechanism
from fedqr.sim.config import (
    EvalTrain,
    NoiseSeeding,
    PrivacyConfig,
    SimConfig,
    parse_train_eval,
)
from fedqr.sim.engine import simulate
from fedqr.sim.network import simulate_network
from fedqr.sim.result import SimResult
from fedqr.sim.train_eval import sampled_mean

GAUSSIAN = PrivacyConfig(mechanism=Mechanism.GAUSSIAN, eps=4.0, delta=1e-5, clip=1.0,
                         sample_rate=0.2)
LAPLACE = PrivacyConfig(mechanism=Mechanism.LAPLACE, eps=20.0, clip=50.0, sample_rate=1.0)


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return load_dataset("digits")


@pytest.fixture(scope="module")
def part(digits: Dataset) -> Partition:
    return make_partition("two-digits", labels=digits.y_train, num_clients=5,
                          rng=np.random.default_rng(0))


def _cfg(privacy: PrivacyConfig, mode: str, **kw: Any) -> SimConfig:
    train_eval, rows = parse_train_eval(mode)
    base: dict[str, Any] = {"num_clients": 5, "clients_per_round": 3, "rounds": 6,
                            "repeats": 2, "seed": 7, "eval_every": 2}
    return SimConfig(**{**base, **kw}, privacy=privacy, train_eval=train_eval,
                     train_eval_rows=rows)


def _train(res: SimResult, key: str = "train_loss") -> list[list[Any]]:
    return [[rd.get(key) for rd in run["rounds"]] for run in res.to_json()["runs"]]


def schema() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        files("fedqr").joinpath("sim/result.schema.json").read_text())
    return doc


# -- parsing and validation ---------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("every", (EvalTrain.EVERY, None)), ("end", (EvalTrain.END, None)),
    ("none", (EvalTrain.NONE, None)), (" Sample:500 ", (EvalTrain.SAMPLE, 500)),
    ("sample:2", (EvalTrain.SAMPLE, 2))])
def test_parse_train_eval(text: str, expected: tuple[EvalTrain, int | None]) -> None:
    assert parse_train_eval(text) == expected


@pytest.mark.parametrize("text", ["", "all", "sample", "sample:", "sample:1", "sample:0",
                                  "sample:-5", "sample:1.5", "sample:x", "end:3", "every:10"])
def test_parse_train_eval_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"eval_train must be 'every', 'end', 'none' or "
                                         r"'sample:N' with an integer N >= 2, got eval_train="):
        parse_train_eval(text)


def test_config_default_and_validation() -> None:
    assert SimConfig().train_eval is EvalTrain.END and SimConfig().train_eval_rows is None
    assert SimConfig(train_eval="none").train_eval is EvalTrain.NONE  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="train_eval must be one of 'every', 'end', 'none', "
                                         "'sample', got train_eval='often'"):
        SimConfig(train_eval="often")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="train_eval='sample' needs train_eval_rows, an "
                                         "integer >= 2, got train_eval_rows=None"):
        SimConfig(train_eval=EvalTrain.SAMPLE)
    with pytest.raises(ValueError, match="train_eval_rows must be >= 2, got train_eval_rows=1"):
        SimConfig(train_eval=EvalTrain.SAMPLE, train_eval_rows=1)
    with pytest.raises(ValueError, match=r"train_eval_rows must be an integer, got "
                                         r"train_eval_rows=10\.0"):
        SimConfig(train_eval=EvalTrain.SAMPLE, train_eval_rows=10.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="train_eval_rows is for train_eval='sample' only, got "
                                         "train_eval='end' and train_eval_rows=100"):
        SimConfig(train_eval_rows=100)


def test_more_sampled_rows_than_training_rows_is_refused(digits: Dataset,
                                                         part: Partition) -> None:
    n = digits.num_train
    with pytest.raises(ValueError, match=rf"eval_train must sample at most the {n} training "
                                         rf"rows \(sample:N, N <= {n}\), got "
                                         rf"eval_train='sample:{n + 1}'"):
        simulate(digits, part, _cfg(LAPLACE, f"sample:{n + 1}"))


# -- the setting never touches the training ---------------------------------------------
@pytest.mark.parametrize("privacy", [GAUSSIAN, LAPLACE], ids=["gaussian", "laplace"])
@pytest.mark.parametrize("seeding", list(NoiseSeeding))
def test_replies_are_the_same_whatever_the_setting(digits: Dataset, part: Partition,
                                                   privacy: PrivacyConfig,
                                                   seeding: NoiseSeeding) -> None:
    runs = {mode: simulate(digits, part, _cfg(privacy, mode, noise_seeding=seeding))
            for mode in ("every", "end", "none", "sample:300")}
    every = runs["every"]
    for mode, res in runs.items():
        np.testing.assert_array_equal(res.final_theta, every.final_theta, err_msg=mode)
        assert _train(res, "test_loss") == _train(every, "test_loss"), mode
        assert _train(res, "test_accuracy") == _train(every, "test_accuracy"), mode
        assert [c["clipped_fraction"] for c in res.clients] == \
            [c["clipped_fraction"] for c in every.clients]


def test_torch_model_replies_are_the_same_whatever_the_setting(digits: Dataset,
                                                               part: Partition) -> None:
    runs = {mode: simulate_network(digits, part, _cfg(GAUSSIAN, mode, rounds=3, eval_every=1))
            for mode in ("every", "end", "sample:200")}
    for mode, res in runs.items():
        np.testing.assert_array_equal(res.final_theta, runs["every"].final_theta, err_msg=mode)
        assert _train(res, "test_loss") == _train(runs["every"], "test_loss"), mode


# -- what each mode reports ------------------------------------------------------------------
@pytest.mark.parametrize("privacy", [GAUSSIAN, LAPLACE], ids=["gaussian", "laplace"])
def test_every_end_none(digits: Dataset, part: Partition, privacy: PrivacyConfig) -> None:
    every, end, none = (simulate(digits, part, _cfg(privacy, mode))
                        for mode in ("every", "end", "none"))
    for run in _train(every):
        assert len(run) == 4 and all(math.isfinite(v) for v in run)
        assert run[-1] < run[0]
    for run_end, run_every in zip(_train(end), _train(every), strict=True):
        assert run_end[:-1] == [None] * 3
        assert run_end[-1] == run_every[-1]  # the same full pass over the training rows
    assert _train(none) == [[None] * 4] * 2
    for res in (every, end, none):
        doc = json.loads(json.dumps(res.to_json()))
        jsonschema.validate(doc, schema())
        assert doc["diverged"] is False and doc["diverged_round"] is None
        assert all(r["diverged_round"] is None for r in doc["runs"])
        assert all("train_loss_stderr" not in rd for r in doc["runs"] for rd in r["rounds"])
        assert doc["config"]["train_eval"] == res.config.train_eval.value


def test_a_nan_training_objective_still_marks_divergence(digits: Dataset,
                                                         part: Partition) -> None:
    res = simulate(digits, part, _cfg(LAPLACE, "every"))
    bad = dataclasses.replace(res, runs=[dict(r) for r in res.runs])
    bad.runs[1]["rounds"] = [dict(rd) for rd in bad.runs[1]["rounds"]]
    bad.runs[1]["rounds"][2]["train_loss"] = math.nan
    doc = bad.to_json()
    assert doc["diverged"] is True and doc["diverged_round"] == 4
    assert [r["diverged_round"] for r in doc["runs"]] == [None, 4]


@pytest.mark.parametrize("privacy", [GAUSSIAN, LAPLACE], ids=["gaussian", "laplace"])
def test_sampled_estimate_is_within_its_standard_error(digits: Dataset, part: Partition,
                                                       privacy: PrivacyConfig) -> None:
    """Over 2 repeats x 10 evaluations after the first, every estimate lies within 4 standard
    errors of the exact objective and the standardised errors look like draws of N(0, 1)."""
    kw = {"rounds": 20, "eval_every": 2}
    exact = _train(simulate(digits, part, _cfg(privacy, "every", **kw)))
    sampled = simulate(digits, part, _cfg(privacy, "sample:200", **kw))
    est, se = _train(sampled), _train(sampled, "train_loss_stderr")
    for er, xr, sr in zip(est, exact, se, strict=True):  # theta_0 = 0: every row's loss log k
        assert sr[0] == 0.0 and er[0] == pytest.approx(xr[0], rel=1e-6)
        assert all(s > 0 for s in sr[1:])
    z = [(e - x) / s for er, xr, sr in zip(est, exact, se, strict=True)
         for e, x, s in zip(er[1:], xr[1:], sr[1:], strict=True)]
    assert max(abs(v) for v in z) < 4, z
    assert abs(float(np.mean(z))) < 1.5 and 0.3 < float(np.std(z)) < 2.0, z
    jsonschema.validate(json.loads(json.dumps(sampled.to_json())), schema())


def test_every_row_sampled_is_the_exact_objective(digits: Dataset, part: Partition) -> None:
    """sample:n (every training row) gives the exact objective and a zero standard error,
    for softmax regression and for a torch model (the paper's CNN on 8x8 digits)."""
    n = digits.num_train
    for run in (simulate, simulate_network):
        exact = _train(run(digits, part, _cfg(GAUSSIAN, "every", rounds=2, eval_every=1)))
        full = run(digits, part, _cfg(GAUSSIAN, f"sample:{n}", rounds=2, eval_every=1))
        np.testing.assert_allclose(np.array(_train(full)), np.array(exact), rtol=1e-5)
        assert _train(full, "train_loss_stderr") == [[0.0] * 3] * 2


def test_sampled_rows_come_from_their_own_seeded_stream(digits: Dataset,
                                                        part: Partition) -> None:
    one, two = (simulate(digits, part, _cfg(GAUSSIAN, "sample:100")) for _ in range(2))
    assert _train(one) == _train(two)
    other = simulate(digits, part, _cfg(GAUSSIAN, "sample:100", seed=8))
    assert _train(other) != _train(one)


def test_sampled_mean_and_stderr() -> None:
    losses = torch.tensor([[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 2.0, 2.0]], dtype=torch.float64)
    mean, se = sampled_mean(losses, population=8)
    assert mean == [2.5, 2.0]
    assert se[0] == pytest.approx(math.sqrt(np.var([1, 2, 3, 4], ddof=1) / 4 * (1 - 4 / 8)))
    assert se[1] == 0.0
    assert sampled_mean(losses, population=4)[1] == [0.0, 0.0]
