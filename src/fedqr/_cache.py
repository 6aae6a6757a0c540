"""Where fedqr's caches live, and the planner's version: light, for the CLI's fast re-plan.

:mod:`fedqr.planner.cache` keys the twin's simulations by :data:`PLANNER_VERSION`, and
``fedqr plan`` keys its stored answers by it too (:mod:`fedqr.cli.plan_cache`), before it
imports the planner: importing any module of :mod:`fedqr.planner` imports torch. Like
:mod:`fedqr._atomic`, this module imports only the standard library.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PLANNER_VERSION", "cache_home"]

PLANNER_VERSION = 20  # 2: automatic twin repeats; 3: extend T only for a 1% gain; 4: race, fit;
# 5: a second look at plateaus (models other than logreg); 6: a default budget follows the leader;
# 7: the logistic twin's products in bfloat16 where the CPU has it (fedqr._precision);
# 8: the twins draw their Poisson batches a block of rounds at once (planner.gradients);
# 9: a plan reports the loss of predicting the label frequencies (planner.prior);
# 10: the shift draws from a seed of its own and its re-simulation is the headline prediction;
# 11: a logreg plan on imbalanced labels names linear (the twin and the search unchanged);
# 12: the noise table's coarser grid, halved where the RDP curves bend (theory.calibration);
# 13: the shift leaves out candidates far behind the first choice (planner.shift.far_behind);
# 14: a clear proxy's share is the share of rows it read (all rows: no other draw to shift to)
# 15: the engine draws Gaussian noise once for a round's aggregate (a private pilot's draws)
# 16: the noise table's curves only at the orders that can give the target eps (estimates move)
# 17: CSR products of fewer than 16 columns run zero-padded to a multiple of 4 (float32 rounding)
# 18: the test metrics' sums in a class-major layout (the twin's losses: float32 rounding)
# 19: the Laplace groups' gamma draws by a vectorised Marsaglia-Tsang (planner.noise_sums)
# 20: norm layers (GroupNorm, LayerNorm, RMSNorm) by the ghost method and the stacked twin
"""Bumped when the twin, the search or a plan's answer change: cached simulations and answers
are then not reused."""


def cache_home() -> Path:
    """``$FEDQR_CACHE``, else ``~/.cache/fedqr``: the root of the plans' and estimates'
    caches."""
    root = os.environ.get("FEDQR_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "fedqr"
