"""Soak test (not in CI): kill ``fedqr reproduce`` and ``fedqr run`` at random, resume, and
count what was lost.

Each cycle starts one command in its own process group -- ``fedqr reproduce mnist --quick
--fraction 0.02`` into one shared folder (so every cycle resumes the previous ones), or
``fedqr run`` into a fresh folder -- waits a random time and sends SIGKILL or SIGTERM to the
whole group. After each kill it checks that no process of the group is left and that every
file the command left is whole: every stored reproduce run and the manifest parse, and a
``fedqr run`` folder holds either nothing or both ``result.json`` (valid) and ``training.png``.
A reproduce command is killed only after its manifest exists (the first one builds it), so
that the kills land among the runs. At the end ``fedqr reproduce`` runs to completion and its
figures are redrawn.

Reported: runs finished (reproduce runs stored plus complete ``fedqr run`` outputs), runs
recomputed (a stored run found damaged and computed again; want 0), files damaged (want 0),
partial outputs (want 0), processes left behind (want 0), temporary files left by SIGKILL
(hidden ``.name.*`` files an interrupted atomic write could not remove; harmless).

    FEDQR_DATA=../shared/data python bench/soak.py [--cycles 12] [--max-wait 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fedqr._atomic import DamagedFileError, read_json
from fedqr.experiments.runs import read_run
from fedqr.experiments.sweep import read_manifest

FEDQR = [sys.executable, "-c", "from fedqr.cli import app; app()"]
REPRODUCE = ["reproduce", "mnist", "--quick", "--fraction", "0.02", "--device", "cpu"]
RUN = ["run", "--dataset", "mnist", "--fraction", "0.05", "--num-clients", "10",
       "--clients-per-round", "5", "--rounds", "20", "--mechanism", "laplace", "--eps", "5",
       "--device", "cpu"]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as fh:
        return subprocess.Popen([*FEDQR, *args], stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)


def kill_at_random(proc: subprocess.Popen[bytes], wait: float, sig: signal.Signals) -> str:
    """``'finished'`` if the command ended first, else ``'killed'``; never leaves the group."""
    try:
        proc.wait(timeout=wait)
        return "finished"
    except subprocess.TimeoutExpired:
        pass
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:  # SIGTERM ignored: counted, then forced
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return "hung"
    return "killed"


def check_reproduce(folder: Path) -> tuple[int, list[str]]:
    """(stored runs, damaged files) of a reproduce folder."""
    damaged = []
    if (folder / "manifest.json").exists():
        try:
            read_manifest(folder / "manifest.json")
        except DamagedFileError as e:
            damaged.append(str(e))
    stored = 0
    for path in sorted((folder / "runs").glob("[!.]*.json")):
        try:
            read_run(path)
            stored += 1
        except DamagedFileError as e:
            damaged.append(str(e))
    return stored, damaged


def check_run(folder: Path) -> tuple[str, list[str]]:
    """``'complete'``, ``'empty'`` or ``'partial'``, and damaged files, of a run folder."""
    names = {p.name for p in folder.iterdir() if not p.name.startswith(".")} \
        if folder.exists() else set()
    if not names:
        return "empty", []
    if names != {"result.json", "training.png"}:
        return "partial", []
    try:
        doc = read_json(folder / "result.json")
        if not isinstance(doc, dict) or "clients" not in doc:
            return "complete", [f"{folder / 'result.json'}: not a result document"]
    except DamagedFileError as e:
        return "complete", [str(e)]
    return "complete", []


def temp_files(root: Path) -> int:
    return sum(1 for p in root.rglob(".*") if p.is_file() or p.name.startswith(".stage-"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=12, help="kill cycles")
    ap.add_argument("--max-wait", type=float, default=20.0, help="longest seconds before a kill")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=None, help="folder (default: a temporary one)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = args.work or Path(tempfile.mkdtemp(prefix="fedqr-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "commands.log"
    repro = work / "reproduce"
    counts = {"killed": 0, "finished": 0, "hung": 0, "left_behind": 0, "partial": 0}
    damaged: list[str] = []
    run_dirs = []
    started = time.perf_counter()
    for cycle in range(args.cycles):
        which = rng.choice(["reproduce", "run"])
        sig = rng.choice([signal.SIGKILL, signal.SIGTERM])
        wait = rng.uniform(0.5, args.max_wait)
        if which == "reproduce":
            proc = start([*REPRODUCE, "--out", str(repro)], log)
            # the first run builds the manifest (constants, plans): let it finish that, so
            # that the kills land among the runs, not always in the estimation
            while not (repro / "manifest.json").exists() and proc.poll() is None:
                time.sleep(0.5)
        else:
            out = work / f"run-{cycle}"
            run_dirs.append(out)
            proc = start([*RUN, "--seed", str(cycle), "--out", str(out)], log)
        outcome = kill_at_random(proc, wait, sig)
        counts[outcome] += 1
        time.sleep(0.2)
        if group_alive(proc.pid):
            counts["left_behind"] += 1
            os.killpg(proc.pid, signal.SIGKILL)
        if which == "reproduce":
            damaged += check_reproduce(repro)[1]
        else:
            state, bad = check_run(out)
            damaged += bad
            counts["partial"] += state == "partial"
        print(f"cycle {cycle:2d}: {which:9s} {sig.name:7s} after {wait:4.1f} s: {outcome}",
              flush=True)
    before = check_reproduce(repro)[0]
    print("resuming fedqr reproduce to completion ...", flush=True)
    final = subprocess.run([*FEDQR, *REPRODUCE, "--out", str(repro)], capture_output=True,
                           text=True)
    text = final.stdout + final.stderr
    with log.open("a") as fh:
        fh.write(text)
    stored, bad = check_reproduce(repro)
    damaged += bad
    recomputed = log.read_text(errors="replace").count("recomputing it")
    complete_runs = sum(check_run(d)[0] == "complete" for d in run_dirs)
    manifest = json.loads((repro / "manifest.json").read_text())
    total = len({e["key"] for e in manifest["entries"]})
    report = {
        "cycles": args.cycles,
        "commands killed": counts["killed"],
        "commands finished before their kill": counts["finished"],
        "SIGTERM ignored (forced)": counts["hung"],
        "processes left behind": counts["left_behind"],
        "reproduce runs stored before the final resume": f"{before} of {total}",
        "final resume exit code": final.returncode,
        "runs finished": stored + complete_runs,
        "  reproduce runs stored": f"{stored} of {total}",
        "  fedqr run outputs complete": f"{complete_runs} of {len(run_dirs)}",
        "runs recomputed (damaged, computed again)": recomputed,
        "files damaged": len(damaged),
        "partial outputs": counts["partial"],
        "temporary files left by SIGKILL": temp_files(work),
        "wall time s": round(time.perf_counter() - started, 1),
        "work folder": str(work),
    }
    for k, v in report.items():
        print(f"{k:48s} {v}")
    for d in damaged:
        print("DAMAGED:", d)
    if final.returncode != 0:
        print(text[-2000:])
    ok = not damaged and not counts["partial"] and not counts["left_behind"] \
        and final.returncode == 0 and stored == total
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
