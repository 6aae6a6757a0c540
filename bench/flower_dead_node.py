"""How long a deployed round waits for a SuperNode killed mid-run, with and without
``--node-timeout``.

Digits, N = b = 2, T = 3, Laplace; round-timeout 120 s (so that only the SuperLink's node
expiry ends the round). After round 0, SuperNode 1 is killed with SIGKILL and never restarted;
prints, per setting, the longest wait of a round that lost its reply (``exchange_s``), the
reason recorded, and the run's wall time.

    FEDQR_DATA=... python bench/flower_dead_node.py [--node-timeout 8 ...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from fedqr.data import DatasetName
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.runner import FlowerRunner, Mode
from fedqr.privacy import Mechanism


def measure(node_timeout: float | None) -> tuple[float, str, float]:
    """(longest wait of a round with a lost reply, its reason, run wall time) in seconds."""
    cfg = FlowerRunConfig(num_clients=2, clients_per_round=2, rounds=3,
                          dataset=DatasetName.DIGITS, mechanism=Mechanism.LAPLACE, eps=(6.0,),
                          clip=20.0, sample_rate=1.0, lr=0.3, round_timeout=120.0,
                          connect_timeout=120.0)
    with tempfile.TemporaryDirectory(prefix="fedqr-bench-") as work, \
            FlowerRunner(cfg, mode=Mode.DEPLOYMENT, work=Path(work),
                         node_timeout=node_timeout) as runner:
        started = time.monotonic()
        runner.start()
        while not runner.progress():
            runner.poll()
            time.sleep(0.05)
        runner.kill_node(1)
        outcome = runner.wait(timeout_s=600)
        wall = time.monotonic() - started
        missing = outcome.doc["flower"]["missing_replies"]
        lost = {m["round"] for m in missing}
        waits = [line["exchange_s"] for line in runner.progress() if line["round"] in lost]
        return max(waits, default=0.0), missing[0]["reason"] if missing else "-", wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node-timeout", type=float, nargs="*", default=[8.0])
    args = parser.parse_args()
    for timeout in [None, *args.node_timeout]:
        wait, reason, wall = measure(timeout)
        label = "Flower's default (2 heartbeats)" if timeout is None else f"{timeout:g} s"
        print(f"node-timeout {label:32s}: round waited {wait:5.1f} s for the dead node "
              f"(run {wall:5.1f} s); reason: {reason[:90]}")


if __name__ == "__main__":
    main()
