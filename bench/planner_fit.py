"""Check the planner's fitted fine grid: simulate every fitted horizon and compare.

Plans MNIST (N = 10, Gaussian eps 1, q = 0.01, the speed benchmark's scenario), then
simulates each schedule whose prediction was read off the fitted curve with fresh twin draws
(another seed), and prints fitted against simulated loss, their difference in combined
standard errors, and what simulating them cost.

    FEDQR_DATA=../shared/data python bench/planner_fit.py
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import torch

from fedqr.data import DatasetName, DataSpec
from fedqr.planner import ProxyChoice, Scenario, SearchSettings, make_plan
from fedqr.planner.plan import _proxy
from fedqr.planner.search import Searcher
from fedqr.privacy import Mechanism


def main() -> None:
    torch.set_num_threads(2)
    os.environ["FEDQR_CACHE"] = tempfile.mkdtemp()
    sc = Scenario(data=DataSpec(dataset=DatasetName.MNIST, num_clients=10),
                  mechanism=Mechanism.GAUSSIAN, eps=(1.0,), clip=10.0, sample_rate=0.01)
    plan = make_plan(sc)
    fitted = [p for p in plan.predictions if p.fitted]
    real = sc.data.build()
    twin, _ = _proxy(sc, ProxyChoice(), real, real.partition.sizes, sc.spec.norm,
                     torch.device("cpu"))
    check = Searcher(scenario=sc, proxy=twin, settings=SearchSettings(seed=12345),
                     device=torch.device("cpu"))
    arms: dict[tuple[int, float], list[int]] = {}
    for p in fitted:
        arms.setdefault((p.clients_per_round, p.sample_rate), []).append(p.rounds)
    started = time.perf_counter()
    for (b, q), ts in arms.items():
        check.evaluate(b, q, ts)
    wall = time.perf_counter() - started
    sim = {(p.clients_per_round, p.sample_rate, p.rounds): p for p in check.predictions()}
    z = []
    for p in sorted(fitted, key=lambda p: (p.clients_per_round, p.rounds)):
        s = sim[(p.clients_per_round, p.sample_rate, p.rounds)]
        z.append((p.mean - s.mean) / float(np.hypot(p.stderr, s.stderr)))
        print(f"b={p.clients_per_round} T={p.rounds}: fitted {p.mean:.4f} +- {p.stderr:.4f}, "
              f"simulated {s.mean:.4f} +- {s.stderr:.4f}, difference {z[-1]:+.2f} se")
    print(f"{len(fitted)} fitted schedules; max |difference| {max(map(abs, z), default=0):.2f} "
          f"se; simulating them: {check.simulated_rounds} twin rounds, {wall:.1f} s "
          f"(the plan: {plan.simulated_rounds} rounds, {plan.wall_time_s:.1f} s)")


if __name__ == "__main__":
    main()
