"""Client-side differential privacy for FedSGD-DPC: noise, accounting and budgets.

- :mod:`fedqr.privacy.mechanisms`: Laplace (paper Theorem 1, replace-one, pure eps-DP) and
  Poisson-sampled Gaussian (add/remove-one, (eps, delta)-DP) noise scales, samplers and
  dp-accounting events.
- :mod:`fedqr.privacy.accounting`: accountants (RDP default, PLD, pure-DP basic
  composition), spent epsilon; :mod:`fedqr.privacy.calibrate`: noise-multiplier calibration.
- :mod:`fedqr.privacy.spec`: one object per mechanism (:func:`mechanism_for`): clip norm,
  sampling, denominator, calibration, noise draw, DP event and accountant.
- :mod:`fedqr.privacy.ledger`: per-client ledger that refuses replies over budget.
"""

from fedqr.privacy.accounting import (
    PLD_VALUE_DISCRETIZATION_INTERVAL,
    RDP_ORDERS,
    Accountant,
    composed_event,
    conversion_term,
    epsilon_spent,
    make_accountant,
    rdp_by_order,
    rdp_to_epsilon,
    single_step_rdp,
    useful_orders,
)
from fedqr.privacy.calibrate import calibrate_noise_multiplier, paper_gaussian_sigma
from fedqr.privacy.ledger import BUDGET_RTOL, PrivacyBudgetExceeded, PrivacyLedger
from fedqr.privacy.mechanisms import (
    Mechanism,
    Norm,
    ReplyStats,
    gaussian_event,
    gaussian_std,
    laplace_event,
    laplace_scale,
    noise_tensor,
    sample_gaussian,
    sample_laplace,
)
from fedqr.privacy.pure import PureDpAccountant
from fedqr.privacy.spec import (
    Calibration,
    Neighbours,
    NoiseMechanism,
    PaperBound,
    as_mechanism,
    mechanism_for,
)

__all__ = [
    "BUDGET_RTOL",
    "PLD_VALUE_DISCRETIZATION_INTERVAL",
    "RDP_ORDERS",
    "Accountant",
    "Calibration",
    "Mechanism",
    "Neighbours",
    "NoiseMechanism",
    "Norm",
    "PaperBound",
    "PrivacyBudgetExceeded",
    "PrivacyLedger",
    "PureDpAccountant",
    "ReplyStats",
    "as_mechanism",
    "calibrate_noise_multiplier",
    "composed_event",
    "conversion_term",
    "epsilon_spent",
    "gaussian_event",
    "gaussian_std",
    "laplace_event",
    "laplace_scale",
    "make_accountant",
    "mechanism_for",
    "noise_tensor",
    "paper_gaussian_sigma",
    "rdp_by_order",
    "rdp_to_epsilon",
    "sample_gaussian",
    "sample_laplace",
    "single_step_rdp",
    "useful_orders",
]
