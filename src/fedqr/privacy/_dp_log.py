"""dp-accounting's log records (absl logging) as DEBUG records, not console warnings.

dp-accounting reports numerical events through absl's logger ``"absl"``, at level WARNING:

- ``_compute_log_a_frac failed to converge ... Excluding this order from the epsilon
  computation``: the RDP of a Poisson-sampled Gaussian at a fractional order did not
  converge (e.g. ``q = 0.1, z <= 1.2``); that order is left out of the minimum over orders,
  so the epsilon stays a valid, at most slightly looser, bound;
- ``Negative Renyi divergence ... Returning an epsilon of zero``: hundreds per calibration at
  budgets below what the accountant resolves, which fedqr refuses instead (see
  :func:`fedqr.privacy.calibrate.calibrate_noise_multiplier`).

Neither is something a user of ``fedqr run`` or ``fedqr plan`` can act on, and absl prints
them on stderr (its first message even installs a root handler with
``logging.basicConfig()``). :func:`route_to_debug` turns every record that dp-accounting's
own code logs below ERROR into a DEBUG record of the ``"absl"`` logger: it reaches the
handlers only when that logger is enabled for DEBUG, e.g. after
``logging.getLogger("absl").setLevel(logging.DEBUG)`` or ``logging.basicConfig(
level=logging.DEBUG)``. The computation is untouched: only the records change level.
Records of other absl users, and dp-accounting's errors, pass unchanged.
"""

from __future__ import annotations

import logging
import os

import absl.logging  # first: absl makes "absl" an ABSLLogger, which names the real caller
import dp_accounting

__all__ = ["DpAccountingToDebug", "route_to_debug"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(dp_accounting.__file__)) + os.sep


class DpAccountingToDebug(logging.Filter):
    """Demote dp-accounting's records below ERROR to DEBUG (a filter of the ``"absl"``
    logger); a demoted record goes on only if ``logger`` is enabled for DEBUG."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self._logger = logger

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR or not os.path.abspath(
                record.pathname).startswith(_PACKAGE_DIR):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return self._logger.isEnabledFor(logging.DEBUG)


def route_to_debug() -> None:
    """Install :class:`DpAccountingToDebug` on the ``"absl"`` logger (once per process)."""
    logger: logging.Logger = absl.logging.get_absl_logger()  # logging.getLogger("absl")
    if not any(isinstance(f, DpAccountingToDebug) for f in logger.filters):
        logger.addFilter(DpAccountingToDebug(logger))
