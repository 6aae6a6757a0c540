"""Do the twin's bfloat16 products change a plan? Plan every logistic scenario both ways.

Plans, from scratch, every scenario of ``bench/planner_suite.py`` (``SCENARIOS``, the 4
held-out ones of seed 20261123 and ``--fresh`` more of a seed of your choosing) and every
logistic-regression plan of ``bench/planner_suite_models.py`` (``CASES`` and ``HELD_OUT``,
each data use), once with ``FEDQR_TWIN_PRODUCTS=float32`` and once with ``bfloat16``, and
prints per plan whether the recommended (T, b, q) is the same, both predicted losses and
their relative difference; the last line counts the same plans and the largest difference.
Where every schedule is the same, the suites' regrets (measured on real runs of the
schedules) hold for either format.

    FEDQR_DATA=... PYTHONPATH=src python bench/twin_products_plans.py [--fresh 6 --seed S]
        [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import torch
from planner_suite import SCENARIOS, held_out  # bench/ is on sys.path when run as a script
from planner_suite_models import CASES, HELD_OUT, _plan, _uses

from fedqr.planner import make_plan


def _suite_plan(case: Any) -> dict[str, Any]:
    started = time.perf_counter()
    plan = make_plan(case.scenario(), use_cache=False)
    r = plan.recommended
    return {"T": r.rounds, "b": r.clients_per_round, "q": r.sample_rate, "predicted": r.mean,
            "stderr": r.stderr, "wall_s": time.perf_counter() - started}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--fresh", type=int, default=6, help="more held-out suite scenarios")
    ap.add_argument("--seed", type=int, default=20261127, help="their seed")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    jobs: list[tuple[str, Any]] = [
        (case.name, lambda case=case: _suite_plan(case))
        for case in [*SCENARIOS, *held_out(4, 20261123), *held_out(args.fresh, args.seed)]]
    jobs += [(f"{case.name} {label}", lambda case=case, use=use, budget=budget:
              _plan(case, use, budget))
             for case in [*CASES, *HELD_OUT] if case.model == "logreg"
             for label, (use, budget) in _uses(case).items()]
    same, worst = 0, 0.0
    for name, plan in jobs:
        got = {}
        for products in ("float32", "bfloat16"):
            os.environ["FEDQR_TWIN_PRODUCTS"] = products
            got[products] = plan()
        a, b = got["float32"], got["bfloat16"]
        alike = (a["T"], a["b"], a["q"]) == (b["T"], b["b"], b["q"])
        rel = b["predicted"] / a["predicted"] - 1 if a["predicted"] else 0.0
        same += alike
        worst = max(worst, abs(rel))
        print(f"{name:50s} {'same' if alike else 'DIFF'} float32 ({a['T']},{a['b']},{a['q']:g}) "
              f"{a['predicted']:.4f} +- {a['stderr']:.4f} {a['wall_s']:.1f} s | bfloat16 "
              f"({b['T']},{b['b']},{b['q']:g}) {b['predicted']:.4f} {b['wall_s']:.1f} s | "
              f"{rel:+.2e}", flush=True)
    print(f"{same} of {len(jobs)} plans the same; largest relative difference of the "
          f"predicted loss {worst:.2e}")


if __name__ == "__main__":
    main()
