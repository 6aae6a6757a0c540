"""Processes and their descendants: start one that dies with its parent, stop a whole tree.

Used by :mod:`fedqr.flower.launch` (every Flower process it starts) and by the tests (no
Flower process left behind). Linux: descendants are read from ``/proc``.
"""

from __future__ import annotations

import ctypes
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict

STOP_GRACE_S = 5.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's ephemeral range
    where it can: a Flower process binds it seconds later, and a port of the ephemeral range
    may meanwhile be taken by any outgoing connection (a SuperNode once failed to start with
    "address already in use" beside another federation's HTTP traffic)."""
    low = _ephemeral_low()
    pick = random.SystemRandom()  # not a simulation's draw: any free port will do
    for _ in range(64):
        port = pick.randrange(max(1024, low - 12_000), low) if low > 2048 else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux), 0 where unknown."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


PR_SET_PDEATHSIG = 1  # prctl option, <linux/prctl.h>


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> None:
    """In a child (``preexec_fn``): send ``sig`` to this process when ``parent`` dies (Linux).

    The parent-death signal is kept across ``exec``; a parent that already died before the
    call is noticed by the changed parent pid.
    """
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)


def _descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (from /proc; empty where there is none)."""
    children: dict[int, list[int]] = defaultdict(list)
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children[ppid].append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_process(proc: subprocess.Popen[bytes], *, grace_s: float = STOP_GRACE_S,
                 kill: bool = False) -> None:
    """Stop ``proc``, its process group and all its descendants (SIGKILL at once if ``kill``)."""
    tree = [proc.pid, *_descendants(proc.pid)]
    first = signal.SIGKILL if kill else signal.SIGTERM
    try:
        os.killpg(proc.pid, first)
    except (ProcessLookupError, PermissionError):
        pass
    _signal(tree, first)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    alive = [p for p in tree if _alive(p)]
    if proc.poll() is None or alive:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _signal(alive + _descendants(proc.pid), signal.SIGKILL)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:  # unkillable (uninterruptible sleep): nothing more to do
        pass


def app_processes(root: int) -> list[int]:
    """Descendants of ``root`` running a Flower app (``flwr-serverapp``, ``flwr-simulation``)."""
    found = []
    for pid in _descendants(root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ")
        except OSError:
            continue
        if b"flwr-serverapp" in cmd or b"flwr-simulation" in cmd:
            found.append(pid)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
