"""torch's threads on an idle and on a busy machine: a plan and a small round under several
OpenMP wait settings (why :mod:`fedqr._threads` sets ``OMP_WAIT_POLICY=PASSIVE`` with a short
``GOMP_SPINCOUNT``).

Each setting runs, as new processes:

* ``plan``: ``fedqr plan --dataset mnist --num-clients 10 --eps 1 --mechanism M --json
  --no-cache`` (empty cache), its wall time;
* ``round``: ms per round of ``fedqr.sim.engine.simulate`` on MNIST, N = 10, softmax
  regression, Gaussian b = 10, q = 0.01, test loss every round (bench/peers' ``gaussian-b10``
  case; the fastest of 40 rounds after 3), where a round's many small parallel regions make
  every wake-up of a sleeping thread count; and Laplace b = 10 with 10 repeats in the mixed
  arithmetic on the paper's partition (the full reproduction's round; the median of 20);

once on the machine as it is and once with ``--busy`` processes spinning beside it (another
job on a shared machine), and prints the times with the plans' agreement. Settings:

* ``1 thread``: ``OMP_NUM_THREADS=1``;
* ``2 threads, active``: OpenMP's spinning wait (``OMP_WAIT_POLICY=ACTIVE``);
* ``2 threads, passive``: a thread sleeps as soon as it waits (``GOMP_SPINCOUNT=0``);
* ``2 threads, spin Nk``: it spins N,000 times (libgomp: about 10 us per 1,000) first;
* ``default``: what ``import fedqr`` sets (:mod:`fedqr._threads`), nothing forced.

    FEDQR_DATA=... PYTHONPATH=src python bench/threads.py [--mechanism laplace] [--busy 1]
        [--only "default" "2 threads, passive"] [--skip-plan]
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
    "2 threads, passive": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE",
                           "GOMP_SPINCOUNT": "0"},
    "2 threads, spin 1k": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE",
                           "GOMP_SPINCOUNT": "1000"},
    "2 threads, spin 3k": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE",
                           "GOMP_SPINCOUNT": "3000"},
    "2 threads, spin 10k": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE",
                            "GOMP_SPINCOUNT": "10000"},
    "2 threads, spin 30k": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE",
                            "GOMP_SPINCOUNT": "30000"},
    "2 threads, spin 100k": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE",
                             "GOMP_SPINCOUNT": "100000"},
    "default": {"OMP_NUM_THREADS": "2"},
}
_UNSET = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "FEDQR_SPIN_AUTO")  # the setting alone decides
# ("FEDQR_SPIN_AUTO" is fedqr._threads.AUTO_MARK; this parent does not import fedqr)
_RUN = "import sys; from fedqr.cli import app; sys.argv[0] = 'fedqr'; app()"
_ROUND = """
import time
import numpy as np
import fedqr
from fedqr.data import load_dataset, make_partition
from fedqr.privacy import Mechanism
from fedqr.sim.config import PrivacyConfig, SimConfig
from fedqr.sim.engine import simulate
from fedqr._precision import Arithmetic
ds = load_dataset("mnist")
part = make_partition("iid", labels=ds.y_train, num_clients=10, rng=np.random.default_rng(0))
cfg = SimConfig(num_clients=10, clients_per_round=10, rounds=43, eval_every=1,
                privacy=PrivacyConfig(mechanism=Mechanism.GAUSSIAN, eps=1.0, delta=1e-5,
                                      clip=10.0, sample_rate=0.01))
marks = []
simulate(ds, part, cfg, device="cpu", on_round=lambda t: marks.append(time.perf_counter()))
gauss = min(np.diff(marks[2:])) * 1e3
part = make_partition("two-digits", labels=ds.y_train, num_clients=10,
                      rng=np.random.default_rng(0))
cfg = SimConfig(num_clients=10, clients_per_round=10, rounds=23, repeats=10, eval_every=23,
                arithmetic=Arithmetic.MIXED, privacy=PrivacyConfig(mechanism=Mechanism.LAPLACE,
                                                          eps=5.0, clip=300.0, sample_rate=1.0))
marks = []
simulate(ds, part, cfg, device="cpu", on_round=lambda t: marks.append(time.perf_counter()))
print(gauss, float(np.median(np.diff(marks[2:]))) * 1e3)
"""


def _env(setting: dict[str, str], cache: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _UNSET}
    return {**env, **setting, "FEDQR_CACHE": cache}


def plan_seconds(mechanism: str, env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds and the plan (without its times) of one ``fedqr plan`` process."""
    with tempfile.TemporaryDirectory() as cache:
        cmd = [sys.executable, "-c", _RUN, "plan", "--dataset", "mnist", "--num-clients", "10",
               "--eps", "1", "--mechanism", mechanism, "--json", "--no-cache"]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env=_env(env, cache), capture_output=True, text=True,
                              check=True)
        wall = time.perf_counter() - t0
    return wall, json.dumps(_timeless(json.loads(done.stdout)), sort_keys=True)


def _timeless(doc: object) -> object:
    """``doc`` without its times (``wall_time_s``, ``sim_time_s``: they differ every run)."""
    if isinstance(doc, dict):
        return {k: _timeless(v) for k, v in doc.items() if k not in ("wall_time_s", "sim_time_s")}
    if isinstance(doc, list):
        return [_timeless(v) for v in doc]
    return doc


def round_ms(env: dict[str, str]) -> tuple[float, float]:
    """The fastest round of the Gaussian b = 10 engine run and the median round of the
    Laplace b = 10 run (10 repeats, mixed arithmetic), in a new process."""
    with tempfile.TemporaryDirectory() as cache:
        done = subprocess.run([sys.executable, "-c", _ROUND], env=_env(env, cache),
                              capture_output=True, text=True, check=True)
    gauss, laplace = done.stdout.split()[-2:]
    return float(gauss), float(laplace)


def _measure(a: argparse.Namespace, env: dict[str, str]
             ) -> tuple[float, str, tuple[float, float]]:
    wall, plan = (float("nan"), "") if a.skip_plan else plan_seconds(a.mechanism, env)
    return wall, plan, round_ms(env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mechanism", default="laplace", choices=["laplace", "gaussian"])
    ap.add_argument("--busy", type=int, default=1, help="spinning processes beside the plan")
    ap.add_argument("--only", nargs="*", default=None, help="settings to run (default: all)")
    ap.add_argument("--skip-plan", action="store_true", help="time the round only")
    a = ap.parse_args()
    print(f"fedqr plan --dataset mnist --num-clients 10 --mechanism {a.mechanism}; "
          f"Gaussian b = 10 round; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"{'setting':<22}{'plan idle':>11}{f'{a.busy} busy':>9}"
          f"{'Gauss idle':>12}{f'{a.busy} busy':>9}{'Laplace idle':>14}{f'{a.busy} busy':>10}")
    plans = set()
    for name, env in SETTINGS.items():
        if a.only and name not in a.only:
            continue
        idle, plan, (g_idle, l_idle) = _measure(a, env)
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    for _ in range(a.busy)]
        try:
            busy, plan_busy, (g_busy, l_busy) = _measure(a, env)
        finally:
            for p in spinners:
                p.kill()
        plans.update((plan, plan_busy))
        print(f"{name:<22}{idle:>10.1f}s{busy:>8.1f}s{g_idle:>9.2f} ms{g_busy:>6.2f} ms"
              f"{l_idle:>11.1f} ms{l_busy:>7.1f} ms", flush=True)
    if not a.skip_plan:
        print("every plan the same" if len(plans) == 1 else f"{len(plans)} different plans")


if __name__ == "__main__":
    main()
