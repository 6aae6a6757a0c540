"""Leaving the ``fedqr`` process without tearing the interpreter down.

Once a command has finished, Python's finalisation frees every object of every imported
module one by one: with torch, dp-accounting and SciPy loaded that takes about 0.6 s on the
2-core development machine (0.47 s for torch alone), longer than ``fedqr --help`` itself
(``bench/cli_startup.py``, ``bench/plan_cli.py``). :func:`leave` does what an exit must (the
exit handlers, which flush logs, remove temporary directories and join helper processes;
standard streams flushed), then ends the process with ``os._exit``, skipping the rest. Where
some other thread still runs (a Flower server's, say) it leaves the normal way, which waits
for it.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

__all__ = ["exit_status", "leave"]


def exit_status(code: object) -> int:
    """The process status Python gives ``SystemExit(code)``: 0 for ``None``, the integer, else
    1 (after writing ``code`` to standard error, as Python does)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def leave(code: object) -> None:
    """End the process with ``SystemExit(code)``'s status after the exit handlers; returns
    (and the caller exits the normal way) where another thread is alive or the handlers
    cannot be run."""
    run_handlers = getattr(atexit, "_run_exitfuncs", None)
    if threading.active_count() > 1 or run_handlers is None:
        return
    status = exit_status(code)
    try:
        _flush()
        run_handlers()
        _flush()
    except (OSError, ValueError):  # a closed or broken stream: Python's own exit reports it
        return
    os._exit(status & 0xFF)  # as C's exit(), which Python's own exit calls


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
