"""One reply, three paths: the batched engine, the network engine and the Flower client give
bit-identical replies for the same inputs and generator state (logistic regression and CNN)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fedqr.data import DatasetName, PartitionKind, load_dataset, make_partition
from fedqr.flower.client_logic import ClientData, answer_round, compute_reply
from fedqr.flower.config import FlowerRunConfig
from fedqr.models.factory import ModelName, flat_parameters
from fedqr.privacy import Mechanism
from fedqr.sim.budget import plan_client_privacy
from fedqr.sim.config import Aggregation, NoiseSeeding, PrivacyConfig, SimConfig
from fedqr.sim.engine import simulate
from fedqr.sim.network import paper_cnn_factory, simulate_network
from fedqr.sim.schedule import make_schedule

CASES = [(Mechanism.LAPLACE, 1.0, 20.0), (Mechanism.GAUSSIAN, 0.3, 3.0),
         (Mechanism.DISCRETE_LAPLACE, 1.0, 20.0)]


def _one_reply_config(mechanism: Mechanism, q: float, clip: float) -> SimConfig:
    """One round, one client (client 0), weight 1: the engine's new theta *is* the reply."""
    return SimConfig(num_clients=3, clients_per_round=1, rounds=1,
                     aggregation=Aggregation.NORMALIZED, noise_seeding=NoiseSeeding.PER_REPLY,
                     privacy=PrivacyConfig(mechanism=mechanism, eps=2.0, clip=clip,
                                           sample_rate=q), seed=4)


def _plan(cfg: SimConfig, sizes: np.ndarray, num_params: int) -> tuple[float, float]:
    sched = make_schedule(num_clients=3, clients_per_round=1, rounds=1, selection=cfg.selection,
                          repeats=1, rng=np.random.default_rng(cfg.seed))
    priv = plan_client_privacy(cfg, sizes=sizes, schedule=sched, num_params=num_params)
    return float(priv.noise_std[0, 0]), float(priv.noise_param[0, 0])


@pytest.fixture(scope="module")
def digits():
    ds = load_dataset(DatasetName.DIGITS)
    part = make_partition(PartitionKind.TWO_DIGITS, labels=ds.y_train, num_clients=3,
                          rng=np.random.default_rng(0))
    return ds, part


@pytest.mark.parametrize(("mechanism", "q", "clip"), CASES)
def test_logreg_engine_and_flower_client_replies_are_bit_identical(
        digits, mechanism: Mechanism, q: float, clip: float) -> None:
    ds, part = digits
    cfg = _one_reply_config(mechanism, q, clip)
    engine = simulate(ds, part, cfg).final_theta[0]
    std, param = _plan(cfg, part.sizes, ds.num_classes * ds.num_features)
    idx = part.indices[0]
    data = ClientData(x=ds.x_train[idx], y=ds.y_train[idx], num_classes=ds.num_classes)
    theta0 = np.zeros((ds.num_classes, ds.num_features), dtype=np.float32)
    reply, _, _ = compute_reply(data, theta0, sim=cfg, client=0, round=0, noise_std=std,
                                noise_param=param)
    assert np.array_equal(reply, engine)


@pytest.mark.parametrize(("mechanism", "q", "clip"), CASES)
def test_cnn_network_engine_and_flower_client_replies_are_bit_identical(
        digits, mechanism: Mechanism, q: float, clip: float) -> None:
    ds, part = digits
    cfg = _one_reply_config(mechanism, q, clip)
    factory = paper_cnn_factory(ds)
    engine = simulate_network(ds, part, cfg, model_factory=factory).final_theta[0]
    theta0 = flat_parameters(factory(torch.Generator().manual_seed(cfg.seed))).numpy()
    std, param = _plan(cfg, part.sizes, theta0.size)
    idx = part.indices[0]
    data = ClientData(x=ds.x_train[idx], y=ds.y_train[idx], num_classes=ds.num_classes,
                      image_shape=(1, 8, 8), model=ModelName.CNN)
    reply, _, _ = compute_reply(data, theta0, sim=cfg, client=0, round=0, noise_std=std,
                                noise_param=param)
    assert np.array_equal(reply, engine)


@pytest.mark.slow
def test_flower_femnist_trains_the_cnn_and_replies_as_the_network_engine(
        tmp_path: Path, femnist_dir: Path) -> None:
    """Real data: a FEMNIST Flower client answers with the network engine's reply."""
    from fedqr.flower.server_logic import ServerRun

    cfg = FlowerRunConfig(num_clients=2, clients_per_round=1, rounds=1,
                          dataset=DatasetName.FEMNIST, data_dir=str(femnist_dir),
                          fraction=0.002, partition=PartitionKind.IID,
                          mechanism=Mechanism.GAUSSIAN, clip=3.0, sample_rate=0.5,
                          aggregation=Aggregation.NORMALIZED, seed=1)
    run = ServerRun.start(cfg)
    assert run.kernel.name == "cnn" and run.theta.shape == (1, 110_526)
    rep = answer_round(cfg, client=0, round=0, theta=run.theta_numpy(), run_key="r",
                       state_dir=tmp_path / "client-0")
    ds, part = cfg.load_data()
    engine = simulate_network(ds, part, cfg.sim_config())
    assert np.array_equal(rep.theta, engine.final_theta[0])
    run.record(0)
    doc = run.result()
    assert doc["provenance"]["torch_version"] == torch.__version__
    model = doc["provenance"]["model"]
    assert {k: model[k] for k in ("name", "num_params", "per_sample")} == {
        "name": "cnn", "num_params": 110_526, "per_sample": "ghost"}  # as fedqr run records it
    assert sum(math.prod(s) for s in model["parameter_shapes"].values()) == 110_526
