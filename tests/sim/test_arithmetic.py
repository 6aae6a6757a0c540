"""The engine's mixed arithmetic: the same budgets and noise, training within its tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from fedqr.data import load_dataset, make_partition
from fedqr.privacy import Mechanism
from fedqr.sim.config import Arithmetic, LearningRate, PrivacyConfig, SimConfig
from fedqr.sim.engine import simulate


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def _run(ds, arithmetic: Arithmetic, **privacy):
    part = make_partition("two-digits", labels=ds.y_train, num_clients=5,
                          rng=np.random.default_rng(0))
    cfg = SimConfig(num_clients=5, clients_per_round=3, rounds=30, repeats=12, seed=3,
                    eval_every=30, arithmetic=arithmetic, lr=LearningRate(eta0=0.5),
                    privacy=PrivacyConfig(sample_rate=1.0, **privacy))
    return simulate(ds, part, cfg).to_json()


@pytest.mark.parametrize(("mechanism", "eps", "clip"), [(Mechanism.LAPLACE, 200.0, 10.0),
                                                        (Mechanism.GAUSSIAN, 8.0, 2.0)])
def test_mixed_keeps_the_budgets_and_moves_the_loss_far_less_than_the_noise(
        digits, mechanism: Mechanism, eps: float, clip: float) -> None:
    plain = _run(digits, Arithmetic.FLOAT32, mechanism=mechanism, eps=eps, clip=clip)
    mixed = _run(digits, Arithmetic.MIXED, mechanism=mechanism, eps=eps, clip=clip)
    for a, b in zip(plain["clients"], mixed["clients"], strict=True):
        assert a["noise_std"] == b["noise_std"] and a["epsilon_spent"] == b["epsilon_spent"]
    loss = {name: np.array([run["rounds"][-1]["test_loss"] for run in doc["runs"]])
            for name, doc in (("plain", plain), ("mixed", mixed))}
    assert not np.array_equal(loss["plain"], loss["mixed"])  # the mixed passes did run
    spread = loss["plain"].std(ddof=1)  # repeat to repeat: the noise's effect
    diff = loss["mixed"] - loss["plain"]  # the same seeds: the same noise draws
    assert abs(diff.mean()) < 0.05 * spread
    assert np.abs(diff).max() < 0.2 * spread


def test_arithmetic_is_checked() -> None:
    with pytest.raises(ValueError, match="arithmetic"):
        SimConfig(arithmetic="fast")  # type: ignore[arg-type]
    assert SimConfig(arithmetic="mixed").arithmetic is Arithmetic.MIXED  # type: ignore[arg-type]


def test_mixed_on_rows_that_are_not_coded_says_it_runs_float32(digits) -> None:
    rng = np.random.default_rng(4)
    noisy = type(digits)(name="digits", x_train=digits.x_train + rng.normal(
        scale=0.1, size=digits.x_train.shape).astype(np.float32), y_train=digits.y_train,
        x_test=digits.x_test, y_test=digits.y_test, num_classes=10)
    with pytest.warns(RuntimeWarning, match="not integer-coded"):
        doc = _run(noisy, Arithmetic.MIXED, mechanism=Mechanism.LAPLACE, eps=20.0, clip=10.0)
    plain = _run(noisy, Arithmetic.FLOAT32, mechanism=Mechanism.LAPLACE, eps=20.0, clip=10.0)
    assert [r["rounds"][-1]["test_loss"] for r in doc["runs"]] == [
        r["rounds"][-1]["test_loss"] for r in plain["runs"]]


def test_mixed_with_a_torch_model_says_it_runs_float32(digits) -> None:
    import fedqr

    data = fedqr.FederatedData.from_arrays(
        x=digits.x_train, y=digits.y_train, client=np.arange(len(digits.y_train)) % 3,
        x_test=digits.x_test, y_test=digits.y_test)
    with pytest.warns(RuntimeWarning, match="for softmax regression"):
        fedqr.simulate(data=data, model="mlp", mechanism="laplace", eps=5.0, rounds=2,
                       clients_per_round=2, arithmetic="mixed", hidden=(8,))
