"""Calibration of the Gaussian mechanism's noise multiplier with dp-accounting.

:func:`calibrate_noise_multiplier` finds the smallest noise multiplier ``z`` for which a
client's replies meet its ``(eps, delta)`` budget under the accountants of
:mod:`fedqr.privacy.accounting` (``dp_accounting.calibrate_dp_mechanism`` on a bracket found
here); :func:`paper_gaussian_sigma` is the paper's closed form, for comparison only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import dp_accounting

from fedqr._enums import Accountant
from fedqr.privacy._checks import check_int, check_positive, check_probability, check_unit_open
from fedqr.privacy.accounting import _as_accountant, composed_event, make_accountant
from fedqr.privacy.mechanisms import gaussian_event

__all__ = ["calibrate_noise_multiplier", "paper_gaussian_sigma"]

_Z_MIN = 1e-6  # calibration never goes below this noise multiplier
_MAX_STEPS = 64  # doublings/halvings allowed while bracketing
_NEAR_SHARE = 0.8  # the bracket's search starts at this share of the RDP answer


def _bracket(eps_at: Callable[[float], float], target: float, guess: float) -> tuple[float, float]:
    """``(lo, hi)`` with ``eps_at(lo) > target`` (finite) and ``eps_at(hi) <= target``.

    Returns ``(hi, hi)`` when even ``hi < 2 * _Z_MIN`` meets the target.
    """
    hi, e_hi = guess, eps_at(guess)
    lo, e_lo = -1.0, math.inf
    for _ in range(_MAX_STEPS):
        if e_hi <= target:
            break
        lo, e_lo, hi = hi, e_hi, 2.0 * hi
        e_hi = eps_at(hi)
    else:
        raise RuntimeError(f"no noise multiplier <= {hi:g} meets eps={target:g}")
    if lo < 0.0:
        lo = 0.5 * hi
        e_lo = eps_at(lo)
        while e_lo <= target:
            if lo < _Z_MIN:
                return hi, hi
            hi, lo = lo, 0.5 * lo
            e_lo = eps_at(lo)
    for _ in range(_MAX_STEPS):  # brentq needs a finite value at the lower endpoint
        if math.isfinite(e_lo):
            break
        mid = 0.5 * (lo + hi)
        e_mid = eps_at(mid)
        if e_mid <= target:
            hi = mid
        else:
            lo, e_lo = mid, e_mid
    return lo, hi


@functools.lru_cache(maxsize=4096)
def _calibrate(replies: int, q: float, eps: float, delta: float, kind: Accountant,
               near: float | None = None) -> float:
    def make_event(z: float) -> dp_accounting.DpEvent:
        return composed_event({gaussian_event(noise_multiplier=z, sample_rate=q): replies})

    def eps_at(z: float) -> float:
        return float(make_accountant(kind).compose(make_event(z)).get_epsilon(delta))

    guess = max(0.5, q * math.sqrt(2.0 * replies * math.log(1.0 / delta)) / eps)
    if near is not None:  # the caller's estimate of the RDP answer: start just below it
        guess = _NEAR_SHARE * near
    elif kind is not Accountant.RDP:  # PLD is mostly tighter: start just below the RDP answer
        try:
            guess = _NEAR_SHARE * _calibrate(replies, q, eps, delta, Accountant.RDP)
        except ValueError:  # an eps RDP cannot resolve, PLD may: the plain guess
            pass

    def unresolved(why: str) -> ValueError:
        return ValueError(
            f"eps must be large enough for the {kind.value} accountant to resolve "
            f"({replies} replies, sample_rate={q:g}, delta={delta:g}): {why}, got eps={eps:g}; "
            "use a larger eps" + (" (or accountant pld, which resolves smaller ones)"
                                  if kind is Accountant.RDP else ""))

    try:
        lo, hi = _bracket(eps_at, eps, guess)
        z = hi if lo == hi else float(dp_accounting.calibrate_dp_mechanism(
            lambda: make_accountant(kind),
            make_event,
            eps,
            delta,
            dp_accounting.ExplicitBracketInterval(lo, hi),
        ))
    except OverflowError:  # the noise it would take leaves the floats (eps ~ 1e-200)
        raise unresolved("the noise level that would meet it overflows the accountant's "
                         "floating-point arithmetic") from None
    if not eps_at(z) > 0.0:  # met only through underflow: the accountant cannot resolve eps
        raise unresolved(f"it reports epsilon 0 at every noise level that meets eps={eps:g}, "
                         "through numerical underflow")
    return z


def calibrate_noise_multiplier(
    *,
    replies: int,
    sample_rate: float,
    eps: float,
    delta: float,
    accountant: Accountant = Accountant.RDP,
    near: float | None = None,
) -> float:
    """Smallest noise multiplier ``z`` for which ``replies`` Poisson-sampled Gaussian
    releases are ``(eps, delta)``-DP (add/remove-one neighbours).

    Uses ``dp_accounting.calibrate_dp_mechanism`` on an explicit bracket (found by
    doubling/halving a heuristic guess; for PLD, just below the RDP answer), tolerance
    ``1e-6`` in ``z``. The composed event is :func:`composed_event` of
    ``{gaussian_event(z, sample_rate): replies}``, exactly what a
    :class:`~fedqr.privacy.ledger.PrivacyLedger` charged ``replies`` times evaluates, so the
    ledger admits exactly ``replies`` replies. Results are memoised on the arguments.

    Parameters
    ----------
    replies
        Exact number of replies of the client (``>= 0``).
    sample_rate
        Poisson sampling rate ``q`` in ``(0, 1]``.
    eps
        Target epsilon (``> 0``).
    delta
        Target delta in ``(0, 1)``.
    accountant
        ``Accountant.RDP`` (default) or ``Accountant.PLD``.
    near
        An estimate of the RDP answer (``> 0``; the planner's
        :class:`~fedqr.theory.calibration.RdpNoiseTable`): the bracket's search starts just
        below it. Without it, PLD first calibrates RDP exactly for that start, which is most
        of a PLD calibration's time at large sampling rates (heart disease at q = 0.5: 1.5 s
        of RDP for 0.3 s of PLD). The answer meets the budget either way; the two starts
        give brackets whose answers agree to dp-accounting's tolerance, not bit for bit.

    Returns
    -------
    float
        ``z`` with spent eps ``<=`` target (dp-accounting guarantees a non-positive gap);
        ``0.0`` when ``replies == 0`` (nothing released, no noise needed).
    """
    replies = check_int("replies", replies, minimum=0)
    q = check_probability("sample_rate", sample_rate)
    eps = check_positive("eps", eps)
    delta = check_unit_open("delta", delta)
    kind = _as_accountant(accountant)
    if kind is Accountant.PURE:
        raise ValueError(
            "accountant must be 'rdp' or 'pld' for the Gaussian mechanism, got accountant='pure'"
        )
    if near is not None and not (math.isfinite(near) and near > 0.0):
        raise ValueError(f"near must be > 0 and finite, got near={near!r}")
    if replies == 0:
        return 0.0
    return _calibrate(replies, q, eps, delta, kind, near)


def paper_gaussian_sigma(
    *, replies: int, clip: float, num_samples: int, eps: float, delta: float, c2: float
) -> float:
    """Paper Theorem 2's closed form ``c2 * clip * sqrt(replies * log(1/delta)) /
    (num_samples * eps)``, **for comparison only**.

    ``c2`` is an unspecified constant of the moments accountant and the theorem's condition
    ``eps < c1 q^2 T`` fails at the paper's settings, so this is **not** a privacy
    guarantee. Use :func:`calibrate_noise_multiplier` with :func:`gaussian_std` instead.
    """
    replies = check_int("replies", replies, minimum=0)
    clip = check_positive("clip", clip)
    d = check_int("num_samples", num_samples, minimum=1)
    eps = check_positive("eps", eps)
    delta = check_unit_open("delta", delta)
    c2 = check_positive("c2", c2)
    return c2 * clip * math.sqrt(replies * math.log(1.0 / delta)) / (d * eps)
