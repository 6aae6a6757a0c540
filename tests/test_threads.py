"""fedqr._threads: the OpenMP wait set before torch starts, unless the user chose one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from fedqr._threads import (
    AUTO_MARK,
    IDLE_SPIN_COUNT,
    SPIN_COUNT,
    _own_running_threads,
    _running_threads,
    others_runnable,
    prefer_passive_wait,
    spin_count,
)


def _reads(*counts: int) -> Callable[[], int]:
    it: Iterator[int] = iter(counts)
    return lambda: next(it)


def test_the_long_spin_only_where_nothing_else_runs() -> None:
    env: dict[str, str] = {}
    prefer_passive_wait(env, read=lambda: 0)  # nothing else runs
    assert env == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": str(IDLE_SPIN_COUNT),
                   AUTO_MARK: str(IDLE_SPIN_COUNT)}
    env = {}
    prefer_passive_wait(env, read=lambda: 1)  # one other process's thread runs
    assert env == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": str(SPIN_COUNT),
                   AUTO_MARK: str(SPIN_COUNT)}


def test_the_count_is_a_median_of_reads() -> None:
    assert others_runnable(_reads(0, 2, 0, 0, 1), samples=5, gap_s=0) == 0  # one blip
    assert others_runnable(_reads(2, 2, 0, 2, 1), samples=5, gap_s=0) == 2
    assert others_runnable(_reads(-1, -1, -1), samples=3, gap_s=0) == 0  # reads a moment apart
    assert spin_count(0) == IDLE_SPIN_COUNT
    assert spin_count(1) == SPIN_COUNT


def test_an_unreadable_count_takes_the_short_spin() -> None:
    def broken() -> int:
        raise OSError("no /proc here")

    assert others_runnable(broken, samples=3, gap_s=0) is None
    assert spin_count(None) == SPIN_COUNT
    env: dict[str, str] = {}
    prefer_passive_wait(env, read=broken)
    assert env["GOMP_SPINCOUNT"] == str(SPIN_COUNT)


def test_the_kernels_count_parses(tmp_path: Path) -> None:
    path = tmp_path / "loadavg"
    path.write_text("0.52 0.61 0.70 3/312 4242\n", encoding="ascii")
    assert _running_threads(str(path)) == 3
    if os.path.exists("/proc/loadavg"):
        assert _running_threads() >= 1  # this reader at least


def test_this_process_own_runnable_threads_are_not_others(tmp_path: Path) -> None:
    for tid, stat in (("1", "1 (python) R 0 1"), ("2", "2 (a) b) S 0 1"),
                      ("3", "3 (x (R) R 0 1")):
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "stat").write_text(stat, encoding="ascii")
    assert _own_running_threads(str(tmp_path)) == 2  # the names' parentheses do not count
    if os.path.exists("/proc/self/task"):
        assert _own_running_threads() >= 1  # this reader

def test_a_chosen_policy_is_left_alone() -> None:
    for policy in ("ACTIVE", "PASSIVE"):
        env = {"OMP_WAIT_POLICY": policy}
        prefer_passive_wait(env, read=lambda: 0)
        assert env == {"OMP_WAIT_POLICY": policy}  # no spin count forced on it


def test_a_chosen_spin_count_is_kept() -> None:
    env = {"GOMP_SPINCOUNT": "0"}
    prefer_passive_wait(env, read=lambda: 0)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"}  # no mark: the user's


def test_a_child_of_fedqr_chooses_its_own_spin() -> None:
    parent: dict[str, str] = {}
    prefer_passive_wait(parent, read=lambda: 0)  # the parent started on an idle machine
    child = dict(parent)
    prefer_passive_wait(child, read=lambda: 3)  # its siblings run beside the child
    assert child["GOMP_SPINCOUNT"] == child[AUTO_MARK] == str(SPIN_COUNT)
    assert child["OMP_WAIT_POLICY"] == "PASSIVE"
    mine = {**parent, "GOMP_SPINCOUNT": "0"}  # a spin its program set for it since
    prefer_passive_wait(mine, read=lambda: 0)
    assert mine["GOMP_SPINCOUNT"] == "0"


def test_import_fedqr_sets_them_for_the_processes_it_starts() -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", AUTO_MARK)}
    code = ("import os, fedqr; print(os.environ['OMP_WAIT_POLICY'], "
            f"os.environ['GOMP_SPINCOUNT'], os.environ['{AUTO_MARK}'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "PASSIVE" and out[1] == out[2]
    assert out[1] in (str(SPIN_COUNT), str(IDLE_SPIN_COUNT))
