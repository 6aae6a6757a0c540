"""Per-reply seeding in the engine: a reply's draws depend on (seed, repeat, round, client) only."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedqr.data import load_dataset, make_partition
from fedqr.privacy import Mechanism
from fedqr.sim.config import LearningRate, NoiseSeeding, PrivacyConfig, SimConfig
from fedqr.sim.engine import NOISE_STREAM, SAMPLE_STREAM, reply_generator, simulate


def test_default_is_the_batch_generator() -> None:
    assert SimConfig().noise_seeding is NoiseSeeding.BATCH


def test_reply_generators_are_distinct_and_reproducible() -> None:
    def draw(**kw: int) -> float:
        args = {"seed": 1, "repeat": 0, "round": 2, "client": 3, "stream": NOISE_STREAM, **kw}
        return float(reply_generator(**args).initial_seed())

    assert draw() == draw()
    others = {draw(seed=2), draw(repeat=1), draw(round=3), draw(client=4),
              draw(stream=SAMPLE_STREAM)}
    assert draw() not in others and len(others) == 5


@pytest.mark.parametrize("mechanism", [Mechanism.GAUSSIAN, Mechanism.LAPLACE])
def test_a_repeat_does_not_depend_on_the_batch_it_runs_in(mechanism: Mechanism) -> None:
    ds = load_dataset("digits")
    part = make_partition("iid", labels=ds.y_train, num_clients=4, rng=np.random.default_rng(0))
    q = 0.3 if mechanism is Mechanism.GAUSSIAN else 1.0
    cfg = SimConfig(num_clients=4, clients_per_round=3, rounds=3, repeats=3, seed=9,
                    lr=LearningRate(eta0=0.3), noise_seeding=NoiseSeeding.PER_REPLY,
                    privacy=PrivacyConfig(mechanism=mechanism, eps=3.0, clip=5.0,
                                          sample_rate=q))
    batch = simulate(ds, part, cfg)
    alone = simulate(ds, part, dataclasses.replace(cfg, repeats=1))
    # the same draws; the arithmetic may differ in the last bits, as one repeat (10 columns)
    # multiplies the sparse rows and three (30) may not (fedqr.models.sparse_rows.pays)
    np.testing.assert_allclose(batch.final_theta[:1], alone.final_theta, rtol=1e-5,
                               atol=1e-6)
    assert not np.allclose(batch.final_theta[0], batch.final_theta[1])
