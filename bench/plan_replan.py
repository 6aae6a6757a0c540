"""How fast a repeated ``fedqr plan`` answers from the cache, as a whole process (issue 24).

The goal is 1.0 s of wall time: the answer is stored (:mod:`fedqr.cli.plan_cache`) and a
repeated plan prints it without importing torch, dp-accounting or the data. The first plan
fills a fresh cache (``$FEDQR_CACHE`` is a temporary folder unless ``--cache-dir`` names
one: then a plan already there is not made again) and its time is shown; then the same
command, as tables and with ``--json``, runs once as a warm-up and ``--repeats`` times timed:
the median and fastest wall time and the median CPU time (user + system) of the process.
On a shared machine the CPU time is the steadier figure. A last row times
``fedqr plan --help``: the start-up every command pays (``bench/cli_startup.py``).

    PYTHONPATH=src FEDQR_DATA=... python bench/plan_replan.py [--repeats 5] [--goal 1.0]
        [--cache-dir DIR] [-- PLAN ARGUMENTS]

The plan arguments default to ``--dataset mnist --num-clients 10 --mechanism gaussian
--eps 1``. Exits 1 when a median wall time misses the goal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from cli_startup import launcher, time_once  # bench/ is on sys.path when run as a script

DEFAULT = ["--dataset", "mnist", "--num-clients", "10", "--mechanism", "gaussian", "--eps", "1"]


def timed(argv: list[str], env: dict[str, str], repeats: int) -> tuple[float, float, float]:
    """Median wall, fastest wall and median CPU seconds of ``repeats`` runs after a warm-up."""
    time_once(argv, env)
    runs = [time_once(argv, env) for _ in range(repeats)]
    return (statistics.median(w for w, _ in runs), min(w for w, _ in runs),
            statistics.median(c for _, c in runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per form")
    parser.add_argument("--goal", type=float, default=1.0, help="wall seconds allowed")
    parser.add_argument("--cache-dir", default=None, help="FEDQR_CACHE (default: a new one)")
    parser.add_argument("plan_args", nargs="*", help="arguments of fedqr plan (after --)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got --repeats={args.repeats}")
    plan = [*launcher(), "plan", *(args.plan_args or DEFAULT)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="fedqr-replan-") as tmp:
        env["FEDQR_CACHE"] = args.cache_dir or tmp
        print(f"{' '.join(plan)}\nFEDQR_CACHE={env['FEDQR_CACHE']}; FEDQR_DATA="
              f"{env.get('FEDQR_DATA', '(unset)')}; {os.cpu_count()} CPUs; load average before "
              f"{os.getloadavg()[0]:.2f}")
        started = time.perf_counter()
        wall, cpu = time_once(plan, env)
        print(f"first plan (fills the cache): {wall:.1f} s wall, {cpu:.1f} s CPU "
              f"({time.perf_counter() - started:.1f} s)")
        header = (f"{'re-plan':<28} {'median s':>9} {'min s':>7} {'CPU s':>7}  "
                  f"goal {args.goal:g} s")
        print(header)
        print("-" * len(header))
        missed = []
        for label, argv in (("tables", plan), ("--json", [*plan, "--json"])):
            median, fastest, cpu = timed(argv, env, args.repeats)
            ok = median <= args.goal
            missed += [] if ok else [label]
            print(f"{label:<28} {median:>9.3f} {fastest:>7.3f} {cpu:>7.3f}  "
                  f"{'yes' if ok else 'NO'}")
        median, fastest, cpu = timed([*launcher(), "plan", "--help"], env, args.repeats)
        print(f"{'(fedqr plan --help)':<28} {median:>9.3f} {fastest:>7.3f} {cpu:>7.3f}  "
              "(reference)")
    print(f"load average after {os.getloadavg()[0]:.2f}")
    if missed:
        print(f"over the goal: {', '.join(missed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
