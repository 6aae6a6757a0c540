"""The proxy shift overruling the search (``fedqr.planner.candidates.confirm``): where it acts, and
that it leaves the validated plans alone.

Default: a deployment of 50 very unequal clients (2, 48 of 5 to 199 and one of 1,500 rows;
6 features, 2 classes, labels from a noisy linear rule; Laplace, eps 1, 2, 5 in turn, clip 5),
the kind where the search's first choice is the lowest of many noisy predictions. Prints the
plan (and what it replaced), then real runs of 3 repeats from seed 1000 (seeds the planner never
uses) of the recommended schedule, the search's first choice and b = N at that T.

``--suite``: re-plans the 13 scenarios of ``bench/planner_suite.py`` and its 4 held-out ones
(seed 20261123) and the heart-disease and Adult cases of ``bench/planner_suite_models.py``
(each data use), and prints for each whether the shift overruled the search.

    FEDQR_DATA=../shared/data PYTHONPATH=src python bench/planner_confirm.py [--suite]
        [--threads 2]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

import fedqr


def unequal_clients(seed: int = 0) -> fedqr.FederatedData:
    """50 clients of 2 to 1,500 rows and a 500-row test set (module docstring)."""
    rng = np.random.default_rng(seed)
    sizes = [2, *rng.integers(5, 200, size=48).tolist(), 1500]
    w = rng.normal(size=(6, 2))

    def rows(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.normal(size=(n, 6)).astype(np.float32)
        return x, np.argmax(x @ w + 0.5 * rng.normal(size=(n, 2)), axis=1)

    x, y = rows(sum(sizes))
    x_test, y_test = rows(500)
    return fedqr.FederatedData.from_arrays(x=x, y=y, client=np.repeat(np.arange(50), sizes),
                                           x_test=x_test, y_test=y_test)


def unequal() -> None:
    data = unequal_clients()
    budget = dict(data=data, mechanism="laplace", eps=[(1.0, 2.0, 5.0)[i % 3] for i in range(50)],
                  clip=5.0)
    plan = fedqr.plan(**budget, use_cache=False)
    rec = plan.plan.recommended
    conf = plan.plan.proxy_shift.get("confirmed")
    print(f"plan: T={rec.rounds}, b={rec.clients_per_round}, predicted {rec.mean:.4f}")
    schedules = {"recommended": (rec.rounds, rec.clients_per_round)}
    if conf is None:
        print("the shift kept the search's first choice")
    else:
        old = conf["replaces"]
        print(f"replaces the search's first choice T={old['rounds']}, "
              f"b={old['clients_per_round']}: predicted {old['search_loss']:.4f}, "
              f"{old['shift_loss']:.4f} on average over {conf['runs']} re-simulations")
        schedules["search's first choice"] = (old["rounds"], old["clients_per_round"])
    first = schedules.get("search's first choice", schedules["recommended"])
    schedules["b = N at that T"] = (first[0], 50)
    for label, (t, b) in schedules.items():
        res = fedqr.simulate(**budget, rounds=t, clients_per_round=b, repeats=3, seed=1000)
        print(f"real runs, 3 repeats: {label} (T={t}, b={b}): {res.final_test_loss:.4f}")


def suite() -> None:
    from planner_suite import SCENARIOS, held_out  # bench/ is on sys.path
    from planner_suite_models import CASES, _plan

    from fedqr.planner import DataUse, make_plan

    overruled = 0
    cases = [*SCENARIOS, *held_out(4, 20261123)]
    for case in cases:
        plan = make_plan(case.scenario(), use_cache=False)
        hit = plan.proxy_shift.get("confirmed") is not None
        overruled += hit
        print(f"{case.name:45s} {'OVERRULED' if hit else 'kept'}", flush=True)
    models = [c for c in CASES if c.name.startswith(("heart", "adult"))]
    for mcase in models:
        for use in [DataUse.CLEAR_PROXY, *([DataUse.PUBLIC_PROXY] if mcase.public else [])]:
            hit = "replaces the search's first choice" in _plan(mcase, use, None)["message"]
            overruled += hit
            print(f"{mcase.name + ' ' + use.value:45s} {'OVERRULED' if hit else 'kept'}",
                  flush=True)
    total = len(cases) + sum(1 + bool(c.public) for c in models)
    print(f"overruled: {overruled} of {total} plans")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.suite:
        suite()
    else:
        unequal()


if __name__ == "__main__":
    main()
