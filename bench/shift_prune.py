"""Which candidates may the proxy shift leave out? ``fedqr.planner.candidates.far_behind``.

The proxy shift simulates the search's best schedule and the best schedule of the next two
arms (the candidates) on the plan's proxy and its alternatives. A candidate whose search loss
is far above the first's (``far_behind``: more than the larger of ``PRUNE_SHARE`` and
``PRUNE_SE`` combined standard errors, plus the first's spread over the shift's runs) is no
longer simulated again. This bench plans every logistic plan of ``bench/twin_draws_plans.py``
(the suites, their held-out scenarios and the logistic plans of the model suites, each data
use) and, with ``--models``, the MLP plans of ``bench/planner_suite_models.py``, with every
candidate simulated (the rule switched off), and prints for each candidate the rule would
leave out its loss on the shift's runs against the first's: the lowest gap over the runs,
whether :func:`fedqr.planner.candidates.confirm` would have recommended it, and whether it was the
best candidate on any alternative (the plan's ``recommended_still_best``). The last lines
count them and the share of the shift's column rounds (b x T x runs) they took.

    FEDQR_DATA=... PYTHONPATH=src python bench/shift_prune.py [--fresh 6]
        [--models | --models-only] [--threads 2]
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from planner_suite_models import CASES, HELD_OUT, _plan, _uses
from twin_draws_plans import _jobs  # bench/ is on sys.path when run as a script

import fedqr.planner.shift as shift
from fedqr.planner.candidates import PRUNE_SE, PRUNE_SHARE, schedule_key, spread

CONFIRM = shift.confirm
"""The shift's own choice among the candidates (kept before :func:`_captured` wraps it)."""


def _captured() -> list[tuple[list[Any], list[dict[Any, float]]]]:
    """Switch the rule off and record every shift's candidates and losses (via ``confirm``)."""
    seen: list[tuple[list[Any], list[dict[Any, float]]]] = []
    real = shift.confirm

    def spy(chosen: list[Any], losses: list[dict[Any, float]]) -> int:
        seen.append((list(chosen), [dict(run) for run in losses]))
        return real(chosen, losses)

    shift.far_behind = lambda first, p, *, spread: False  # type: ignore[assignment]
    shift.confirm = spy  # type: ignore[assignment]
    return seen


def _rule(far_behind: Any, chosen: list[Any], losses: list[dict[Any, float]]
          ) -> list[dict[str, Any]]:
    """Each candidate after the first: whether the rule leaves it out, and what it missed."""
    first = chosen[0]
    moved = spread([run[schedule_key(first)] for run in losses])
    picked = CONFIRM(chosen, losses)
    rows = []
    for i, p in enumerate(chosen[1:], start=1):
        gaps = [run[schedule_key(p)] / run[schedule_key(first)] - 1 for run in losses]
        rows.append({
            "out": far_behind(first, p, moved=moved), "search_gap": p.mean / first.mean - 1,
            "lowest_shift_gap": min(gaps), "confirmed": picked == i,
            "best_on": sum(min(run, key=lambda k: run[k]) == schedule_key(p) for run in losses[1:]),
            "share": p.clients_per_round * p.rounds})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--fresh", type=int, default=6, help="more held-out suite scenarios")
    ap.add_argument("--seed", type=int, default=20261127)
    ap.add_argument("--models", action="store_true", help="the MLP plans too")
    ap.add_argument("--models-only", action="store_true", help="the MLP plans alone")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    far_behind = shift.far_behind
    seen = _captured()
    jobs = {} if args.models_only else {
        name: plan for name, (plan, _) in _jobs(args.fresh, args.seed).items()}
    if args.models or args.models_only:
        for case in [*CASES, *HELD_OUT]:
            if case.model == "logreg":
                continue
            for label, (use, budget) in _uses(case).items():
                jobs[f"{case.name} {label}"] = (
                    lambda case=case, use=use, budget=budget: _plan(case, use, budget))
    counts = {"candidates": 0, "out": 0, "missed": 0}
    work, saved = 0, 0
    for name, plan in jobs.items():
        before = len(seen)
        plan()
        if len(seen) == before:
            print(f"{name:55s} no shift", flush=True)
            continue
        chosen, losses = seen[-1]
        rows = _rule(far_behind, chosen, losses)
        work += chosen[0].clients_per_round * chosen[0].rounds + sum(r["share"] for r in rows)
        for r in rows:
            counts["candidates"] += 1
            if not r["out"]:
                continue
            counts["out"] += 1
            saved += r["share"]
            missed = r["confirmed"] or r["best_on"] > 0
            counts["missed"] += missed
        text = "; ".join(
            f"{'OUT' if r['out'] else 'in '} search {r['search_gap']:+.1%} shift min "
            f"{r['lowest_shift_gap']:+.1%}" + (" CONFIRMED" if r["confirmed"] else "")
            + (f" best on {r['best_on']}" if r["best_on"] else "") for r in rows)
        text = text or "only the recommended schedule ran (the time budget)"
        print(f"{name:55s} {text}", flush=True)
    print(f"{counts['out']} of {counts['candidates']} candidates left out; of these "
          f"{counts['missed']} would have been confirmed or best on an alternative")
    if work:
        print(f"column rounds (b x T per run) of the shift left out: {saved / work:.0%}")
    print(f"rule: PRUNE_SHARE {PRUNE_SHARE:g}, PRUNE_SE {PRUNE_SE:g}")


if __name__ == "__main__":
    main()
