"""Pure-DP accountant: basic (sequential) composition of Laplace releases.

dp-accounting 0.6 has no pure-DP accountant: its RDP and PLD accountants return an infinite
epsilon at ``delta = 0`` for ``LaplaceDpEvent``, and the PLD accountant refuses Laplace under
replace-one neighbours. Paper Theorem 1 needs exactly basic composition, which is plain
arithmetic: a Laplace release with noise multiplier ``m`` (scale over l1 sensitivity) is
pure ``1/m``-DP, and pure-DP epsilons add up under (adaptive) composition.
"""

from __future__ import annotations

import math
import sys
from numbers import Real

import dp_accounting
from dp_accounting import NeighboringRelation, dp_event

__all__ = ["PureDpAccountant", "laplace_scale_within"]

_Details = dp_accounting.PrivacyAccountant.CompositionErrorDetails


class PureDpAccountant(dp_accounting.PrivacyAccountant):  # type: ignore[misc]
    """Basic composition of pure-DP (Laplace) events, as a dp-accounting accountant.

    Supports ``LaplaceDpEvent`` (each adds ``count / noise_multiplier`` to epsilon),
    ``SelfComposedDpEvent``, ``ComposedDpEvent``, ``NoOpDpEvent`` and ``NonPrivateDpEvent``
    (infinite epsilon). Every other event is unsupported.

    The neighbouring relation is a label only: the guarantee holds for whichever relation
    the sensitivity inside each event's noise multiplier was computed for. fedqr's
    :func:`fedqr.privacy.mechanisms.laplace_event` uses the replace-one sensitivity
    ``2 * clip / d_i``, hence the default ``REPLACE_ONE``.

    Parameters
    ----------
    neighboring_relation
        Recorded as :attr:`neighboring_relation`; it does not change the arithmetic.
    """

    def __init__(
        self, neighboring_relation: NeighboringRelation = NeighboringRelation.REPLACE_ONE
    ) -> None:
        super().__init__(neighboring_relation)
        self._eps = 0.0

    def _maybe_compose(
        self, event: dp_event.DpEvent, count: int, do_compose: bool
    ) -> dp_accounting.PrivacyAccountant.CompositionErrorDetails | None:
        if isinstance(event, dp_event.NoOpDpEvent):
            return None
        if isinstance(event, dp_event.NonPrivateDpEvent):
            if do_compose:
                self._eps = math.inf
            return None
        if isinstance(event, dp_event.SelfComposedDpEvent):
            return self._maybe_compose(event.event, event.count * count, do_compose)
        if isinstance(event, dp_event.ComposedDpEvent):
            for sub in event.events:
                err = self._maybe_compose(sub, count, do_compose)
                if err is not None:
                    return err
            return None
        if isinstance(event, dp_event.LaplaceDpEvent):
            m = event.noise_multiplier
            if not (isinstance(m, Real) and float(m) > 0.0):
                return _Details(
                    invalid_event=event,
                    error_message=f"noise_multiplier must be > 0, got {m!r}",
                )
            if do_compose:
                self._eps += count / float(m)
            return None
        return _Details(
            invalid_event=event,
            error_message="PureDpAccountant supports only Laplace, composed and no-op events",
        )

    def get_epsilon(self, target_delta: float) -> float:
        """Summed epsilon; pure DP holds with ``delta = 0``, so any ``target_delta`` works.

        Parameters
        ----------
        target_delta
            Must be in ``[0, 1]``; it does not change the result.
        """
        if not 0.0 <= target_delta <= 1.0:
            raise ValueError(f"target_delta must be in [0, 1], got target_delta={target_delta!r}")
        return self._eps

    def get_delta(self, target_epsilon: float) -> float:
        """``0.0`` if the summed epsilon is ``<= target_epsilon``, otherwise ``1.0``;
        always ``1.0`` after a non-private event (dp-accounting's accountant contract).

        Pure DP gives no smaller delta at a smaller epsilon without further analysis, so
        ``1.0`` (no guarantee) is the honest answer below the summed epsilon.
        """
        if not (isinstance(target_epsilon, Real) and float(target_epsilon) >= 0.0):
            raise ValueError(f"target_epsilon must be >= 0, got target_epsilon={target_epsilon!r}")
        if math.isinf(self._eps):  # a non-private release: no guarantee at any epsilon
            return 1.0
        return 0.0 if self._eps <= target_epsilon else 1.0


def laplace_scale_within(*, replies: int, clip: float, num_samples: int, eps: float) -> float:
    """The Laplace scale of paper Theorem 1, ``2 * replies * clip / (num_samples * eps)``,
    rounded up to the first float whose ``replies`` charges spend at most ``eps``, exactly.

    A reply of scale ``b`` is charged as ``LaplaceDpEvent(b / (2 * clip / num_samples))`` and
    :class:`PureDpAccountant` spends ``replies / noise_multiplier``; in floating point that
    can exceed ``eps`` by an ulp. Each step up adds one ulp of noise.
    """
    sensitivity = 2.0 * clip / num_samples
    scale = 2.0 * replies * clip / (num_samples * eps)
    if not sys.float_info.min <= scale < math.inf or not sensitivity >= sys.float_info.min:
        raise ValueError(f"eps and clip give Laplace noise of scale 2 R clip / (d eps) = "
                         f"{scale:.3g} (R = {replies} replies, d = {num_samples} rows), outside "
                         f"the floats a scale can be: give a smaller eps or a larger clip, "
                         f"got eps={eps!r} and clip={clip!r} (to run without noise, "
                         f"mechanism='none')")
    while replies / (scale / sensitivity) > eps:
        scale = math.nextafter(scale, math.inf)
    return scale
