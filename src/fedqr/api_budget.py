"""The budgets ``fedqr.simulate`` and ``fedqr.plan`` take, checked against the mechanism.

A budget the mechanism does not spend is refused rather than recorded as one nothing holds
(the command line refuses ``--eps`` or ``--delta`` typed for such a mechanism, with the same
reason, :func:`fedqr.privacy.spec.unspent_budget`;
:func:`fedqr._cli_checks.check_budget_applies`): ``eps`` and ``delta`` for
``mechanism='none'``, ``delta`` for a pure eps-DP mechanism (Laplace). A parameter's default
cannot be told from the same value passed on purpose, so only other values are refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedqr._enums import Mechanism
from fedqr._validate import float_tuple
from fedqr.privacy.spec import unspent_budget

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
    for name, values, default, given in (("eps", e, DEFAULT_EPS, eps),
                                         ("delta", d, DEFAULT_DELTA, delta)):
        why = unspent_budget(mechanism, name) if values != (default,) else None
        if why is not None:
            raise ValueError(f"{name} must be left out for mechanism={mechanism.value!r} "
                             f"({why}), got {name}={given!r}")
    return e, d
