"""Validate the planner on real runs: plan each scenario, run a real (b, T) grid, score regret.

For every scenario of :data:`SCENARIOS`: ``fedqr.planner.make_plan`` (the twin, seeds of the
data recipe), then real ``fedqr.sim.engine.simulate`` runs of the grid b in {1, 2, 5, N/2, N},
T in {5, 10, 20, 40, 80, 160, 320} (extended to 640 and 1280 while some b still improves at
the largest T), the plan's schedule, the fixed rules (b = N, T = 50) and (b = 1, T = 10)
and the bound's plan (Theorems 3/4, constants estimated on the clients' data; T = 0 is the
untrained model),
each with 3 repeats from seeds the planner never used (FEMNIST: logistic regression, the model
the twin simulates). Reports per scenario the grid-best
schedule and loss, the plan, its regret ``loss(plan) / loss(best) - 1`` and rank, and the same
for the fixed rules. Resumable: every finished run is stored in ``OUT/<scenario>.json``.

    python bench/planner_suite.py --out runs/planner-suite [--only NAME] [--threads 2]
                                  [--grid-only] [--held-out COUNT --held-out-seed S]

The scenarios of real deployments -- a user's data file (heart disease, Adult), MLPs and the
paper's CNN, public proxies from another source (Cleveland's file, FEMNIST's digits for
MNIST) -- are in ``bench/planner_suite_models.py`` (same protocol, both data uses).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedqr.data import DatasetName, DataSpec, PartitionKind
from fedqr.models.factory import ModelName
from fedqr.planner import Scenario, make_plan
from fedqr.planner.plan import PLANNER_VERSION
from fedqr.privacy import Accountant, Mechanism
from fedqr.sim.config import LearningRate
from fedqr.sim.engine import simulate
from fedqr.sim.result import write_json_atomic
from fedqr.theory import Rounding

REPEATS = 3
VALIDATION_SEED = 1000  # the planner's twin uses the data seed (0); real runs use 1000 + i
T_GRID = (5, 10, 20, 40, 80, 160, 320)

MNIST, DIGITS, FEMNIST = DatasetName.MNIST, DatasetName.DIGITS, DatasetName.FEMNIST
TWO, IID, DIR = PartitionKind.TWO_DIGITS, PartitionKind.IID, PartitionKind.DIRICHLET
WRITERS = PartitionKind.BY_WRITER
LAP, GAU = Mechanism.LAPLACE, Mechanism.GAUSSIAN


@dataclass(frozen=True)
class Case:
    name: str
    dataset: DatasetName
    partition: PartitionKind
    n: int
    mechanism: Mechanism
    eps: tuple[float, ...]
    clip: float
    q: float = 1.0
    fraction: float = 1.0
    alpha: float = 0.5
    lr: float = 0.05
    extra: dict[str, Any] = field(default_factory=dict)

    def scenario(self) -> Scenario:
        return Scenario(
            model=ModelName.LOGREG,
            data=DataSpec(dataset=self.dataset, fraction=self.fraction,
                          partition=self.partition, alpha=self.alpha, num_clients=self.n),
            mechanism=self.mechanism, eps=self.eps, clip=self.clip,
            sample_rate=self.q if self.mechanism is GAU else 1.0,
            lr=LearningRate(eta0=self.lr))


def _het(n: int, lo: float, hi: float) -> tuple[float, ...]:
    return tuple(float(v) for v in np.round(np.geomspace(lo, hi, n), 3))


SCENARIOS = [
    Case("digits-two-gauss-eps2", DIGITS, TWO, 10, GAU, (2.0,), 5.0, q=0.1, lr=0.5),
    Case("digits-iid-lap-eps5", DIGITS, IID, 10, LAP, (5.0,), 20.0, lr=0.3),
    Case("digits-dir0.5-gauss-eps1-N20", DIGITS, DIR, 20, GAU, (1.0,), 5.0, q=0.2, lr=0.5),
    Case("digits-dir1-lap-het0.5-4", DIGITS, DIR, 10, LAP, _het(10, 0.5, 4.0), 20.0,
         alpha=1.0, lr=0.3),
    Case("mnist-two-lap-eps10", MNIST, TWO, 10, LAP, (10.0,), 300.0),
    Case("mnist-two-gauss-eps1", MNIST, TWO, 10, GAU, (1.0,), 10.0, q=0.01),
    Case("mnist-iid-lap-eps1-f0.2", MNIST, IID, 10, LAP, (1.0,), 100.0, fraction=0.2),
    Case("mnist-dir0.1-gauss-eps0.5-N20-f0.3", MNIST, DIR, 20, GAU, (0.5,), 5.0, q=0.05,
         fraction=0.3, alpha=0.1),
    Case("mnist-iid-gauss-eps4-N100-f0.5", MNIST, IID, 100, GAU, (4.0,), 10.0, q=0.1,
         fraction=0.5),
    Case("mnist-two-lap-eps20-N50-f0.5", MNIST, TWO, 50, LAP, (20.0,), 300.0, fraction=0.5),
    Case("mnist-two-gauss-het0.5-8-f0.3", MNIST, TWO, 10, GAU, _het(10, 0.5, 8.0), 10.0,
         q=0.02, fraction=0.3),
    Case("mnist-dir0.3-lap-eps3-f0.3", MNIST, DIR, 10, LAP, (3.0,), 50.0, fraction=0.3,
         alpha=0.3),
    Case("femnist-writers-gauss-eps4-f0.05", FEMNIST, WRITERS, 10, GAU, (4.0,), 5.0, q=0.1,
         fraction=0.05, lr=0.3),
]


def held_out(count: int, seed: int) -> list[Case]:
    """``count`` random scenarios drawn from ``seed``: a set the planner's design never saw
    (draw a fresh seed, run, and only then look). Digits or a share of MNIST, any partition,
    N 10 to 40, either mechanism, budgets log-uniform on [0.5, 20] (one in three
    heterogeneous), clips and learning rates from the ranges users pick."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        ds = DIGITS if rng.random() < 0.5 else MNIST
        part = [TWO, IID, DIR][int(rng.integers(3))]
        n = int(rng.choice([10, 20, 40]))
        mech = LAP if rng.random() < 0.5 else GAU
        eps0 = float(np.exp(rng.uniform(np.log(0.5), np.log(20))))
        eps = _het(n, eps0 / 4, eps0) if rng.random() < 1 / 3 else (round(eps0, 3),)
        clip = float(rng.choice([20.0, 50.0, 300.0] if mech is LAP else [1.0, 5.0, 10.0]))
        q = float(rng.choice([0.05, 0.1, 0.3])) if mech is GAU else 1.0
        frac = 1.0 if ds is DIGITS else float(rng.choice([0.1, 0.2, 0.3]))
        lr = float(rng.choice([0.1, 0.3, 0.5] if ds is DIGITS else [0.05, 0.1, 0.3]))
        alpha = float(rng.choice([0.1, 0.3, 1.0]))
        out.append(Case(f"heldout{seed}-{i}-{ds.value}-{part.value}-{mech.value}", ds, part,
                        n, mech, eps, clip, q=q, fraction=frac, alpha=alpha, lr=lr))
    return out


