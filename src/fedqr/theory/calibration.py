"""Fast RDP noise calibration for many reply counts, and round-robin reply counts.

The planner needs the noise multiplier ``z(R)`` of the Poisson-sampled Gaussian for every
reply count ``R`` that a grid of ``(T, b)`` produces (hundreds of values).
:func:`fedqr.privacy.calibrate_noise_multiplier` costs ~0.5 s per ``R``. Here the RDP of a
*single* step is computed once per noise multiplier on a geometric grid
``z_k = ratio^k`` (dp-accounting ``RdpAccountant`` composing one ``PoissonSampledDpEvent``;
that is 13 to 80 ms each over all its orders on the development machine, the most for q
between 0.1 and 0.9), at the orders that can give the target eps
(:func:`fedqr.privacy.useful_orders`: at eps 1, delta 1e-5, the slow small orders below 9.4
cannot) and, above order 64, only those the RDP at 64 leaves room for (the slowest integer
orders; :meth:`RdpNoiseTable._compute_rdp`): an epsilon at or below the target is the one
over every order, one above it stays above (``bench/noise_table.py``: 16.3 s to 7.1 s on
nine ``(q, eps)`` pairs, the same worst error),
RDP composes additively over the ``R`` replies (dp-accounting's own
rule: the accountant adds ``count * rdp``), and ``dp_accounting.rdp.compute_epsilon`` converts
``R * rdp(z_k)`` to epsilon (~0.1 ms). For each ``R`` the grid is searched (galloping from
the previous answer, since ``z(R)`` grows with ``R``) for ``z_{k-1} < z(R) <= z_k``; inside
the bracket each order's RDP is interpolated in ``(log z, log rdp)`` and eps is solved for,
the bracket halved where the curves bend (:meth:`RdpNoiseTable._refine`).

The interpolated value is an *estimate*, within 0.3 % of the calibrated one on 36
``(q, eps)`` pairs (``python bench/noise_table.py``; tests check 1 %), used to rank
``(T, b)``; the final plan recalibrates exactly with
``calibrate_noise_multiplier`` and checks the budget with a ``PrivacyLedger``.
:meth:`RdpNoiseTable.upper` returns the conservative grid point ``z_k`` instead.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedqr.privacy import (
    conversion_term,
    gaussian_event,
    rdp_by_order,
    rdp_to_epsilon,
    useful_orders,
)

__all__ = ["RdpNoiseTable", "round_robin_replies"]

_K_MIN, _K_MAX = -400, 400  # grid index range: z in [ratio^-400, ratio^400]
_CLIFF = 25.0  # log-log RDP slope (smooth curves: -2 to -5) above which a bracket is halved
_MAX_DEPTH = 4  # a grid bracket is halved at most this often (ratio 1.2: to ratio 1.0115)
_SMALL_Z = 1.0  # below it a bracket is always halved twice: there dp-accounting's RDP is not
# smooth in z (q = 0.3, eps 100: eps rises with z inside one ratio-1.2 bracket; 1.8% off)
_SPLIT_TOL = 3e-4  # a bracket whose two interpolations disagree by more (in log z) is halved
_STAGE = 64.0  # orders above it are computed only where the RDP below leaves them room
_ROOM = 4.0  # ... computed unless rdp(_STAGE) exceeds this multiple of what eps leaves them
_UNREACHABLE = 1e100  # RDP recorded for an order that cannot give the target eps at this z


def round_robin_replies(*, N: int, b: ArrayLike, T: ArrayLike) -> NDArray[np.int64]:
    """Exact replies of Algorithm 1's round robin, shape ``broadcast(b, T) + (N,)``.

    Round t selects slots ``t b, ..., t b + b - 1`` modulo N, so the ``b T`` slots are
    ``0 .. bT - 1`` and client i replies ``R_i = floor(bT / N) + [i < bT mod N]`` times
    (errata 3: ``bT / N`` need not be an integer). Matches
    ``fedqr.sim.schedule.reply_counts(make_schedule(...))``.
    """
    if not isinstance(N, int) or N < 1:
        raise ValueError(f"N must be an integer >= 1, got N={N!r}")
    slots = np.asarray(b, dtype=np.int64) * np.asarray(T, dtype=np.int64)
    if np.any(slots < 0):
        raise ValueError(f"b and T must be >= 0, got b={b!r}, T={T!r}")
    i = np.arange(N, dtype=np.int64)
    return np.asarray(slots[..., None] // N + (i < slots[..., None] % N), dtype=np.int64)


class RdpNoiseTable:
    """Noise multipliers ``z(R)`` for one ``(q, eps, delta)``, RDP-accounted, cached per ``R``.

    Parameters
    ----------
    sample_rate
        Poisson sampling rate ``q`` in ``(0, 1]``.
    eps, delta
        Target ``(eps, delta)`` with ``eps > 0`` and ``delta`` in ``(0, 1)``.
    ratio
        Grid ratio ``z_{k+1} / z_k`` (``> 1``) of the brackets, each halved up to four times
        where the curves bend; smaller is more accurate and slower.
    """

    def __init__(
        self, *, sample_rate: float, eps: float, delta: float, ratio: float = 1.2
    ) -> None:
        if not 0.0 < sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in (0, 1], got sample_rate={sample_rate!r}")
        if not (math.isfinite(eps) and eps > 0.0):
            raise ValueError(f"eps must be > 0 and finite, got eps={eps!r}")
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got delta={delta!r}")
        if not (math.isfinite(ratio) and 1.0 < ratio <= 2.0):
            raise ValueError(f"ratio must be in (1, 2], got ratio={ratio!r}")
        self.q, self.eps, self.delta, self.ratio = sample_rate, eps, delta, ratio
        # the orders that can give eps at most the target (the others cannot decide a z)
        self._order_list = useful_orders(eps=eps, delta=delta)
        self._orders: NDArray[np.float64] = np.asarray(self._order_list, dtype=np.float64)
        self._low = tuple(a for a in self._order_list if a <= _STAGE)
        self._high = tuple((a, conversion_term(a, delta=delta)) for a in self._order_list
                           if a > _STAGE) if self._low else ()
        self._rdp: dict[float, NDArray[np.float64]] = {}
        self._z: dict[int, tuple[float, float]] = {}  # R -> (estimate, upper grid point)
        self._hint = 0
        self._eps_memo: dict[tuple[int, int], tuple[float, float]] = {}

    @property
    def rdp_evaluations(self) -> int:
        """How many single-step RDP vectors were computed (the expensive part)."""
        return len(self._rdp)

    def _z_at(self, k: int) -> float:
        return float(self.ratio**k)

    def _rdp_at(self, k: int) -> NDArray[np.float64]:
        return self._rdp_z(self._z_at(k))

    def _rdp_z(self, z: float) -> NDArray[np.float64]:
        key = round(math.log(z), 12)
        rdp = self._rdp.get(key)
        if rdp is None:
            rdp = self._rdp[key] = self._compute_rdp(z)
        return rdp

    def _compute_rdp(self, z: float) -> NDArray[np.float64]:
        """The single-step RDP at the table's orders, in two stages: the orders up to
        ``_STAGE``, then only those above whose epsilon can still be at most the target. RDP
        grows with the order, so an order ``a`` above gives at least ``rdp(_STAGE) + c(a)``
        for any reply count; where that exceeds the target it is recorded as
        ``_UNREACHABLE`` (never the minimiser) instead of computed (1024, 512 and 256 are the
        slowest integer orders)."""
        event = gaussian_event(noise_multiplier=z, sample_rate=self.q)
        if not self._high:
            return rdp_by_order(event, orders=self._order_list)
        low = rdp_by_order(event, orders=self._low)
        high = tuple(a for a, c in self._high
                     if float(low[-1]) <= _ROOM * (self.eps - c))
        rest = rdp_by_order(event, orders=high) if high else np.empty(0)
        values = dict(zip(high, rest.tolist(), strict=True))
        rdp = np.concatenate([low, [values.get(a, _UNREACHABLE) for a, _ in self._high]])
        rdp.setflags(write=False)
        return rdp

    def _eps_order(self, replies: int, rdp: NDArray[np.float64]) -> tuple[float, float]:
        key = (replies, id(rdp))  # rdp vectors live in self._rdp for the table's lifetime
        hit = self._eps_memo.get(key)
        if hit is None:
            hit = self._eps_memo[key] = rdp_to_epsilon(replies * rdp, delta=self.delta,
                                                       orders=self._order_list)
        return hit

    def _eps_at(self, replies: int, k: int) -> float:
        return self._eps_order(replies, self._rdp_at(k))[0]

    def _search(self, replies: int) -> tuple[float, float]:
        memo: dict[int, float] = {}

        def eps_at(k: int) -> float:
            if k not in memo:
                memo[k] = self._eps_at(replies, k)
            return memo[k]

        def ok(k: int) -> bool:
            return eps_at(k) <= self.eps

        k = self._hint
        step = 1
        if ok(k):  # gallop down to a failing lo
            hi = k
            lo = max(hi - step, _K_MIN)
            while lo > _K_MIN and ok(lo):
                hi, step = lo, 2 * step
                lo = max(hi - step, _K_MIN)
            if lo == _K_MIN and ok(lo):
                return self._z_at(lo), self._z_at(lo)
        else:  # gallop up to a passing hi
            lo = k
            hi = min(lo + step, _K_MAX)
            while not ok(hi):
                if hi == _K_MAX:
                    raise RuntimeError(f"no noise multiplier <= {self._z_at(hi):g} meets eps")
                lo, step = hi, 2 * step
                hi = min(lo + step, _K_MAX)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        self._hint = hi
        z_hi = self._z_at(hi)
        z = self._refine(replies, self._z_at(lo), z_hi, eps_at(lo), eps_at(hi), depth=0)
        return min(z, z_hi), z_hi

    def _optimal(self, replies: int, rdp: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Mask of the order ``compute_epsilon`` finds optimal for ``replies * rdp``."""
        order = self._eps_order(replies, rdp)[1]
        return np.asarray(self._orders == order, dtype=np.bool_)

    def _refine(
        self, replies: int, z_lo: float, z_hi: float, e_lo: float, e_hi: float, *, depth: int
    ) -> float:
        """``z`` in ``[z_lo, z_hi]`` (``e_lo > eps >= e_hi``) where eps meets the target.

        Each order's RDP is interpolated linearly in ``(log z, log rdp)`` (RDP curves are
        smooth in ``z``; eps is not, it is a minimum over orders) and converted with
        ``compute_epsilon``; regula falsi (Illinois) on ``log eps``. The bracket is halved
        with an exact RDP evaluation at its geometric midpoint (at most ``_MAX_DEPTH`` times)
        where some order's RDP that is optimal at either end falls off a cliff inside it
        (log-log slope steeper than ``_CLIFF``), where interpolating ``rdp`` itself
        instead of ``log rdp`` moves the answer by more than ``_SPLIT_TOL`` in ``log z``,
        and twice in any case below ``z = _SMALL_Z``:
        the grid is coarse where the curves are straight in log-log and fine where not (the
        midpoints are shared by every ``R`` whose bracket they halve).
        """
        if not (math.isfinite(e_lo) and e_hi > 0.0 and e_lo > e_hi):
            return z_hi
        r_lo, r_hi = self._rdp_z(z_lo), self._rdp_z(z_hi)
        good = (r_lo > 0) & (r_hi > 0) & np.isfinite(r_lo) & np.isfinite(r_hi)
        log_lo = np.log(np.where(good, r_lo, 1.0))
        log_hi = np.log(np.where(good, r_hi, 1.0))
        width = math.log(z_hi / z_lo)
        slope = np.abs(log_hi - log_lo)[self._optimal(replies, r_lo) | self._optimal(replies, r_hi)]
        cliff = float(np.max(slope, initial=0.0)) > _CLIFF * width
        forced = cliff or (z_lo < _SMALL_Z and depth < 2)
        solve = functools.partial(self._solve, replies, (r_lo, r_hi), (log_lo, log_hi), good,
                                  e_lo, e_hi)
        f = math.nan if forced else solve(log=True)
        if depth < _MAX_DEPTH and (forced or abs(f - solve(log=False)) * width > _SPLIT_TOL):
            z_mid = math.sqrt(z_lo * z_hi)
            e_mid = self._eps_order(replies, self._rdp_z(z_mid))[0]
            if e_mid <= self.eps:
                return self._refine(replies, z_lo, z_mid, e_lo, e_mid, depth=depth + 1)
            return self._refine(replies, z_mid, z_hi, e_mid, e_hi, depth=depth + 1)
        if math.isnan(f):  # a cliff at the deepest level: the log-log interpolation all the same
            f = solve(log=True)
        return math.exp(math.log(z_lo) + f * width)

    def _solve(self, replies: int, rdp_ends: tuple[NDArray[np.float64], NDArray[np.float64]],
               log_ends: tuple[NDArray[np.float64], NDArray[np.float64]],
               good: NDArray[np.bool_], e_lo: float, e_hi: float, *, log: bool) -> float:
        """Where in ``[0, 1]`` (the bracket's share in ``log z``) the interpolated RDP meets
        the target: each order's RDP (``rdp_ends``, their logs ``log_ends`` where ``good``)
        interpolated linearly in ``(log z, log rdp)`` (``log``) or in ``(log z, rdp)``;
        regula falsi (Illinois) on ``log eps``."""
        (r_lo, r_hi), (log_lo, log_hi) = rdp_ends, log_ends

        def g(f: float) -> float:
            with np.errstate(invalid="ignore"):  # inf - inf in the branch `good` discards
                lin = r_lo + f * (r_hi - r_lo)
                rdp = np.where(good, np.exp(log_lo + f * (log_hi - log_lo)), lin) if log \
                    else lin
            e = rdp_to_epsilon(replies * rdp, delta=self.delta, orders=self._order_list)[0]
            return math.log(e) - math.log(self.eps) if e > 0 else -math.inf

        a, ga, c, gc = 0.0, math.log(e_lo / self.eps), 1.0, math.log(e_hi / self.eps)
        side = 0
        for _ in range(6):
            f = (a * gc - c * ga) / (gc - ga)
            gf = g(f)
            if abs(gf) < 2e-4 or not math.isfinite(gf):
                break
            if gf > 0:
                a, ga = f, gf
                if side == 1:
                    gc *= 0.5
                side = 1
            else:
                c, gc = f, gf
                if side == -1:
                    ga *= 0.5
                side = -1
        else:
            f = c  # the passing side
        return min(max(f, 0.0), 1.0)

    def _lookup(self, replies: int) -> tuple[float, float]:
        if isinstance(replies, bool) or not isinstance(replies, int | np.integer) or replies < 0:
            raise ValueError(f"replies must be an integer >= 0, got replies={replies!r}")
        r = int(replies)
        if r == 0:
            return 0.0, 0.0
        hit = self._z.get(r)
        if hit is None:
            hit = self._search(r)
            self._z[r] = hit
        return hit

    def noise_multiplier(self, replies: int) -> float:
        """Estimated calibrated ``z`` for ``replies`` releases (0 for ``replies == 0``)."""
        return self._lookup(replies)[0]

    def upper(self, replies: int) -> float:
        """Conservative ``z``: the grid point ``z_k >= z(R)``, whose RDP eps meets the target."""
        return self._lookup(replies)[1]

    def noise_multipliers(self, replies: ArrayLike) -> NDArray[np.float64]:
        """Vectorised :meth:`noise_multiplier`: distinct values calibrated in increasing order."""
        r = np.asarray(replies, dtype=np.int64)
        uniq, inv = np.unique(r, return_inverse=True)
        z = np.array([self.noise_multiplier(int(v)) for v in uniq], dtype=np.float64)
        return np.asarray(z[inv].reshape(r.shape), dtype=np.float64)
