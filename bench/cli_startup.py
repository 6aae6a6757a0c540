"""How fast ``fedqr --help`` and every ``fedqr <command> --help`` answer, as whole processes.

The goal is 0.5 s of wall time for each (issue 24): the command modules import only light
modules, the heavy ones (torch, dp-accounting, Flower) when a command runs. Each help is
started as a new process ``--repeats`` times after one warm-up run (which fills the page
cache and compiles the bytecode); the table shows the median and the fastest wall time and
the median CPU time (user + system) of the process. On a shared machine the CPU time is the
steadier figure: wall time also counts waiting for a core. A last row times a typer app with
one command: the part of the cost that is typer's and rich's, not fedqr's. The commands are
those the app registers, so a new one is measured without touching this file.

fedqr's bytecode is cached as after an install (the warm-up run writes it): the runs are
started without ``PYTHONDONTWRITEBYTECODE``; ``--no-pyc`` keeps it set, and every run then
compiles fedqr's command modules again (about 30 ms).

    PYTHONPATH=src python bench/cli_startup.py [--repeats 5] [--goal 0.5] [--no-pyc]

Exits 1 when a median wall time misses the goal.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import click
import typer.main

from fedqr.cli import app


def command_paths() -> list[list[str]]:
    """``[]`` (the top level), then every command and subcommand, as argument lists."""
    paths: list[list[str]] = [[]]

    def walk(group: click.Group, prefix: list[str]) -> None:
        for name in sorted(group.commands):
            cmd = group.commands[name]
            paths.append([*prefix, name])
            if isinstance(cmd, click.Group):
                walk(cmd, [*prefix, name])

    root = typer.main.get_command(app)
    assert isinstance(root, click.Group)
    walk(root, [])
    return paths


# the floor: typer and rich alone, an app with one command and one option (not judged)
_FLOOR = """
import typer
app = typer.Typer(add_completion=False)
@app.callback()
def main() -> None:
    \"\"\"An app.\"\"\"
@app.command()
def run(x: int = 1) -> None:
    \"\"\"A command.\"\"\"
app(prog_name="floor")
"""


def launcher() -> list[str]:
    """The ``fedqr`` script installed next to this Python (what a user runs), else
    ``python -m fedqr.cli``."""
    script = Path(sys.executable).parent / "fedqr"
    if script.is_file():
        return [str(script)]
    found = shutil.which("fedqr")
    return [found] if found else [sys.executable, "-m", "fedqr.cli"]


def time_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run of ``argv``; it must exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                          check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: "
                         f"{done.stderr.decode(errors='replace')}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per command")
    parser.add_argument("--goal", type=float, default=0.5, help="wall seconds allowed")
    parser.add_argument("--no-pyc", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE as it is (default: unset it)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got --repeats={args.repeats}")
    base = launcher()
    env = dict(os.environ)
    if not args.no_pyc:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    print(f"launcher: {' '.join(base)}; {os.cpu_count()} CPUs; load average before "
          f"{os.getloadavg()[0]:.2f}; median of {args.repeats} runs after a warm-up; "
          f"bytecode {'cached' if 'PYTHONDONTWRITEBYTECODE' not in env else 'not written'}")
    header = f"{'command':<28} {'median s':>9} {'min s':>7} {'CPU s':>7}  goal {args.goal:g} s"
    print(header)
    print("-" * len(header))
    missed = []
    for path in command_paths():
        argv = [*base, *path, "--help"]
        time_once(argv, env)  # warm-up
        runs = [time_once(argv, env) for _ in range(args.repeats)]
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        ok = wall <= args.goal
        if not ok:
            missed.append(" ".join(path) or "(top level)")
        label = "fedqr " + " ".join([*path, "--help"])
        print(f"{label:<28} {wall:>9.3f} {min(w for w, _ in runs):>7.3f} {cpu:>7.3f}  "
              f"{'yes' if ok else 'NO'}")
    floor_argv = [sys.executable, "-c", _FLOOR, "run", "--help"]
    time_once(floor_argv, env)  # warm-up
    floor = [time_once(floor_argv, env) for _ in range(args.repeats)]
    print(f"{'(typer alone: 1 command)':<28} {statistics.median(w for w, _ in floor):>9.3f} "
          f"{min(w for w, _ in floor):>7.3f} {statistics.median(c for _, c in floor):>7.3f}  "
          "(reference)")
    print(f"load average after {os.getloadavg()[0]:.2f}")
    if missed:
        print(f"over the goal: {', '.join(missed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
