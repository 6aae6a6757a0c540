"""SIGTERM as Ctrl-C for the ``fedqr`` commands (standard library only: no start-up cost).

A command stopped by SIGTERM (a scheduler's or a supervisor's stop) unwinds as it does on
Ctrl-C: a folder being written, a cache file and the processes a Flower command started are
removed or stopped by the same ``finally`` blocks, not left half-written or running.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["sigterm_as_interrupt"]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt`` (outside the main thread, where
    no handler can be set, nothing changes); the previous handler is restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