def _run(case: Case, data: Any, t: int, b: int, q: float, seed: int) -> list[float]:
    sc = case.scenario()
    config = sc.sim_config(rounds=t, clients_per_round=b, sample_rate=q, repeats=REPEATS,
                           seed=seed, eval_every=max(1, t))
    res = simulate(data.dataset, data.partition, config)
    return [float(r["rounds"][-1]["test_loss"]) for r in res.runs]


def _bound_plan(case: Case, data: Any) -> tuple[int, int]:
    """The bound's joint (T*, b*) with constants estimated on the clients' data (the
    smallest budget of heterogeneous clients; the paper's Theorem 3/4 planner)."""
    from dataclasses import replace

    from fedqr.theory.estimate import estimate_constants
    from fedqr.theory.tables import gaussian_rows, laplace_rows

    eps = min(case.eps)
    gauss = case.mechanism is GAU
    est = estimate_constants(dataset=data.dataset, partition=data.partition, clip=case.clip,
                             norm=case.scenario().spec.norm, eps=eps,
                             delta=1e-5 if gauss else 0.0,
                             sample_rate=case.q if gauss else 1.0,
                             rng=np.random.default_rng(1))
    base = est.constants
    if gauss:
        base = replace(base, delta_i=(1e-5,) * base.N)
        rows, _ = gaussian_rows(base, [eps], t_max=1000, accountant=Accountant.RDP)
    else:
        base = replace(base, delta_i=(0.0,) * base.N, q=1.0)
        rows, _ = laplace_rows(base, [eps], rounding=Rounding.BEST)
    joint = rows[0]["joint"]
    return int(joint["T"]), int(joint["b"])


