"""Wall and CPU time of ``fedqr reproduce mnist --quick`` as a whole process, against its goal.

The goal is 90 s of wall time on this 2-core machine, idle (issue 24, item 7); with ``--full``
the paper's whole sweep (10 repeats, 201 runs) against 15 min (900 s). Each run starts
a new process ``python -m fedqr.cli reproduce mnist --quick --out DIR`` with a new, empty
output folder (nothing is reused from an earlier run: the constants, theta* and every
simulation are computed); the data must be present (``FEDQR_DATA``, or ``--data-dir``).
The process's status lines are stamped with the seconds since its start, so the table also
shows when the constants, theta* and the runs began. The CPU time is user + system of the
process; on a shared machine it is the steadier figure (wall time also counts waiting for a
core), so the load average is printed before and after.

    FEDQR_DATA=../shared/data PYTHONPATH=src python bench/reproduce_quick.py [--repeats 1]
        [--goal 90] [--threads N] [--keep DIR] [--full] [--arithmetic float32|mixed|auto]

``--threads`` sets ``OMP_NUM_THREADS`` for the process (default: unset, torch's and BLAS's
default of one thread per core). Exits 1 when the median wall time misses the goal.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_once(out: Path, env: dict[str, str], data_dir: Path | None, *, full: bool = False,
             arithmetic: str | None = None) -> tuple[float, float, list[tuple[float, str]]]:
    """Wall and CPU seconds of one reproduction into ``out``, and its stamped status lines."""
    argv = [sys.executable, "-m", "fedqr.cli", "reproduce", "mnist",
            *([] if full else ["--quick"]), "--out", str(out)]
    if arithmetic is not None:
        argv += ["--arithmetic", arithmetic]
    if data_dir is not None:
        argv += ["--data-dir", str(data_dir)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            text=True)
    lines = []
    assert proc.stdout is not None  # PIPE above
    for line in proc.stdout:
        if line.strip():
            lines.append((time.perf_counter() - started, line.rstrip()))
    code = proc.wait()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} exited {code}:\n"
                         + "\n".join(text for _, text in lines[-20:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="timed runs (median reported)")
    parser.add_argument("--goal", type=float, default=None,
                        help="wall seconds allowed (default 90; with --full 900)")
    parser.add_argument("--full", action="store_true",
                        help="the full reproduction (10 repeats, 201 runs) instead of --quick")
    parser.add_argument("--arithmetic", default=None,
                        help="passed to reproduce (default: its own, auto)")
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS")
    parser.add_argument("--data-dir", type=Path, default=None, help="folder of mnist/")
    parser.add_argument("--keep", type=Path, default=None,
                        help="write the last run's output here (must not exist)")
    args = parser.parse_args()
    if args.goal is None:
        args.goal = 900.0 if args.full else 90.0
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got --repeats={args.repeats}")
    if args.keep is not None and args.keep.exists():
        parser.error(f"--keep must name a folder that does not exist, got {args.keep}")
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="200")  # stamp lines as they come
    if args.threads is not None:
        env["OMP_NUM_THREADS"] = str(args.threads)
    print(f"{os.cpu_count()} CPUs; OMP_NUM_THREADS={env.get('OMP_NUM_THREADS', '(unset)')}; "
          f"load average before {os.getloadavg()[0]:.2f}")
    runs = []
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="fedqr-reproduce-") as tmp:
            last = i == args.repeats - 1
            out = args.keep if (last and args.keep is not None) else Path(tmp) / "out"
            wall, cpu, lines = run_once(out, env, args.data_dir, full=args.full,
                                        arithmetic=args.arithmetic)
        runs.append((wall, cpu))
        print(f"run {i + 1}: wall {wall:.1f} s, CPU {cpu:.1f} s, load average "
              f"{os.getloadavg()[0]:.2f}")
        for at, text in lines:
            print(f"  {at:7.1f} s  {text}")
    wall = statistics.median(w for w, _ in runs)
    cpu = statistics.median(c for _, c in runs)
    ok = wall <= args.goal
    print(f"median wall {wall:.1f} s, CPU {cpu:.1f} s; goal {args.goal:g} s wall: "
          f"{'met' if ok else 'MISSED'}; load average after {os.getloadavg()[0]:.2f}")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
