"""The OpenMP wait of fedqr's processes: an idle thread spins a while, then sleeps.

torch parallelises an operation over OpenMP threads that, by default, spin (busy-wait) between
parallel regions for about 3 ms (libgomp). On a machine whose cores are busy (another job, the
other test worker, a Flower node beside the server), a spinning thread holds the core that the
thread a parallel region waits for needs, and every small operation costs a scheduler time
slice: measured on 2 cores with one other busy process, a twin plan (MNIST, N = 10, Gaussian)
took 441 s with torch's 2 threads against 36 s on one thread. A thread that sleeps at once
(``OMP_WAIT_POLICY=PASSIVE``) fixes that but pays a wake-up at every parallel region, and a
round of small products has many.

So the spin depends on the machine when fedqr starts (:func:`spin_count`):

* **nothing else runnable** (the Linux kernel's count of runnable threads, ``/proc/loadavg``,
  less this process's own, ``/proc/self/task``, read a few times over about 3 ms, is 0;
  numpy's BLAS threads spin a while after it starts them): ``GOMP_SPINCOUNT=10000`` (about 100 us),
  which covers the gaps between a round's regions. On a 2-core Xeon, idle: a Gaussian MNIST
  plan (N = 10) 20.4 s against 29.0 s at 1,000 spins, a Laplace round of the mixed pass 92
  against 115 ms; longer spins gain no more (``bench/threads.py``);
* **another thread runnable**: ``GOMP_SPINCOUNT=1000`` (about 10 us), short enough not to
  hold a busy core for long: beside one busy process on 2 cores, plans take 13 to 16% longer
  than sleeping at once, where 10,000 spins made them 1.6x to 4x slower.

A count read at start cannot see a job that starts later (the long spin then costs what it
costs beside a busy process); unlike the load average it does not lag, so the fedqr process
that just ended does not count. Without ``/proc/loadavg`` (not Linux) the short spin is taken.

:func:`prefer_passive_wait` sets ``OMP_WAIT_POLICY=PASSIVE`` and that ``GOMP_SPINCOUNT``
unless the user chose a policy (a chosen policy is left alone, and so is a chosen spin
count); it acts only before OpenMP starts (before torch is imported), so ``import fedqr``
calls it first. A program that imports torch before fedqr keeps its own policy.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, MutableMapping

__all__ = ["AUTO_MARK", "IDLE_SPIN_COUNT", "SPIN_COUNT", "others_runnable", "prefer_passive_wait",
           "spin_count"]

SPIN_COUNT = 1000  # libgomp's spins before a waiting thread sleeps: about 10 us
IDLE_SPIN_COUNT = 10_000  # about 100 us, where nothing else runs when fedqr starts
AUTO_MARK = "FEDQR_SPIN_AUTO"  # the spin fedqr chose: a child process makes its own
_SAMPLES = 7
_GAP_S = 0.0004


def _running_threads(path: str = "/proc/loadavg") -> int:
    """The kernel's count of runnable threads now: the fourth field's numerator of
    ``/proc/loadavg``, e.g. ``0.52 0.61 0.70 2/312 4242``."""
    with open(path, encoding="ascii") as fh:
        return int(fh.read().split()[3].split("/")[0])


def _own_running_threads(tasks: str = "/proc/self/task") -> int:
    """This process's runnable threads now (state ``R`` in ``/proc/self/task/*/stat``): the
    reader, and for example the BLAS threads numpy has just started, which spin a while."""
    running = 0
    for tid in os.listdir(tasks):
        try:
            with open(os.path.join(tasks, tid, "stat"), encoding="ascii") as fh:
                stat = fh.read()
        except OSError:  # the thread ended meanwhile
            continue
        running += stat[stat.rindex(")") + 2] == "R"  # the state follows "(comm) "
    return running


def _others_running() -> int:
    """Runnable threads of other processes now."""
    return _running_threads() - _own_running_threads()


def others_runnable(read: Callable[[], int] = _others_running, *, samples: int = _SAMPLES,
                    gap_s: float = _GAP_S) -> int | None:
    """Runnable threads of other processes: the median of ``samples`` reads ``gap_s`` apart
    (never below 0); ``None`` where they cannot be counted."""
    counts = []
    for i in range(samples):
        try:
            counts.append(read())
        except (OSError, ValueError, IndexError):
            return None
        if i + 1 < samples:
            time.sleep(gap_s)
    return max(int(statistics.median_low(counts)), 0)


def spin_count(others: int | None) -> int:
    """The spin for a process that starts beside ``others`` runnable threads: the long one
    only where that is known to be none."""
    return IDLE_SPIN_COUNT if others == 0 else SPIN_COUNT


def prefer_passive_wait(environ: MutableMapping[str, str] | None = None, *,
                        read: Callable[[], int] = _others_running) -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` with ``GOMP_SPINCOUNT`` from :func:`spin_count` unless a
    policy is set; ``environ`` defaults to ``os.environ``; ``read`` counts the runnable
    threads of other processes (tests pass their own).

    The processes fedqr starts inherit the policy with a mark (``FEDQR_SPIN_AUTO``, the
    count chosen), so each chooses its own spin when it imports fedqr: a Flower node started
    beside its siblings sees them, where its parent may have started on an idle machine. A
    spin count that differs from the mark was set since, by someone else, and is kept.
    """
    env = os.environ if environ is None else environ
    chosen = env.get(AUTO_MARK)
    if chosen is not None and env.get("GOMP_SPINCOUNT") == chosen:  # a fedqr parent's choice
        env["GOMP_SPINCOUNT"] = env[AUTO_MARK] = str(spin_count(others_runnable(read)))
        return
    if "OMP_WAIT_POLICY" in env:
        return
    env["OMP_WAIT_POLICY"] = "PASSIVE"  # libgomp: GOMP_SPINCOUNT, where set, overrides it
    if "GOMP_SPINCOUNT" not in env:
        env["GOMP_SPINCOUNT"] = env[AUTO_MARK] = str(spin_count(others_runnable(read)))
