"""Benchmark: ``make test`` (issue 24's goal: <= 6 minutes on 2 cores), phase by phase.

Runs the three commands ``make test`` runs, in this checkout, with cold caches: ``ruff check``
(a fresh ``RUFF_CACHE_DIR``), ``mypy`` (a fresh ``MYPY_CACHE_DIR``: a clean clone has none) and
``pytest -q -n 2 --dist worksteal``, and prints each one's wall time, the total against the
goal and the machine's busy and idle core-seconds during the tests (from ``/proc/stat``: an
idle share shows workers waiting on processes that sleep, a busy machine shows CPU work).
``FEDQR_DATA`` must point at the real data, as in CI; the venv must be installed (``make
install``).

    FEDQR_DATA=../shared/data python bench/make_test.py [--pytest-args "-x"]
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
GOAL_S = 360.0


def _cpu_ticks() -> tuple[int, int]:
    """(busy, idle) ticks of the whole machine since boot."""
    with open("/proc/stat") as f:
        v = [int(t) for t in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v[:8]) - idle, idle


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode
    return time.perf_counter() - t0, rc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pytest-args", default="", help="extra pytest arguments")
    args = ap.parse_args()
    if "FEDQR_DATA" not in os.environ:
        sys.exit("set FEDQR_DATA to the real data (as .ci/run does)")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "RUFF_CACHE_DIR": f"{tmp}/ruff", "MYPY_CACHE_DIR": f"{tmp}/mypy"}
        rows = [("ruff check src tests bench",
                 *_timed([str(BIN / "ruff"), "check", "src", "tests", "bench"], env)),
                ("mypy src (cold cache)", *_timed([str(BIN / "mypy"), "src"], env))]
        busy0, idle0 = _cpu_ticks()
        rows.append(("pytest -n 2 --dist worksteal", *_timed(
            [str(BIN / "python"), "-m", "pytest", "-q", "-n", "2", "--dist", "worksteal",
             "-p", "no:cacheprovider", *shlex.split(args.pytest_args)], env)))
        busy1, idle1 = _cpu_ticks()
    hz = os.sysconf("SC_CLK_TCK")
    total = sum(wall for _, wall, _ in rows)
    print(f"\n{'phase':32s} {'wall':>8s}  exit")
    for name, wall, rc in rows:
        print(f"{name:32s} {wall:7.1f} s  {rc}")
    print(f"{'make test (sum)':32s} {total:7.1f} s  goal {GOAL_S:.0f} s: "
          f"{'met' if total <= GOAL_S else 'MISSED'}")
    print(f"during pytest: {(busy1 - busy0) / hz:.0f} busy and {(idle1 - idle0) / hz:.0f} idle "
          f"core-seconds on {os.cpu_count()} cores")
    if any(rc for _, _, rc in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
