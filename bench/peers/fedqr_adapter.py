"""The one place where bench/peers calls fedqr's engine (update it here when the engine's entry
point changes): ``fedqr.sim.engine.simulate(dataset, partition, config, device=...)`` with a
``fedqr.sim.config.SimConfig``, repeats = 1, test evaluation every round (eval_every = 1).

The budgets only set the noise level, which costs nothing: Laplace eps = 10 per client (as
bench/engine.py), Gaussian eps = 1, delta = 1e-5 (fedqr calibrates z from them with
dp-accounting). Clip, sampling rate, b, N and round-robin selection are the case's.
"""

from __future__ import annotations

from typing import Any

from workload import NUM_CLIENTS, WEIGHT_DECAY, Case, RoundClock, Workload


def run_fedqr(case: Case, wl: Workload, *, rounds: int, warmup: int) -> dict[str, Any]:
    """Run ``warmup + rounds`` rounds of ``case`` in fedqr's engine and time them."""
    from fedqr.privacy import Mechanism
    from fedqr.sim.config import PrivacyConfig, SimConfig
    from fedqr.sim.engine import simulate

    if case.mechanism == "laplace":
        privacy = PrivacyConfig(mechanism=Mechanism.LAPLACE, eps=10.0, clip=case.clip,
                                sample_rate=case.q)
    else:
        privacy = PrivacyConfig(mechanism=Mechanism.GAUSSIAN, eps=1.0, delta=1e-5,
                                clip=case.clip, sample_rate=case.q)

    def config(eval_every: int) -> SimConfig:
        return SimConfig(num_clients=NUM_CLIENTS, clients_per_round=case.b,
                         rounds=warmup + rounds, repeats=1, privacy=privacy,
                         eval_every=eval_every, weight_decay=WEIGHT_DECAY, seed=0)

    def timed(cfg: SimConfig) -> tuple[dict[str, Any], Any]:
        # on_round fires after each round: the first interval starts after round 1 (setup
        # and the first round excluded), so warmup - 1 intervals are skipped to time `rounds`
        clock = RoundClock(warmup=max(warmup - 1, 0))
        result = simulate(wl.dataset, wl.partition, cfg, device="cpu",
                          on_round=lambda _t: clock.tick())
        return dict(clock.summary()), result

    out, result = timed(config(1))
    try:  # the result's layout may change with the engine: these two figures are optional
        out["final_test_loss"] = float(result.runs[0]["rounds"][-1]["test_loss"])
        out["noise_std"] = float(result.clients[0]["noise_std"][0])
    except (AttributeError, KeyError, IndexError, TypeError, ValueError):
        pass
    # the same rounds without the per-round evaluation (only before the first round and after
    # the last): fedqr's evaluation also computes the training objective over all 60,000 rows
    out["eval_off"], _ = timed(config(warmup + rounds + 1))
    out["timed"] = ("fedqr.sim.engine.simulate, repeats=1, eval_every=1: the whole round "
                    "(selection, clipped sums, noise, aggregation, test loss)")
    return out
