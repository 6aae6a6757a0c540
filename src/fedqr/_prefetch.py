"""The planner's RDP curves computed ahead, in a second process, while the command starts.

A Gaussian plan needs dp-accounting's RDP curve of one Poisson-sampled step for some 30 to 50
noise multipliers (:class:`fedqr.theory.calibration.RdpNoiseTable`): about 0.7 s of pure
Python on one core, which the planner used to spend inside its search. Before the search can
start, ``fedqr plan`` spends some 2.5 s importing torch and dp-accounting and loading the data,
all on one core. :func:`start` forks a process at the command's start (before torch is
imported, so no thread pool is copied) that fills the same tables for the scenario's rate and
budgets over the reply counts a search reaches; :func:`curves` hands its results to the
planner's tables, which compute whatever is still missing themselves. The curves are the same
dp-accounting calls with the same arguments, so every noise multiplier, and every plan, is the
same bit for bit with or without the second process (``tests/theory``).

Only where ``fork`` is the platform's way (Linux) and more than one core is free; a plan that
is answered from the cache never waits for it (the process is a daemon, ended at exit).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["MAX_REPLIES", "WAIT_S", "curves", "start"]

MAX_REPLIES = 2048
"""The prefetched tables cover ``z(R)`` for R = 1 .. this (the search's usual reach; a table
computes the curves beyond it itself)."""

WAIT_S = 5.0
"""How long a table waits, at its first curve, for a prefetch still running."""

_pending: dict[float, tuple[Any, Any]] = {}  # rate -> (connection, process)
_ready: dict[float, dict[float, Any]] = {}  # rate -> {curve key: RDP curve}


def start(*, sample_rate: float, eps: Sequence[float], delta: Sequence[float]) -> bool:
    """Start filling the RDP tables of ``sample_rate`` and each ``(eps_i, delta_i)`` in a forked
    process; ``False`` (nothing started) where that would not pay or is not safe."""
    if (not sys.platform.startswith("linux") or sample_rate in _pending
            or sample_rate in _ready or "torch" in sys.modules or _free_cores() < 2
            or threading.active_count() > 1 or not 0.0 < sample_rate < 1.0):
        return False  # a fork copies only the calling thread: none other may run
    budgets = sorted({(float(e), float(d)) for e, d in zip(eps, delta, strict=True)})
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_fill, args=(send, sample_rate, budgets), daemon=True,
                       name="fedqr-rdp-prefetch")
    proc.start()
    send.close()
    _pending[sample_rate] = (receive, proc)
    return True


def curves(sample_rate: float, *, wait_s: float = WAIT_S) -> dict[float, Any]:
    """The curves prefetched for ``sample_rate`` (keyed as the tables key them), waiting up to
    ``wait_s`` for a prefetch still running; empty where none was started or it failed."""
    pending = _pending.pop(sample_rate, None)
    if pending is not None:
        receive, proc = pending
        got: dict[float, Any] = {}
        try:
            if receive.poll(wait_s):
                got = receive.recv()
        except (EOFError, OSError):  # the process died: the tables compute their own
            got = {}
        finally:
            receive.close()
            if proc.is_alive():
                proc.terminate()
            proc.join(1.0)
        _ready[sample_rate] = got
    return _ready.get(sample_rate, {})


def _free_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _fill(send: Any, sample_rate: float, budgets: list[tuple[float, float]]) -> None:
    """The forked process: every table's curves over R = 1 .. MAX_REPLIES, sent back."""
    from fedqr.theory.calibration import RdpNoiseTable

    out: dict[float, Any] = {}
    for eps, delta in budgets:
        table = RdpNoiseTable(sample_rate=sample_rate, eps=eps, delta=delta, prefetched=False)
        table.fill(MAX_REPLIES)
        out.update(table.curves())
    send.send(out)
    send.close()
