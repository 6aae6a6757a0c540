"""torch's threads on a busy machine: ``fedqr plan`` under three OpenMP settings, idle and
beside busy processes (why :mod:`fedqr._threads` sets ``OMP_WAIT_POLICY=PASSIVE``).

Each setting runs ``fedqr plan --dataset mnist --num-clients 10 --eps 1 --mechanism M --json
--no-cache`` as a new process (empty cache), once on the machine as it is and once with
``--busy`` processes spinning beside it (another job on a shared machine), and prints the wall
time of each with the plans' agreement:

* ``1 thread``: ``OMP_NUM_THREADS=1``;
* ``2 threads, active``: torch's threads with OpenMP's spinning wait (``OMP_WAIT_POLICY=ACTIVE``);
* ``2 threads, passive``: fedqr's default (``OMP_WAIT_POLICY=PASSIVE``).

    FEDQR_DATA=... PYTHONPATH=src python bench/threads.py [--mechanism laplace] [--busy 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SETTINGS = {
    "1 thread": {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"},
    "2 threads, active": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "ACTIVE"},
    "2 threads, passive": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"},
}
_RUN = "import sys; from fedqr.cli import app; sys.argv[0] = 'fedqr'; app()"


def plan_seconds(mechanism: str, env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds and the plan (without its wall time) of one ``fedqr plan`` process."""
    with tempfile.TemporaryDirectory() as cache:
        cmd = [sys.executable, "-c", _RUN, "plan", "--dataset", "mnist", "--num-clients", "10",
               "--eps", "1", "--mechanism", mechanism, "--json", "--no-cache"]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env={**os.environ, **env, "FEDQR_CACHE": cache},
                              capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
    doc = json.loads(done.stdout)
    doc.pop("wall_time_s", None)
    return wall, json.dumps(doc, sort_keys=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mechanism", default="laplace", choices=["laplace", "gaussian"])
    ap.add_argument("--busy", type=int, default=1, help="spinning processes beside the plan")
    a = ap.parse_args()
    print(f"fedqr plan --dataset mnist --num-clients 10 --mechanism {a.mechanism}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"{'setting':<22}{'idle':>10}{f'{a.busy} busy':>10}")
    plans = set()
    for name, env in SETTINGS.items():
        idle, plan = plan_seconds(a.mechanism, env)
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    for _ in range(a.busy)]
        try:
            busy, plan_busy = plan_seconds(a.mechanism, env)
        finally:
            for p in spinners:
                p.kill()
        plans.update((plan, plan_busy))
        print(f"{name:<22}{idle:>9.1f}s{busy:>9.1f}s", flush=True)
    print("every plan the same" if len(plans) == 1 else f"{len(plans)} different plans")


if __name__ == "__main__":
    main()
