"""Does a change of the twin's draws change what its plans are worth? Plans against real runs.

A change that makes the twin draw other numbers (another order of its Poisson batches, say)
moves its predictions by their Monte Carlo noise, and where two schedules are close it can
change the recommended one. What matters is whether the new schedule is as good on the real
deployment. This bench answers that in two steps:

1. ``--save FILE`` plans every logistic scenario (``bench/planner_suite.py``'s ``SCENARIOS``,
   its 4 held-out ones of seed 20261123 and ``--fresh`` more of ``--seed``, and every
   logistic plan of ``bench/planner_suite_models.py``, each data use) from scratch with the
   ``fedqr`` on ``PYTHONPATH`` and writes each recommended (T, b, q), its prediction and the
   plan's wall time. Run it once with the old source, once with the new.
2. ``--compare OLD NEW`` runs, for every plan whose schedule changed, both schedules in the
   engine (``--repeats`` runs each, from seeds no plan used, the same seeds for both) and
   prints the real final test loss of each and their relative difference with its standard
   error (``new / old - 1``; negative: the new schedule is better). The last lines count the
   plans that stayed the same and summarise the differences.

    FEDQR_DATA=... PYTHONPATH=OLD/src python bench/twin_draws_plans.py --save old.json
    FEDQR_DATA=... PYTHONPATH=src python bench/twin_draws_plans.py --save new.json
    FEDQR_DATA=... PYTHONPATH=src python bench/twin_draws_plans.py --compare old.json new.json

``--models`` (with either step) takes instead the plans of ``bench/planner_suite_models.py``
whose model is not logistic regression (MLPs, ``linear``; not the CNN, for its cost), and
``--only TEXT`` keeps the plans whose name contains one of its comma-separated parts (e.g.
``--models --only mlp-lap``).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from planner_suite import SCENARIOS, held_out  # bench/ is on sys.path when run as a script
from planner_suite_models import CASES, HELD_OUT, _plan, _uses
from planner_suite_models import _run as models_run

from fedqr.planner import make_plan
from fedqr.sim.engine import simulate

SEED = 7000
"""Seed of the real runs: neither the planner (the data seed) nor the suites (1000 + i) use
it; both schedules of a plan run from it."""


def _jobs(fresh: int, seed: int, *, models: bool = False, only: str | None = None
          ) -> dict[str, tuple[Callable[[], dict[str, Any]], Any]]:
    """Every plan by name: how to plan it, and how to run a schedule of it for real
    (``models``: the model suite's plans of other models; ``only``: names containing one of
    its comma-separated parts)."""
    jobs: dict[str, tuple[Callable[[], dict[str, Any]], Any]] = {}
    for case in [] if models else [*SCENARIOS, *held_out(4, 20261123), *held_out(fresh, seed)]:
        jobs[case.name] = (lambda case=case: _suite_plan(case), ("suite", case))
    for case in [*CASES, *HELD_OUT]:
        if (case.model in ("logreg", "cnn")) if models else case.model != "logreg":
            continue
        for label, (use, budget) in _uses(case).items():
            jobs[f"{case.name} {label}"] = (
                lambda case=case, use=use, budget=budget: _plan(case, use, budget),
                ("models", case))
    parts = None if only is None else only.split(",")
    return {k: v for k, v in jobs.items() if parts is None or any(p in k for p in parts)}


def _suite_plan(case: Any) -> dict[str, Any]:
    started = time.perf_counter()
    r = make_plan(case.scenario(), use_cache=False).recommended
    return {"T": r.rounds, "b": r.clients_per_round, "q": r.sample_rate, "predicted": r.mean,
            "stderr": r.stderr, "wall_s": time.perf_counter() - started}


def _real(kind: str, case: Any, schedule: dict[str, Any], repeats: int) -> list[float]:
    """Final test losses of ``repeats`` real runs of the schedule (from seed SEED)."""
    t, b, q = int(schedule["T"]), int(schedule["b"]), float(schedule["q"])
    if kind == "suite":
        config = case.scenario().sim_config(rounds=t, clients_per_round=b, sample_rate=q,
                                            repeats=repeats, seed=SEED, eval_every=max(1, t))
        data = case.scenario().data.build()
        res = simulate(data.dataset, data.partition, config)
        return [float(r["rounds"][-1]["test_loss"]) for r in res.runs]
    return models_run(case, case.source().build(), case.kernel(), t, b, q, SEED,
                      repeats=repeats)


def save(path: Path, fresh: int, seed: int, **which: Any) -> None:
    doc: dict[str, Any] = {}
    for name, (plan, _) in _jobs(fresh, seed, **which).items():
        doc[name] = plan()
        d = doc[name]
        print(f"{name:55s} T={d['T']:5d} b={d['b']:4d} q={d['q']:<6g} predicted "
              f"{d['predicted']:.4f} +- {d['stderr']:.4f}  {d['wall_s']:.1f} s", flush=True)
        path.write_text(json.dumps(doc, indent=1))


def compare(old_path: Path, new_path: Path, *, fresh: int, seed: int, repeats: int,
            **which: Any) -> None:
    old, new = json.loads(old_path.read_text()), json.loads(new_path.read_text())
    jobs = _jobs(fresh, seed, **which)
    same, diffs = 0, []
    for name in [n for n in jobs if n in old and n in new]:
        a, b = old[name], new[name]
        if (a["T"], a["b"], a["q"]) == (b["T"], b["b"], b["q"]):
            same += 1
            print(f"{name:55s} same ({a['T']},{a['b']},{a['q']:g})", flush=True)
            continue
        kind, case = jobs[name][1]
        la, lb = (np.asarray(_real(kind, case, s, repeats)) for s in (a, b))
        rel = float(lb.mean() / la.mean() - 1)
        se = float(np.std(lb - la, ddof=1) / math.sqrt(repeats) / la.mean())
        diffs.append(rel)
        print(f"{name:55s} old ({a['T']},{a['b']},{a['q']:g}) real {la.mean():.4f} | new "
              f"({b['T']},{b['b']},{b['q']:g}) real {lb.mean():.4f} | {rel:+.2%} +- {se:.2%}",
              flush=True)
    total = same + len(diffs)
    wall = {k: sum(d[n]["wall_s"] for n in d) for k, d in (("old", old), ("new", new))}
    print(f"{same} of {total} plans the same; {len(diffs)} changed")
    if diffs:
        print(f"changed plans, real loss new / old - 1: mean {np.mean(diffs):+.2%}, "
              f"best {min(diffs):+.2%}, worst {max(diffs):+.2%}")
    print(f"plan wall time, all plans: old {wall['old']:.0f} s, new {wall['new']:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--save", type=Path)
    ap.add_argument("--compare", type=Path, nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--fresh", type=int, default=6, help="more held-out suite scenarios")
    ap.add_argument("--seed", type=int, default=20261127, help="their seed")
    ap.add_argument("--repeats", type=int, default=5, help="real runs of each schedule")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", action="store_true",
                    help="the model suite's plans of other models than logreg (not the CNN)")
    ap.add_argument("--only", default=None, help="plans whose name contains one of these")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    which = {"models": args.models, "only": args.only}
    if args.save is not None:
        save(args.save, args.fresh, args.seed, **which)
    elif args.compare is not None:
        compare(*args.compare, fresh=args.fresh, seed=args.seed, repeats=args.repeats,
                **which)
    else:
        ap.error("give --save FILE or --compare OLD NEW")


if __name__ == "__main__":
    main()
