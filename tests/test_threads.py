"""fedqr._threads: the OpenMP wait set before torch starts, unless the user chose one."""

from __future__ import annotations

import os
import subprocess
import sys

from fedqr._threads import SPIN_COUNT, prefer_passive_wait


def test_a_short_spin_then_sleep_where_nothing_is_chosen() -> None:
    env: dict[str, str] = {}
    prefer_passive_wait(env)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": str(SPIN_COUNT)}


def test_a_chosen_policy_is_left_alone() -> None:
    for policy in ("ACTIVE", "PASSIVE"):
        env = {"OMP_WAIT_POLICY": policy}
        prefer_passive_wait(env)
        assert env == {"OMP_WAIT_POLICY": policy}  # no spin count forced on it


def test_a_chosen_spin_count_is_kept() -> None:
    env = {"GOMP_SPINCOUNT": "0"}
    prefer_passive_wait(env)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"}


def test_import_fedqr_sets_them_for_the_processes_it_starts() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    code = ("import os, fedqr; print(os.environ['OMP_WAIT_POLICY'], "
            "os.environ['GOMP_SPINCOUNT'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["PASSIVE", str(SPIN_COUNT)]
