"""The generic-model engine: Algorithm 1 against plain loops, ledgers, seeds, real FEMNIST."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fedqr.data import Dataset, load_dataset, make_partition, restrict_test_to_train_writers
from fedqr.models.cnn import PaperCNN
from fedqr.privacy import Mechanism
from fedqr.sim.config import (
    Aggregation,
    EvalTrain,
    LearningRate,
    NoiseSeeding,
    PrivacyConfig,
    Selection,
    SimConfig,
)
from fedqr.sim.network import NetworkOptions, paper_cnn_factory, simulate_network


@pytest.fixture(scope="module")
def digits() -> Dataset:
    """240 training rows of the 8x8 digits (60 per client for 4 clients), 100 test rows."""
    ds = load_dataset("digits")
    return dataclasses.replace(ds, x_train=ds.x_train[:240], y_train=ds.y_train[:240],
                               x_test=ds.x_test[:100], y_test=ds.y_test[:100])


def _iid(ds: Dataset, n: int) -> object:
    return make_partition("iid", labels=ds.y_train, num_clients=n, rng=np.random.default_rng(0))


def _model(ds: Dataset, seed: int) -> PaperCNN:
    return PaperCNN(in_channels=1, image_size=8, num_classes=ds.num_classes,
                    generator=torch.Generator().manual_seed(seed)).double()


def test_no_noise_all_clients_is_gradient_descent(digits: Dataset) -> None:
    """b = N, equal d_i, no noise, no clip: theta follows full-batch GD on F (float32 vs 64)."""
    cfg = SimConfig(num_clients=4, clients_per_round=4, rounds=4, weight_decay=0.01,
                    lr=LearningRate(eta0=0.3, decay=0.1), eval_every=4, train_eval=EvalTrain.EVERY,
                    privacy=PrivacyConfig(mechanism=Mechanism.NONE, clip=math.inf,
                                          sample_rate=1.0))
    res = simulate_network(digits, _iid(digits, 4), cfg, options=NetworkOptions(chunk_rows=50))
    model = _model(digits, cfg.seed)
    x = torch.as_tensor(digits.x_train, dtype=torch.float64).view(-1, 1, 8, 8)
    y = torch.as_tensor(digits.y_train)
    params = list(model.parameters())

    def objective() -> torch.Tensor:
        return F.cross_entropy(model(x), y) + 0.005 * sum(p.pow(2).sum() for p in params)

    losses = []
    for t in range(cfg.rounds):
        loss = objective()
        losses.append(float(loss.detach()))
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p -= cfg.lr.at(t) * g
    expected = torch.cat([p.detach().flatten() for p in params]).numpy()
    np.testing.assert_allclose(res.final_theta[0], expected, atol=2e-5, rtol=0)
    rounds = res.runs[0]["rounds"]
    assert [r["round"] for r in rounds] == [0, 4]
    assert rounds[0]["train_loss"] == pytest.approx(losses[0], abs=1e-5)  # fused in the pass
    assert rounds[1]["train_loss"] == pytest.approx(float(objective().detach()), abs=1e-4)
    assert rounds[1]["train_loss"] < rounds[0]["train_loss"]


def test_clipped_random_selection_matches_a_plain_loop(digits: Dataset) -> None:
    """Random selection, normalized aggregation, l2 clipping, no noise: per-client autograd."""
    part = _iid(digits, 4)
    cfg = SimConfig(num_clients=4, clients_per_round=2, rounds=3, selection=Selection.RANDOM,
                    aggregation=Aggregation.NORMALIZED, lr=LearningRate(eta0=0.5),
                    eval_every=10, seed=3,
                    privacy=PrivacyConfig(mechanism=Mechanism.NONE, clip=0.5, sample_rate=1.0))
    res = simulate_network(digits, part, cfg, options=NetworkOptions(method="vmap"))
    from fedqr.sim.schedule import make_schedule

    sched = make_schedule(num_clients=4, clients_per_round=2, rounds=3,
                          selection=Selection.RANDOM, repeats=1, rng=np.random.default_rng(3))
    model = _model(digits, cfg.seed)
    params = list(model.parameters())
    theta = torch.cat([p.detach().flatten() for p in params])
    for t in range(cfg.rounds):
        replies, weights = [], []
        for i in sched[0, t]:
            idx = part.indices[i]
            total = torch.zeros_like(theta)
            for j in idx:
                xj = torch.as_tensor(digits.x_train[j], dtype=torch.float64).view(1, 1, 8, 8)
                loss = F.cross_entropy(model(xj), torch.as_tensor(digits.y_train[j:j + 1]))
                g = torch.cat([a.flatten() for a in torch.autograd.grad(loss, params)])
                total += g * min(1.0, 0.5 / float(g.norm()))
            g_i = total / len(idx) + cfg.weight_decay * theta
            replies.append(theta - cfg.lr.at(t) * g_i)
            weights.append(len(idx))
        theta = sum(w * r for w, r in zip(weights, replies, strict=True)) / sum(weights)
        torch.nn.utils.vector_to_parameters(theta, params)
    np.testing.assert_allclose(res.final_theta[0], theta.detach().numpy(), atol=2e-5, rtol=0)


def test_gaussian_ledgers_seeds_and_repeats(digits: Dataset) -> None:
    part = _iid(digits, 4)
    cfg = SimConfig(num_clients=4, clients_per_round=2, rounds=4, repeats=2, eval_every=2,
                    train_eval=EvalTrain.EVERY,
                    privacy=PrivacyConfig(mechanism=Mechanism.GAUSSIAN, eps=4.0, delta=1e-5,
                                          clip=1.0, sample_rate=0.5))
    res = simulate_network(digits, part, cfg)
    doc = res.to_json()
    assert res.final_theta.shape == (2, sum(p.numel() for p in _model(digits, 0).parameters()))
    assert not np.array_equal(res.final_theta[0], res.final_theta[1])
    for c in doc["clients"]:
        assert c["replies"] == 2
        assert 0 < c["epsilon_spent"] <= 4.0 * (1 + 1e-9)
        assert 0.0 <= c["clipped_fraction"] <= 1.0 and c["noise_std"] > 0
    rounds = doc["runs"][1]["rounds"]
    assert [r["round"] for r in rounds] == [0, 2, 4]
    assert all(math.isfinite(r["train_loss"]) for r in rounds)
    single = simulate_network(digits, part, dataclasses.replace(cfg, repeats=1))
    np.testing.assert_array_equal(single.final_theta[0], res.final_theta[0])


def test_per_reply_seeding_draws_each_reply_from_its_own_generator(digits: Dataset) -> None:
    part = _iid(digits, 4)
    cfg = SimConfig(num_clients=4, clients_per_round=2, rounds=2, repeats=2, eval_every=10,
                    noise_seeding=NoiseSeeding.PER_REPLY,
                    privacy=PrivacyConfig(mechanism=Mechanism.GAUSSIAN, eps=4.0, clip=1.0,
                                          sample_rate=0.5))
    a = simulate_network(digits, part, cfg)
    b = simulate_network(digits, part, cfg)
    np.testing.assert_array_equal(a.final_theta, b.final_theta)
    batch = simulate_network(digits, part, dataclasses.replace(
        cfg, noise_seeding=NoiseSeeding.BATCH))
    assert not np.array_equal(a.final_theta[0], batch.final_theta[0])


def test_bad_input(digits: Dataset) -> None:
    cfg = SimConfig(num_clients=4, clients_per_round=2, rounds=1)
    with pytest.raises(ValueError, match="partition has 3 clients but num_clients=4"):
        simulate_network(digits, _iid(digits, 3), cfg)
    with pytest.raises(ValueError, match="chunk_rows must be an integer >= 1, got chunk_rows=0"):
        NetworkOptions(chunk_rows=0)
    with pytest.raises(ValueError, match="method must be one of 'ghost', 'vmap', got method="):
        NetworkOptions(method="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="the paper's CNN needs square images"):
        paper_cnn_factory(dataclasses.replace(digits, image_shape=None))


@pytest.fixture(scope="module")
def femnist(femnist_dir: Path) -> Dataset:
    return restrict_test_to_train_writers(load_dataset("femnist", data_dir=femnist_dir))


def test_real_femnist_gaussian_loss_decreases(femnist: Dataset) -> None:
    """The paper's CNN on 57,180 FEMNIST samples of 396 writers, N = b = 10, q = 0.01."""
    part = make_partition("by-writer", labels=femnist.y_train, writers=femnist.writer_train,
                          num_clients=10, rng=np.random.default_rng(0))
    cfg = SimConfig(num_clients=10, clients_per_round=10, rounds=5, eval_every=5,
                    privacy=PrivacyConfig(mechanism=Mechanism.GAUSSIAN, eps=8.0, delta=1e-5,
                                          clip=10.0, sample_rate=0.01),
                    train_eval=EvalTrain.NONE)
    res = simulate_network(femnist, part, cfg)
    first, last = res.runs[0]["rounds"][0], res.runs[0]["rounds"][-1]
    assert first["test_loss"] == pytest.approx(math.log(62), abs=0.05)
    assert last["test_loss"] < first["test_loss"] - 0.3, (first, last)
    assert last["test_accuracy"] > 0.1
    assert all(0 < c["epsilon_spent"] <= 8.0 * (1 + 1e-9) for c in res.to_json()["clients"])
