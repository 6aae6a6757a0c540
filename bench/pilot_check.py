"""How often does ``private-pilot``'s check catch a public proxy that misleads?

``plan_with_pilot`` plans on a public proxy for the budget left after a pilot (here 20% of
every budget), runs the pilot on the clients' data and flags it when its test loss is worse
than the twin predicted (by more than 3 standard errors plus 10%). For every case (a
deployment and a public proxy: natural pairs, and pairs made misleading on purpose by label
noise on one side) and replicate r (seeds r), this script records the flag, then runs on the
clients' data (3 repeats, seeds 2000 + r, at the budget left after the pilot) the public plan's
schedule and the schedule a clear-proxy plan picks for the same budget, and scores:

* **optimistic prediction**: the public plan's real loss exceeds its prediction by > 10%;
* **misleading plan**: the public plan's schedule is > 5% worse than the clear-proxy plan's.

A proxy *misleads* when either holds. Reported: per case, the flags and both measures; overall,
the share of misleading replicates flagged (catch rate) and of the others flagged (false
alarms). Logistic regression (the cheap twin), so the cost is the real runs and the plans.

    python bench/pilot_check.py --out runs/pilot-check [--replicates 3] [--only NAME]
                                [--pilot-share 0.2] [--file pilot.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from planner_workloads import data_dir, heart_files, public_proxy  # bench/ is on sys.path

from fedqr.data import DatasetName, DataSpec, FederatedData, PartitionKind
from fedqr.data.source import DataSource, OwnData
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.planner import DataUse, ProxyChoice, Scenario, SearchSettings, make_plan
from fedqr.planner.pilot import plan_with_pilot, split_budget
from fedqr.privacy import Mechanism
from fedqr.sim.config import LearningRate
from fedqr.sim.loop import run_rounds
from fedqr.sim.result import write_json_atomic

PILOT_SHARE = 0.2
REPEATS = 3
LAP, GAU = Mechanism.LAPLACE, Mechanism.GAUSSIAN


def noisy(data: FederatedData, rate: float, seed: int, *, test: bool) -> FederatedData:
    """``data`` with ``rate`` of its training labels (and test labels if ``test``) redrawn
    uniformly among the other classes."""
    rng = np.random.default_rng([seed, 77])

    def flip(y: np.ndarray) -> np.ndarray:
        out = y.copy()
        hit = rng.random(len(y)) < rate
        out[hit] = (y[hit] + rng.integers(1, data.num_classes, hit.sum())) % data.num_classes
        return out

    return dataclasses.replace(data, y=flip(data.y),
                               y_test=flip(data.y_test) if test else data.y_test)


def _mnist(seed: int, *, partition: PartitionKind = PartitionKind.TWO_DIGITS) -> OwnData:
    spec = DataSpec(dataset=DatasetName.MNIST, fraction=0.1, partition=partition,
                    num_clients=10, seed=seed, data_dir=data_dir() / "mnist")
    return OwnData(data=FederatedData.from_client_data(spec.build()), seed=seed)


def _mnist_other(seed: int) -> OwnData:
    """Another 10% of MNIST (a different draw than the clients'), as a public proxy."""
    return _mnist(seed + 1000, partition=PartitionKind.IID)


def _heart3(seed: int) -> OwnData:
    h = heart_files()
    return OwnData(data=FederatedData.from_file(h / "three.csv", test_path=h / "three_test.csv"),
                   seed=seed)


@dataclass(frozen=True)
class PCase:
    name: str
    deploy: Callable[[int], OwnData]
    proxy: Callable[[int], DataSource]
    mechanism: Mechanism
    eps: float
    clip: float
    q: float = 1.0
    lr: float = 0.05
    shift: str = "natural"

    def scenario(self, seed: int, eps: float | None = None) -> Scenario:
        src = self.deploy(seed)
        ds = src.data
        return Scenario(data=src, mechanism=self.mechanism, eps=(eps or self.eps,),
                        clip=self.clip, sample_rate=self.q, lr=LearningRate(eta0=self.lr),
                        kernel=LogRegKernel(num_features=ds.num_features,
                                            num_classes=ds.num_classes))


def _femnist(seed: int) -> DataSource:
    return public_proxy("femnist-digits")


def _cleveland(seed: int) -> DataSource:
    return public_proxy("cleveland")


CASES = [
    PCase("mnist-two-lap-eps10/mnist", _mnist, _mnist_other, LAP, 10.0, 100.0),
    PCase("mnist-two-lap-eps10/femnist-digits", _mnist, _femnist, LAP, 10.0, 100.0),
    PCase("mnist-iid-gauss-eps2/femnist-digits",
          lambda s: _mnist(s, partition=PartitionKind.IID), _femnist, GAU, 2.0, 5.0, q=0.05),
    PCase("mnist-two-lap-eps10-noisy40/mnist",
          lambda s: OwnData(data=noisy(_mnist(s).data, 0.4, s, test=False), seed=s),
          _mnist_other, LAP, 10.0, 100.0, shift="clients' labels 40% noisy, proxy clean"),
    PCase("mnist-two-lap-eps10/mnist-noisy40", _mnist,
          lambda s: OwnData(data=noisy(_mnist_other(s).data, 0.4, s, test=True), seed=s),
          LAP, 10.0, 100.0, shift="proxy labels 40% noisy, clients clean"),
    PCase("heart3-lap-eps4/cleveland", _heart3, _cleveland, LAP, 4.0, 5.0),
    PCase("heart3-gauss-eps2/cleveland", _heart3, _cleveland, GAU, 2.0, 1.0, q=0.2, lr=0.2),
    PCase("heart3-lap-eps4-noisy30/cleveland",
          lambda s: OwnData(data=noisy(_heart3(s).data, 0.3, s, test=False), seed=s),
          _cleveland, LAP, 4.0, 5.0, shift="clients' labels 30% noisy, proxy clean"),
]


def _real(sc: Scenario, t: int, b: int, q: float, seed: int) -> float:
    if t == 0:
        return float("nan")
    data = sc.data.build()
    assert sc.kernel is not None  # every case gives its kernel
    config = sc.sim_config(rounds=t, clients_per_round=b, sample_rate=q, repeats=REPEATS,
                           seed=seed, eval_every=t)
    res = run_rounds(data.dataset, data.partition, config, sc.kernel)
    return float(np.mean([r["rounds"][-1]["test_loss"] for r in res.runs]))


def replicate(case: PCase, r: int, share: float = PILOT_SHARE) -> dict[str, Any]:
    sc = case.scenario(r)
    settings = SearchSettings(seed=r)
    choice = ProxyChoice(use=DataUse.PUBLIC_PROXY, public=case.proxy(r), public_label="proxy")
    started = time.perf_counter()
    plan = plan_with_pilot(sc, proxy=choice, settings=settings, device=torch.device("cpu"),
                           use_cache=True, progress=None, pilot_share=share)
    _, rest = split_budget(sc, share)
    clear = make_plan(rest, settings=settings, use_cache=True).recommended
    rec, pilot = plan.recommended, plan.data_used["pilot"]
    seed = 2000 + r
    loss = _real(rest, rec.rounds, rec.clients_per_round, rec.sample_rate, seed)
    key = (clear.rounds, clear.clients_per_round, clear.sample_rate)
    same = key == (rec.rounds, rec.clients_per_round, rec.sample_rate)
    loss_clear = loss if same else _real(rest, *key, seed)
    return {"flagged": not pilot["proxy_represents_clients"], "pilot": pilot,
            "plan": [rec.rounds, rec.clients_per_round, rec.sample_rate],
            "predicted": rec.mean, "stderr": rec.stderr,
            "proxy_std": plan.proxy_shift.get("proxy_std"), "real": loss,
            "clear_plan": list(key), "real_clear_plan": loss_clear,
            "optimistic": loss > 1.1 * rec.mean, "misleading_plan": loss > 1.05 * loss_clear,
            "seconds": time.perf_counter() - started}


def summary(docs: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["| case | flagged | pilot z | real / predicted - 1 | plan vs clear-proxy plan | "
             "misleads |", "| --- | --- | --- | --- | --- | --- |"]
    caught = [0, 0]
    alarms = [0, 0]
    for name, reps in docs.items():
        err = [x["real"] / x["predicted"] - 1 for x in reps]
        reg = [x["real"] / x["real_clear_plan"] - 1 for x in reps]
        bad = [x["optimistic"] or x["misleading_plan"] for x in reps]
        for x, m in zip(reps, bad, strict=True):
            (caught if m else alarms)[0] += x["flagged"]
            (caught if m else alarms)[1] += 1
        zs = [x["pilot"].get("check", {}).get("z") for x in reps]
        lines.append(f"| {name} | {sum(x['flagged'] for x in reps)}/{len(reps)} | "
                     f"{', '.join('-' if z is None else f'{z:+.1f}' for z in zs)} | "
                     f"{', '.join(f'{e:+.0%}' for e in err)} | "
                     f"{', '.join(f'{g:+.1%}' for g in reg)} | {sum(bad)}/{len(reps)} |")
    lines.append(f"\ncaught {caught[0]} of {caught[1]} misleading replicates; false alarms "
                 f"{alarms[0]} of {alarms[1]} others")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/pilot-check"))
    ap.add_argument("--replicates", type=int, default=3)
    ap.add_argument("--only", default=None)
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--file", default="pilot.json", help="results file in --out")
    ap.add_argument("--pilot-share", type=float, default=PILOT_SHARE)
    args = ap.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / args.file
    docs: dict[str, list[dict[str, Any]]] = json.loads(path.read_text()) if path.is_file() \
        else {}
    for case in [] if args.report else CASES:
        if args.only and args.only not in case.name:
            continue
        reps = docs.setdefault(case.name, [])
        while len(reps) < args.replicates:
            reps.append(replicate(case, len(reps), args.pilot_share))
            write_json_atomic(path, docs)
            x = reps[-1]
            print(f"{case.name} r{len(reps) - 1}: flagged {x['flagged']}, predicted "
                  f"{x['predicted']:.4f} real {x['real']:.4f} (clear plan "
                  f"{x['real_clear_plan']:.4f}) {x['seconds']:.0f} s", flush=True)
    print(summary(docs))


if __name__ == "__main__":
    main()
