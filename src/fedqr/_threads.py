"""The OpenMP wait of fedqr's processes: an idle thread spins briefly, then sleeps.

torch parallelises an operation over OpenMP threads that, by default, spin (busy-wait) between
parallel regions for about 3 ms (libgomp). On a machine whose cores are busy (another job, the
other test worker, a Flower node beside the server), a spinning thread holds the core that the
thread a parallel region waits for needs, and every small operation costs a scheduler time
slice: measured on 2 cores with one other busy process, a twin plan (MNIST, N = 10, Gaussian)
took 441 s with torch's 2 threads against 36 s on one thread. A thread that sleeps at once
(``OMP_WAIT_POLICY=PASSIVE``) fixes that but pays a wake-up at every parallel region, and a
round of small products has many: a Gaussian round (MNIST, b = 10, q = 0.01, test loss every
round) took 3.3 ms that way against 2.1 ms spinning, on an idle machine. A spin of 1,000
iterations (about 10 us, ``GOMP_SPINCOUNT=1000``) covers the gaps between a round's regions
and is short enough not to hold a busy core for long: 2.3 ms idle; beside one busy process on
2 cores, plans take 13 to 16% longer than sleeping at once, not 12x (``bench/threads.py``
prints every setting, idle and busy).

:func:`prefer_passive_wait` sets ``OMP_WAIT_POLICY=PASSIVE`` and ``GOMP_SPINCOUNT=1000``
unless the user chose a policy (a chosen policy is left alone, and so is a chosen spin
count); it acts only before OpenMP starts (before torch is imported), so ``import fedqr``
calls it first. A program that imports torch before fedqr keeps its own policy.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

__all__ = ["SPIN_COUNT", "prefer_passive_wait"]

SPIN_COUNT = 1000  # libgomp's spins before a waiting thread sleeps: about 10 us


def prefer_passive_wait(environ: MutableMapping[str, str] | None = None) -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` with ``GOMP_SPINCOUNT=1000`` unless a policy is set
    (inherited by the processes fedqr starts); ``environ`` defaults to ``os.environ``."""
    env = os.environ if environ is None else environ
    if "OMP_WAIT_POLICY" in env:
        return
    env["OMP_WAIT_POLICY"] = "PASSIVE"  # libgomp: GOMP_SPINCOUNT, where set, overrides it
    env.setdefault("GOMP_SPINCOUNT", str(SPIN_COUNT))
