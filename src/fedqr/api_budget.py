"""The budgets ``fedqr.simulate`` and ``fedqr.plan`` take, checked against the mechanism.

A budget the mechanism does not spend is refused rather than recorded as one nothing holds
(the command line refuses ``--eps`` or ``--delta`` typed for such a mechanism,
:func:`fedqr._cli_checks.check_budget_applies`): ``eps`` and ``delta`` for
``mechanism='none'``, ``delta`` for a pure eps-DP mechanism (Laplace). A parameter's default
cannot be told from the same value passed on purpose, so only other values are refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedqr._enums import Mechanism
from fedqr._validate import float_tuple
from fedqr.privacy import mechanism_for

__all__ = ["DEFAULT_DELTA", "DEFAULT_EPS", "budget_values"]

DEFAULT_EPS = 1.0
DEFAULT_DELTA = 1e-5


def budget_values(mechanism: Mechanism, eps: float | Sequence[float],
                  delta: float | Sequence[float]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``eps`` and ``delta`` as tuples of floats (one, or one per client).

    Raises
    ------
    ValueError
        Naming ``eps`` or ``delta`` where ``mechanism`` does not spend it and it is not the
        default.
    """
    e, d = float_tuple("eps", eps), float_tuple("delta", delta)
    spec = mechanism_for(mechanism)
    name = spec.kind.value
    if not spec.private:
        for key, values, default, given in (("eps", e, DEFAULT_EPS, eps),
                                            ("delta", d, DEFAULT_DELTA, delta)):
            if values != (default,):
                raise ValueError(f"{key} must be left out for mechanism={name!r} (no noise, no "
                                 f"privacy budget), got {key}={given!r}")
    elif not spec.needs_delta and d != (DEFAULT_DELTA,):
        raise ValueError(f"delta must be left out for mechanism={name!r} (pure eps-DP: delta "
                         f"is 0), got delta={delta!r}")
    return e, d