def _score(runs: dict[str, list[float]], key: str) -> tuple[float, int]:
    means = {k: float(np.mean(v)) if all(math.isfinite(x) for x in v) else math.inf
             for k, v in runs.items()}
    best = min(means.values())
    ranked = sorted(means, key=lambda k: means[k])
    return means[key] / best - 1.0, ranked.index(key) + 1


def run_case(case: Case, index: int, out: Path, *, grid_only: bool = False
             ) -> dict[str, Any] | None:
    path = out / f"{case.name}.json"
    doc: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {"runs": {}}
    sc = case.scenario()
    if "plan" not in doc and not grid_only:
        started, cpu = time.perf_counter(), time.process_time()
        plan = make_plan(sc, use_cache=True)
        r = plan.recommended
        doc["plan"] = {"T": r.rounds, "b": r.clients_per_round, "q": r.sample_rate,
                       "predicted": r.mean, "stderr": r.stderr, "useful": plan.useful,
                       "wall_s": time.perf_counter() - started,
                       "cpu_s": time.process_time() - cpu, "version": PLANNER_VERSION,
                       "fitted": r.fitted, "twin_rounds": plan.simulated_rounds}
        write_json_atomic(path, doc)
    data = sc.data.build()
    if "bound" not in doc:
        t_b, b_b = _bound_plan(case, data)
        doc["bound"] = {"T": t_b, "b": b_b}
        write_json_atomic(path, doc)
    n, q = case.n, case.q if case.mechanism is GAU else 1.0
    bs = sorted({1, 2, 5, max(1, n // 2), n} & set(range(1, n + 1)))
    seed = VALIDATION_SEED + index

    def ensure(t: int, b: int, qq: float) -> None:
        key = f"{t},{b},{qq:g}"
        if key not in doc["runs"]:
            doc["runs"][key] = _run(case, data, t, b, qq, seed)
            write_json_atomic(path, doc)

    ts = list(T_GRID)
    for b in bs:
        for t in ts:
            ensure(t, b, q)
    while len(ts) < 9:  # extend while the largest T is still the best of some b
        means = {k: np.mean(v) for k, v in doc["runs"].items()}
        top = max(ts)
        if not any(means[f"{top},{b},{q:g}"] < min(means[f"{t},{b},{q:g}"] for t in ts[:-1])
                   for b in bs):
            break
        ts.append(2 * top)
        for b in bs:
            ensure(2 * top, b, q)
    ensure(50, n, q)
    ensure(10, 1, q)
    bd = doc["bound"]
    if bd["T"] > 0:
        ensure(bd["T"], bd["b"], q)
    if grid_only:
        return None
    p = doc["plan"]
    ensure(p["T"], p["b"], p["q"]) if p["T"] > 0 else None
    runs = dict(doc["runs"])
    untrained = float(np.log(data.dataset.num_classes))
    if p["T"] == 0 or bd["T"] == 0:  # T = 0 is the untrained model
        runs["0,0,0"] = [untrained] * REPEATS
    plan_key = f"{p['T']},{p['b']},{p['q']:g}" if p["T"] > 0 else "0,0,0"
    bound_key = f"{bd['T']},{bd['b']},{q:g}" if bd["T"] > 0 else "0,0,0"
    means = {k: float(np.mean(v)) for k, v in runs.items()}
    best = min(means, key=lambda k: means[k])
    summary = {"scenario": case.name, "grid_best": best, "grid_best_loss": means[best],
               "plan": plan_key, "plan_loss": means[plan_key],
               "predicted": p["predicted"], "plan_wall_s": p["wall_s"]}
    summary["bound"] = bound_key
    for label, key in (("plan", plan_key), ("rule_bN_T50", f"50,{n},{q:g}"),
                       ("rule_b1_T10", f"10,1,{q:g}"), ("bound", bound_key)):
        regret, rank = _score(runs, key)
        summary[f"{label}_regret"], summary[f"{label}_rank"] = regret, rank
    summary["schedules"] = len(runs)
    doc["summary"] = summary
    write_json_atomic(path, doc)
    return summary


def report(out: Path) -> str:
    """The finished scenarios of ``out`` as a markdown table (no computation)."""
    head = ("| scenario | grid best (T, b, q): loss | plan: loss (predicted) | plan regret, rank "
            "| (b=N, T=50) | (b=1, T=10) | bound's plan |\n| --- | --- | --- | --- | --- | --- "
            "| --- |")
    lines = [head]
    for path in sorted(out.glob("*.json")):
        doc = json.loads(path.read_text())
        s = doc.get("summary")
        if not s or path.name == "summary.json":
            continue
        fitted = " fitted" if doc["plan"].get("fitted") else ""
        useful = "" if doc["plan"].get("useful", True) else ", said not useful"
        lines.append(
            f"| {s['scenario']} | ({s['grid_best']}): {s['grid_best_loss']:.4f} | "
            f"({s['plan']}{fitted}): {s['plan_loss']:.4f} ({s['predicted']:.4f}{useful}) | "
            f"{s['plan_regret']:+.1%}, {s['plan_rank']}/{s['schedules']} | "
            f"{s['rule_bN_T50_regret']:+.1%} | {s['rule_b1_T10_regret']:+.1%} | "
            f"({s['bound']}): {s['bound_regret']:+.1%} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/planner-suite"))
    ap.add_argument("--only", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--grid-only", action="store_true",
                    help="run the real grids, the fixed rules and the bound only (no plan)")
    ap.add_argument("--held-out", type=int, default=0, metavar="COUNT",
                    help="instead of the suite, COUNT random scenarios from --held-out-seed")
    ap.add_argument("--held-out-seed", type=int, default=0)
    ap.add_argument("--report", action="store_true",
                    help="print the finished scenarios of --out as a markdown table and stop")
    args = ap.parse_args()
    if args.report:
        print(report(args.out))
        return
    cases = held_out(args.held_out, args.held_out_seed) if args.held_out else SCENARIOS
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, case in enumerate(cases):
        if args.only and args.only not in case.name:
            continue
        started = time.perf_counter()
        s = run_case(case, i, args.out, grid_only=args.grid_only)
        if s is None:
            print(f"{case.name:38s} grid done ({time.perf_counter() - started:.0f} s)", flush=True)
            continue
        rows.append(s)
        print(f"{case.name:38s} best {s['grid_best']:>12s} {s['grid_best_loss']:.4f} | plan "
              f"{s['plan']:>12s} {s['plan_loss']:.4f} (pred {s['predicted']:.4f}) regret "
              f"{s['plan_regret']:+.1%} rank {s['plan_rank']}/{s['schedules']} | bN,T50 "
              f"{s['rule_bN_T50_regret']:+.1%} | b1,T10 {s['rule_b1_T10_regret']:+.1%} | bound "
              f"{s['bound']} {s['bound_regret']:+.1%} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    if rows:
        regrets = np.array([r["plan_regret"] for r in rows])
        print(f"plan: regret <= 5% in {np.mean(regrets <= 0.05):.0%} of {len(rows)}, max "
              f"{regrets.max():.1%}, mean {regrets.mean():.1%}; rules mean regret: bN,T50 "
              f"{np.mean([r['rule_bN_T50_regret'] for r in rows]):.1%}, b1,T10 "
              f"{np.mean([r['rule_b1_T10_regret'] for r in rows]):.1%}, bound "
              f"{np.mean([r['bound_regret'] for r in rows]):.1%}")
        write_json_atomic(args.out / "summary.json", {"rows": rows})


if __name__ == "__main__":
    main()
