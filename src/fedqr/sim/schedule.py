"""Which clients reply in which round: Algorithm 1's round robin, or uniform random choice."""

from __future__ import annotations

import numpy as np

from fedqr.sim.config import Selection


def make_schedule(
    *,
    num_clients: int,
    clients_per_round: int,
    rounds: int,
    selection: Selection,
    repeats: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Selected clients of every round, shape ``(S, T, b)`` (sorted client ids per round).

    Round robin (Algorithm 1) picks clients ``t b, ..., t b + b - 1`` modulo N in round t: the
    schedule is the same for every repeat (S = 1) and client i replies exactly
    ``R_i = #{(t, j): (t b + j) mod N = i}`` times, which is ``bT/N`` only when N divides bT.
    Random selection draws b of N without replacement each round, independently per repeat
    (S = repeats).
    """
    n, b = num_clients, clients_per_round
    if selection is Selection.ROUND_ROBIN:
        slots = np.arange(rounds)[:, None] * b + np.arange(b)[None, :]
        return np.sort(slots % n, axis=1)[None]
    keys = rng.random((repeats, rounds, n))
    return np.sort(np.argsort(keys, axis=2)[:, :, :b], axis=2)


def reply_counts(schedule: np.ndarray, num_clients: int) -> np.ndarray:
    """R_i per schedule group, shape ``(S, N)``: each client's exact number of replies."""
    s = schedule.shape[0]
    counts = np.zeros((s, num_clients), dtype=np.int64)
    for g in range(s):
        counts[g] = np.bincount(schedule[g].ravel(), minlength=num_clients)
    return counts
