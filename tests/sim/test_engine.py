"""The vectorised engine against Algorithm 1 written plainly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedqr.data import load_dataset, make_partition
from fedqr.privacy import Accountant, Mechanism
from fedqr.sim.config import Aggregation, LearningRate, PrivacyConfig, Selection, SimConfig
from fedqr.sim.engine import simulate

from .reference import reference_run


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def _part(ds, n, kind="two-digits", seed=0):
    return make_partition(kind, labels=ds.y_train, num_clients=n,
                          rng=np.random.default_rng(seed), alpha=0.5)


def test_no_noise_infinite_clip_is_plain_full_batch_gd(digits) -> None:
    """b = N, equal d_i, no noise, no clip: FedSGD-DPC is gradient descent on F, to 1e-6."""
    n_clients = 4
    part = _part(digits, n_clients, "iid")
    keep = np.concatenate([ix[: min(part.sizes)] for ix in part.indices])  # equal d_i
    ds = type(digits)(name="digits", x_train=digits.x_train[keep], y_train=digits.y_train[keep],
                      x_test=digits.x_test, y_test=digits.y_test, num_classes=10)
    part = _part(ds, n_clients, "iid")
    cfg = SimConfig(num_clients=n_clients, clients_per_round=n_clients, rounds=25,
                    lr=LearningRate(eta0=0.3, decay=0.05), weight_decay=0.01,
                    privacy=PrivacyConfig(mechanism=Mechanism.NONE, clip=math.inf,
                                          sample_rate=1.0))
    res = simulate(ds, part, cfg)
    x = torch.as_tensor(ds.x_train, dtype=torch.float64)
    y = torch.as_tensor(ds.y_train)
    theta = torch.zeros(10, x.shape[1], dtype=torch.float64, requires_grad=True)
    for t in range(cfg.rounds):
        loss = torch.nn.functional.cross_entropy(x @ theta.T, y) + 0.005 * theta.pow(2).sum()
        (g,) = torch.autograd.grad(loss, theta)
        theta = (theta - cfg.lr.at(t) * g).detach().requires_grad_(True)
    np.testing.assert_allclose(res.final_theta[0], theta.detach().numpy(), atol=1e-6, rtol=0)


@pytest.mark.slow  # the Gaussian cases: 10 RDP calibrations
@pytest.mark.parametrize(
    ("mechanism", "clip", "q", "b", "selection", "aggregation"),
    [
        (Mechanism.LAPLACE, 20.0, 1.0, 2, Selection.ROUND_ROBIN, Aggregation.PAPER),
        (Mechanism.LAPLACE, 20.0, 1.0, 3, Selection.RANDOM, Aggregation.NORMALIZED),
        (Mechanism.GAUSSIAN, 3.0, 0.2, 5, Selection.ROUND_ROBIN, Aggregation.PAPER),
        (Mechanism.GAUSSIAN, 3.0, 0.3, 2, Selection.RANDOM, Aggregation.PAPER),
        (Mechanism.NONE, 2.0, 1.0, 3, Selection.ROUND_ROBIN, Aggregation.NORMALIZED),
    ],
)
def test_engine_equals_per_client_loop(digits, mechanism, clip, q, b, selection,
                                       aggregation) -> None:
    """Same seed, same noise draws: batched engine == per-client autograd loop."""
    part = _part(digits, 5, "dirichlet", seed=3)  # unequal d_i on purpose
    # heterogeneous budgets; one budget under random selection, where every repeat's reply
    # counts differ and each (R_i, eps_i) pair would need its own calibration
    eps = 2.0 if selection is Selection.RANDOM else (2.0, 3.0, 4.0, 5.0, 8.0)
    cfg = SimConfig(num_clients=5, clients_per_round=b, rounds=6, repeats=3, seed=11,
                    selection=selection, aggregation=aggregation,
                    lr=LearningRate(eta0=0.2, decay=0.1),
                    privacy=PrivacyConfig(mechanism=mechanism, eps=eps,
                                          delta=1e-5, clip=clip, sample_rate=q,
                                          accountant=Accountant.RDP), chunk_rows=64)
    res = simulate(digits, part, cfg)
    ref = reference_run(digits, part, cfg)
    np.testing.assert_allclose(res.final_theta, ref, atol=2e-5, rtol=1e-4)


def test_repeats_are_independent_and_seeded(digits) -> None:
    part = _part(digits, 5)
    cfg = SimConfig(num_clients=5, clients_per_round=5, rounds=5, repeats=3, seed=1,
                    privacy=PrivacyConfig(mechanism=Mechanism.GAUSSIAN, eps=1.0, clip=3.0,
                                          sample_rate=0.2))
    a, b = simulate(digits, part, cfg), simulate(digits, part, cfg)
    np.testing.assert_array_equal(a.final_theta, b.final_theta)
    assert not np.allclose(a.final_theta[0], a.final_theta[1])
    other = simulate(digits, part, SimConfig(**{**cfg.__dict__, "seed": 2}))
    assert not np.allclose(a.final_theta, other.final_theta)


def test_budget_is_spent_exactly_and_reported(digits) -> None:
    part = _part(digits, 4)
    cfg = SimConfig(num_clients=4, clients_per_round=3, rounds=7, repeats=2,
                    privacy=PrivacyConfig(mechanism=Mechanism.LAPLACE, eps=(1.0, 2.0, 3.0, 4.0),
                                          clip=10.0, sample_rate=1.0))
    res = simulate(digits, part, cfg)
    doc = res.to_json()
    replies = [c["replies"] for c in doc["clients"]]
    assert sum(replies) == 3 * 7 and max(replies) - min(replies) <= 1
    for c in doc["clients"]:
        assert c["epsilon_spent"] == pytest.approx(c["epsilon_budget"], rel=1e-12)
        scale = 2 * c["replies"] * 10.0 / (c["num_samples"] * c["epsilon_budget"])
        assert c["noise_std"] == pytest.approx(math.sqrt(2) * scale)
    spent = [rd["epsilon_spent"] for rd in doc["runs"][0]["rounds"]]
    assert spent[0] == [0.0] * 4
    assert np.all(np.diff(np.array(spent), axis=0) >= 0)
    assert len(doc["runs"][0]["rounds"]) == cfg.rounds + 1


def test_eval_every_keeps_first_and_last(digits) -> None:
    part = _part(digits, 4)
    cfg = SimConfig(num_clients=4, clients_per_round=2, rounds=10, eval_every=4,
                    privacy=PrivacyConfig(mechanism=Mechanism.NONE, clip=math.inf,
                                          sample_rate=1.0))
    rounds = [r["round"] for r in simulate(digits, part, cfg).runs[0]["rounds"]]
    assert rounds == [0, 4, 8, 10]
