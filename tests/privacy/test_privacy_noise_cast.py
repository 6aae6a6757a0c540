"""Noise calibrated in float64 to spend a budget exactly is drawn in float32 at least as large:
the cast rounds up, so no reply is less noisy than its calibration (round to nearest lost up
to 6e-8 of the scale, an overspend of as much of epsilon)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedqr.privacy import Accountant, Mechanism, continuous, mechanism_for, noise_tensor
from fedqr.sim.budget import plan_client_privacy
from fedqr.sim.config import PrivacyConfig, Selection, SimConfig
from fedqr.sim.loop import _Fixed
from fedqr.sim.schedule import make_schedule
from fedqr.sim.streams import Streams


def test_the_float32_value_is_the_least_float32_at_or_above() -> None:
    v = np.random.default_rng(0).uniform(1e-4, 1e4, 100_000)
    t = noise_tensor(v)
    assert t.dtype == torch.float32
    assert (t.double().numpy() >= v).all()
    one_down = np.nextafter(t.numpy(), np.float32(0)).astype(np.float64)
    assert (one_down < v).all()  # the least such float32
    assert noise_tensor(np.array([0.5, 3.0])).tolist() == [0.5, 3.0]  # representable: kept
    assert noise_tensor(v, dtype=torch.float64).numpy().tolist() == v.tolist()


def test_a_laplace_draw_uses_a_scale_at_least_the_calibrated_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = mechanism_for(Mechanism.LAPLACE)
    used: list[torch.Tensor] = []

    def sample(scale: torch.Tensor, shape: tuple[int, ...], *,
               generator: torch.Generator) -> torch.Tensor:
        used.append(scale)
        return torch.zeros(shape, dtype=scale.dtype)

    monkeypatch.setattr(continuous, "sample_laplace", sample)
    rng = np.random.default_rng(1)
    for _ in range(2000):
        cal = spec.calibrate(replies=3, eps=float(rng.uniform(1e-2, 1e2)), delta=0.0, clip=1.0,
                             sample_rate=1.0, size=int(rng.integers(1, 10_000)),
                             accountant=Accountant.PURE)
        spec.draw(std=noise_tensor([cal.std]), param=torch.zeros(1, dtype=torch.float64),
                  shape=(1, 4), generator=torch.Generator())
        assert used[-1].dtype == torch.float32
        assert float(used[-1]) >= cal.param


def test_the_engine_s_noise_stds_are_at_least_the_calibrated_ones() -> None:
    config = SimConfig(num_clients=3, clients_per_round=2, rounds=7, privacy=PrivacyConfig(
        mechanism=Mechanism.GAUSSIAN, eps=(0.7, 1.3, 2.9), delta=1e-5, clip=1.7,
        sample_rate=0.03), seed=0)
    sizes = np.array([101, 233, 57])
    schedule = make_schedule(num_clients=3, clients_per_round=2, rounds=7,
                             selection=Selection.ROUND_ROBIN, repeats=1,
                             rng=np.random.default_rng(0))
    privacy = plan_client_privacy(config, sizes=sizes, schedule=schedule)
    fixed = _Fixed.of(config, privacy, sizes=sizes, groups=np.zeros(1, dtype=np.int64),
                      streams=Streams(config=config, device=torch.device("cpu"), batched=True),
                      tallies=torch.zeros(5, 1, 3, dtype=torch.float64), batched=True)
    assert fixed.noise_std.dtype == torch.float32
    assert (fixed.noise_std.double().numpy() >= privacy.noise_std).all()
