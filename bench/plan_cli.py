"""``fedqr plan`` end to end, as a process: MNIST plans of the twin against issue 24's goals.

Each case runs ``fedqr plan ... --json --no-cache`` in a new process with an empty
``FEDQR_CACHE`` (imports, the MNIST load, the search, the proxy shift and the accounting all
count) ``--repeats`` times; the table shows the fastest wall time (on a shared machine the
least disturbed), the CPU time (user + system) of that run and the goal:

* MNIST, N = 10, Laplace and Gaussian: <= 10 s;
* MNIST, N = 1,000, Laplace and Gaussian: <= 30 s (Laplace also at eps 10);
* MNIST, N = 100, Gaussian: no goal (reported).

``--against OLD/src`` runs every repeat of a case with that copy of the package too (old and
new alternately, so a changing load on a shared machine hits both alike) and checks that
both give the same plan (every field both write but the call's ``wall_time_s`` and
``simulated``, numbers within a relative 1e-5): a
speed-up shown not to change any plan. ``--save DIR`` writes each plan's JSON there and
``--compare DIR`` checks the plans against those saved in DIR. ``FEDQR_DATA`` must point at
the data; ``--threads`` sets ``OMP_NUM_THREADS`` of the plan processes (default: torch's own
choice).

    PYTHONPATH=src python bench/plan_cli.py [--cases mnist10-laplace,...] [--repeats 3]
        [--src src] [--against OLD/src] [--save DIR] [--compare DIR] [--threads N]

Exits 1 when a plan differs from the saved one (not when a goal is missed: the table says).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CASES: dict[str, tuple[list[str], float | None]] = {
    "mnist10-laplace": (["--num-clients", "10", "--mechanism", "laplace"], 10.0),
    "mnist10-gaussian": (["--num-clients", "10", "--mechanism", "gaussian"], 10.0),
    "mnist1000-laplace": (["--num-clients", "1000", "--mechanism", "laplace"], 30.0),
    "mnist1000-gaussian": (["--num-clients", "1000", "--mechanism", "gaussian"], 30.0),
    "mnist100-gaussian": (["--num-clients", "100", "--mechanism", "gaussian"], None),
    # eps 1 at N = 1,000 is on the edge of "no schedule helps" (Laplace); eps 10 is not
    "mnist1000-laplace-eps10": (["--num-clients", "1000", "--mechanism", "laplace",
                                 "--eps", "10"], 30.0),
}
"""Arguments of ``fedqr plan --dataset mnist`` (``--eps 1`` unless the case sets it) and goal."""

# the console script's entry (``fedqr.cli:main``; ``app`` in copies from before it existed)
_RUN = ("import sys; from fedqr import cli; sys.argv[0] = 'fedqr'; "
        "getattr(cli, 'main', cli.app)()")


def run_plan(args: list[str], *, src: Path, threads: int | None) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system) and stdout of one ``fedqr plan`` process."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "FEDQR_CACHE": cache, "PYTHONPATH": str(src)}
        if threads is not None:
            env["OMP_NUM_THREADS"] = str(threads)
        eps = [] if "--eps" in args else ["--eps", "1"]
        cmd = [sys.executable, "-c", _RUN, "plan", "--dataset", "mnist", *eps, *args,
               "--json", "--no-cache"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


RTOL = 1e-5
"""Numbers of two plans are the same within this relative tolerance: a change of float
rounding (another product layout) moves the twin's losses by about 1e-8 and their standard
errors by up to 5e-6."""


def comparable(text: str) -> Any:
    """The plan JSON without what describes the call rather than the plan (its wall time and
    the twin's work, ``simulated``, with its seconds)."""
    doc = json.loads(text)
    doc.pop("wall_time_s", None)
    doc.pop("simulated", None)
    return doc


def same_plan(a: Any, b: Any) -> bool:
    """Whether two plans agree: equal structure, strings and integers, floats within RTOL."""
    if isinstance(a, dict) and isinstance(b, dict):  # a field one version lacks is skipped
        return all(same_plan(a[k], b[k]) for k in a.keys() & b.keys())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_plan(u, v) for u, v in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=RTOL) or (math.isnan(a) and math.isnan(b))
    return bool(a == b) and type(a) is type(b)


def _case(name: str, a: argparse.Namespace) -> bool:
    """Run one case, print its row; whether every plan was the same."""
    args, goal = CASES[name]
    new: list[tuple[float, float, str]] = []
    old: list[tuple[float, float, str]] = []
    for _ in range(a.repeats):
        if a.against is not None:
            old.append(run_plan(args, src=a.against.resolve(), threads=a.threads))
        new.append(run_plan(args, src=a.src.resolve(), threads=a.threads))
    plans = [comparable(r[2]) for r in new + old]
    if a.compare is not None:
        plans.append(comparable((a.compare / f"{name}.json").read_text()))
    if a.save is not None:
        (a.save / f"{name}.json").write_text(new[0][2])
    wall, cpu, _ = min(new)
    row = f"{name:20s} {wall:7.1f} s {cpu:6.1f} s"
    if old:
        o_wall, o_cpu, _ = min(old)
        row += f" {o_wall:7.1f} s {o_cpu:6.1f} s {o_wall / wall:5.2f}x"
    verdict = "" if goal is None else ("met" if wall <= goal else "MISSED")
    goal_s = "-" if goal is None else f"{goal:.0f} s"
    same = all(same_plan(plans[0], p) for p in plans[1:])
    print(f"{row} {goal_s:>6s} {verdict:6s} {'yes' if same else 'NO'}", flush=True)
    return same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: "
                    + ", ".join(CASES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1] / "src")
    ap.add_argument("--against", type=Path, default=None)
    ap.add_argument("--save", type=Path, default=None)
    ap.add_argument("--compare", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    if a.save is not None:
        a.save.mkdir(parents=True, exist_ok=True)
    head = f"{'case':20s} {'wall min':>9s} {'cpu':>8s}"
    if a.against is not None:
        head += f" {'old wall':>9s} {'old cpu':>8s} {'gain':>6s}"
    print(f"{head} {'goal':>6s} {'':6s} same plan", flush=True)
    differ = [name for name in a.cases.split(",") if not _case(name, a)]
    if differ:
        raise SystemExit(f"plans differ: {', '.join(differ)}")


if __name__ == "__main__":
    main()
