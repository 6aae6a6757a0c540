"""Planner speed: planning MNIST (N = 10) from scratch, and a re-plan from the cache.

    python bench/twin_planner.py [--repeats 3] [--threads 2] [--mechanism laplace]

Prints the minimum, median and maximum wall time of ``make_plan`` without a cache (goal:
median <= 30 s on 2 cores) and of the same plan again from its cached simulations (goal:
<= 2 s), in-process (the CLI adds its import time, about 2 s for torch).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

from fedqr.data import DatasetName, DataSpec
from fedqr.planner import Scenario, make_plan
from fedqr.privacy import Mechanism


def _scenario(mechanism: Mechanism) -> Scenario:
    laplace = mechanism is Mechanism.LAPLACE
    return Scenario(data=DataSpec(dataset=DatasetName.MNIST, num_clients=10),
                    mechanism=mechanism, eps=(10.0,) if laplace else (1.0,),
                    clip=300.0 if laplace else 10.0, sample_rate=1.0 if laplace else 0.01)


def _stats(label: str, times: list[float]) -> None:
    print(f"{label:28s} min {min(times):7.2f} s  median {statistics.median(times):7.2f} s  "
          f"max {max(times):7.2f} s  ({len(times)} runs)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mechanism", type=Mechanism, default=Mechanism.LAPLACE)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sc = _scenario(args.mechanism)
    fresh, cached = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as cache:
            os.environ["FEDQR_CACHE"] = cache
            started = time.perf_counter()
            plan = make_plan(sc)
            fresh.append(time.perf_counter() - started)
            started = time.perf_counter()
            again = make_plan(sc)
            cached.append(time.perf_counter() - started)
            assert again.from_cache and again.recommended == plan.recommended
    r = plan.recommended
    print(f"plan: T={r.rounds}, b={r.clients_per_round}, q={r.sample_rate:g}, predicted test "
          f"loss {r.mean:.4f} +- {r.stderr:.4f}, {plan.simulated_rounds} twin rounds")
    _stats("plan (no cache)", fresh)
    _stats("re-plan (cached simulations)", cached)


if __name__ == "__main__":
    main()
