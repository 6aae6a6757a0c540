"""Benchmark: ms per FedSGD-DPC round in fedqr and its peers (Opacus, pfl, Flower).

The workload (see README.md): MNIST-shaped data (60,000 x 784 float32; real MNIST from
$FEDQR_DATA/mnist when there, else random), N = 10 clients of 6,000 rows, softmax regression
without bias (784 x 10), client-side DP, one FedSGD round = each of the b selected clients sums
its per-sample-clipped gradients, adds noise, the server averages and steps, and the test loss
over the 10,000 test rows is evaluated every round. Cases: Laplace b = 10 and b = 1 (full
batch, l1 clip 300), Gaussian b = 10 and b = 1 (Poisson q = 0.01, l2 clip 10, z = 1).

Each (case, framework) runs in its own process (bench/peers/worker.py), interleaved, with the
same torch thread count; this process measures the machine's floor. Prints one table (ms of
the fastest timed round, the fastest peer / fedqr, fedqr / floor) and writes results.json and
results.md beside this file. Run it through ``make bench-peers`` (it builds bench/peers/.venv
with the peers).

    FEDQR_DATA=../shared/data python bench/peers/run.py [--rounds 20] [--warmup 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from floor import measure_machine, round_floor
from report import render_markdown, render_table
from workload import CASES, NUM_CLIENTS

HERE = Path(__file__).resolve().parent
FRAMEWORKS = ("fedqr", "opacus", "pfl", "flower")
PEERS = FRAMEWORKS[1:]
# the figure compared: the fastest timed round, the least disturbed on a shared machine (as
# bench/_timing.py's best_seconds); results.json keeps the median, mean and max too
STAT = "ms_min"


def machine_name() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def run_framework(fw: str, args: argparse.Namespace, cases: list[str]) -> dict[str, Any]:
    """One framework's worker process; its JSON, or the reason it gave none."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{fw}.json"
        cmd = [sys.executable, str(HERE / "worker.py"), "--framework", fw,
               "--cases", ",".join(cases), "--rounds", str(args.rounds),
               "--warmup", str(args.warmup), "--threads", str(args.threads), "--out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        if out.exists():
            return dict(json.loads(out.read_text()))
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"framework": fw, "error": f"worker exited {proc.returncode}: {' | '.join(tail)}",
                "cases": {}}


def run_all(chosen: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """One process per (case, framework), the frameworks interleaved case by case, so that a
    change of the shared machine's load falls on all of them alike."""
    results: dict[str, Any] = {fw: {"framework": fw, "error": "not run (--frameworks)",
                                    "cases": {}} for fw in FRAMEWORKS if fw not in chosen}
    for case in CASES:
        for fw in chosen:
            one = run_framework(fw, args, [case.name])
            if fw not in results:
                results[fw] = {k: v for k, v in one.items() if k != "cases"} | {"cases": {}}
            results[fw]["cases"].update(one.get("cases", {}))
    return {fw: results[fw] for fw in FRAMEWORKS}


def ratios(results: dict[str, Any], floors: dict[str, Any]) -> dict[str, Any]:
    """Per case: the fastest peer, its time over fedqr's, and fedqr's over the floor."""
    out: dict[str, Any] = {}
    for case in CASES:
        ms = {fw: results[fw]["cases"].get(case.name, {}).get(STAT) for fw in FRAMEWORKS}
        peers = {fw: v for fw, v in ms.items() if fw in PEERS and v is not None}
        fastest = min(peers, key=peers.__getitem__) if peers else None
        fq = ms["fedqr"]
        out[case.name] = {
            "fastest_peer": fastest,
            "fastest_peer_over_fedqr": (peers[fastest] / fq) if fastest and fq else None,
            "fedqr_over_floor": fq / floors[case.name]["floor_ms"] if fq else None,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20, help="timed rounds per case")
    ap.add_argument("--warmup", type=int, default=3, help="untimed rounds before them")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of every process")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per framework")
    ap.add_argument("--out-dir", type=Path, default=HERE)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    machine = measure_machine()
    floors = {c.name: round_floor(c, machine, rows_per_client=60_000 // NUM_CLIENTS,
                                  n_test=10_000, p=784) for c in CASES}
    chosen = [fw for fw in args.frameworks.split(",") if fw]
    results = run_all(chosen, args)
    doc = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_name(), "threads": args.threads, "rounds_timed": args.rounds,
        "warmup_rounds": args.warmup, "python": platform.python_version(),
        # the machine is shared: its 1-minute load average before and after the run
        "load_average": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "data": next((r["data"] for r in results.values() if "data" in r), None),
        "machine_floor": machine, "floors": floors,
        "results": results, "ratios": ratios(results, floors),
    }
    print(render_table(doc))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out_dir / "results.md").write_text(render_markdown(doc))
    print(f"wrote {args.out_dir / 'results.json'} and {args.out_dir / 'results.md'}")


if __name__ == "__main__":
    main()
