"""The OpenMP wait policy of fedqr's processes: idle threads sleep instead of spinning.

torch parallelises an operation over OpenMP threads that, by default, spin (busy-wait) between
parallel regions. On a machine whose cores are busy (another job, the other test worker, a
Flower node beside the server), a spinning thread holds the core that the thread a parallel
region waits for needs, and every small operation costs a scheduler time slice: measured on 2
cores with one other busy process, a twin plan (MNIST, N = 10, Gaussian) took 441 s with torch's
2 threads against 36 s on one thread; with the passive policy the 2 threads cost what one does
under load and keep their speed on an idle machine (``bench/threads.py``).

:func:`prefer_passive_wait` sets ``OMP_WAIT_POLICY=PASSIVE`` unless the user chose a policy; it
acts only before OpenMP starts (before torch is imported), so ``import fedqr`` calls it first.
A program that imports torch before fedqr keeps its own policy.
"""

from __future__ import annotations

import os

__all__ = ["prefer_passive_wait"]


def prefer_passive_wait() -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` unless set (inherited by the processes fedqr starts)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
