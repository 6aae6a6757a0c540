"""Timing helper shared by the benchmarks: the best of several runs after a warm-up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def best_seconds(f: Callable[[], Any], reps: int) -> float:
    """Seconds of the fastest of ``reps`` calls of ``f`` after one warm-up call (on a shared
    machine the minimum is the least disturbed)."""
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)
