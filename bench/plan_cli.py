"""``fedqr plan`` end to end, as a process: MNIST plans of the twin against issue 24's goals.

Each case runs ``fedqr plan ... --json --no-cache`` in a new process with an empty
``FEDQR_CACHE`` (imports, the MNIST load, the search, the proxy shift and the accounting all
count) ``--repeats`` times; the table shows the fastest wall time (on a shared machine the
least disturbed), the CPU time (user + system) of that run and the goal:

* MNIST, N = 10, Laplace and Gaussian: <= 10 s;
* MNIST, N = 1,000, Laplace and Gaussian: <= 30 s;
* MNIST, N = 100, Gaussian: no goal (reported).

``--save DIR`` writes each plan's JSON there; ``--compare DIR`` checks that every plan is
identical to the one saved in DIR (every field but ``wall_time_s``), so a speed-up can be
shown not to change any plan: run the old code with ``--src OLD/src --save DIR``, then the new
with ``--compare DIR``. ``FEDQR_DATA`` must point at the data.

    PYTHONPATH=src python bench/plan_cli.py [--cases mnist10-laplace,...] [--repeats 3]
        [--src src] [--save DIR | --compare DIR]

Exits 1 when a plan differs from the saved one (not when a goal is missed: the table says).
"""

from __future__ import annotations

import argparse
import json
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
}

_RUN = "import sys; from fedqr.cli import app; sys.argv[0] = 'fedqr'; app()"


def run_plan(args: list[str], *, src: Path) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system) and stdout of one ``fedqr plan`` process."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "FEDQR_CACHE": cache, "PYTHONPATH": str(src)}
        cmd = [sys.executable, "-c", _RUN, "plan", "--dataset", "mnist", "--eps", "1", *args,
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


def _comparable(text: str) -> Any:
    doc = json.loads(text)
    doc.pop("wall_time_s", None)
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: "
                    + ", ".join(CASES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1] / "src")
    ap.add_argument("--save", type=Path, default=None)
    ap.add_argument("--compare", type=Path, default=None)
    a = ap.parse_args()
    if a.save is not None:
        a.save.mkdir(parents=True, exist_ok=True)
    differ = []
    print(f"{'case':20s} {'wall min':>9s} {'cpu':>8s} {'goal':>7s}  identical", flush=True)
    for name in a.cases.split(","):
        args, goal = CASES[name]
        runs = [run_plan(args, src=a.src.resolve()) for _ in range(a.repeats)]
        wall, cpu, out = min(runs)
        same = "-"
        if len({json.dumps(_comparable(r[2]), sort_keys=True) for r in runs}) > 1:
            same = "NO (repeats differ)"
            differ.append(name)
        elif a.compare is not None:
            ok = _comparable((a.compare / f"{name}.json").read_text()) == _comparable(out)
            same = "yes" if ok else "NO"
            if not ok:
                differ.append(name)
        if a.save is not None:
            (a.save / f"{name}.json").write_text(out)
        verdict = "" if goal is None else ("met" if wall <= goal else "MISSED")
        goal_s = "-" if goal is None else f"{goal:.0f} s"
        print(f"{name:20s} {wall:7.1f} s {cpu:6.1f} s {goal_s:>7s}  {same:9s} {verdict}",
              flush=True)
    if differ:
        raise SystemExit(f"plans differ: {', '.join(differ)}")


if __name__ == "__main__":
    main()
