"""Shared helpers of the Flower tests: Flower present, no process left behind."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
from typing import Any

import pytest


def require_flwr() -> None:
    """Skip without Flower, except in CI (FEDQR_REQUIRE_DATA=1), where that is a failure."""
    if importlib.util.find_spec("flwr") is None:
        msg = "flwr is not installed: pip install -c constraints.txt -e '.[flower]'"
        if os.environ.get("FEDQR_REQUIRE_DATA") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


def flower_processes() -> list[int]:
    """Live descendants of this test process that run Flower."""
    from fedqr.flower.procs import _alive, _descendants

    found = []
    for pid in _descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if (b"flower-" in cmd or b"flwr" in cmd) and _alive(pid):
            found.append(pid)
    return found


@pytest.fixture
def no_leftovers():
    """Fail when a test leaves a Flower process running."""
    require_flwr()
    yield
    left = flower_processes()
    assert not left, f"Flower processes left running: {left}"


def stop_process_groups(procs: list[subprocess.Popen[Any]]) -> None:
    """SIGTERM the process group of each of ``procs`` (started with ``start_new_session``),
    then wait for them."""
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for proc in procs:
        proc.wait(timeout=30)
