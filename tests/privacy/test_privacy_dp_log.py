"""dp-accounting's absl warnings are DEBUG records: off the console, the epsilon unchanged.

The accountant runs in fresh interpreters: there absl's first message installs a root
handler on stderr (``logging.basicConfig()``), as it does for a user of ``fedqr plan``.
(Inside pytest the root logger has pytest's handlers instead, so stderr would prove nothing.)
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import dp_accounting
import pytest

from fedqr.privacy._dp_log import DpAccountingToDebug

Q, Z, COUNT, DELTA = 0.5, 0.8, 10, 1e-5
"""A Poisson-sampled Gaussian whose RDP does not converge at orders 1.1 to 1.7."""

_EVENT = (f"dp_accounting.PoissonSampledDpEvent({Q}, dp_accounting.GaussianDpEvent({Z}))")

# dp-accounting alone: the warnings on stderr, the epsilon and the excluded orders
_PLAIN = textwrap.dedent(f"""
    import json, math
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant
    acct = RdpAccountant()
    acct.compose({_EVENT}, {COUNT})
    print(json.dumps({{"eps": acct.get_epsilon({DELTA}),
                      "excluded": [float(a) for a, r in zip(acct._orders, acct._rdp)
                                   if math.isinf(r)]}}))
""")

# the same through fedqr, a filter before fedqr's recording what absl logs (filters after a
# dropping one see nothing)
_FEDQR = textwrap.dedent(f"""
    import json, logging, math, sys
    import dp_accounting
    from fedqr.privacy import RDP_ORDERS, Accountant, epsilon_spent, single_step_rdp
    {{setup}}
    seen = []
    class Spy(logging.Filter):
        def filter(self, record):
            seen.append([record.levelname, record.getMessage()])
            return True
    logging.getLogger("absl").filters.insert(0, Spy())
    event = {_EVENT}
    eps = epsilon_spent({{event: {COUNT}}}, delta={DELTA}, accountant=Accountant.RDP)
    curve = single_step_rdp(event)
    print(json.dumps({{"eps": eps, "seen": seen,
                      "excluded": [float(a) for a, r in zip(RDP_ORDERS, curve)
                                   if math.isinf(r)]}}))
""")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def plain() -> subprocess.CompletedProcess[str]:
    return _python(_PLAIN)


def test_the_event_makes_dp_accounting_warn_on_stderr(
        plain: subprocess.CompletedProcess[str]) -> None:
    """The control: without fedqr, absl prints the warnings (so the next test can fail)."""
    assert "WARNING:absl:_compute_log_a_frac failed to converge" in plain.stderr
    assert "Excluding this order" in plain.stderr
    assert json.loads(plain.stdout)["excluded"] == pytest.approx([1.1, 1.2, 1.3, 1.4, 1.5,
                                                                  1.6, 1.7])


def test_fedqr_keeps_them_off_stderr_and_the_epsilon_unchanged(
        plain: subprocess.CompletedProcess[str]) -> None:
    done = _python(_FEDQR.replace("{setup}", ""))
    assert done.stderr == ""
    got, ref = json.loads(done.stdout), json.loads(plain.stdout)
    notes = [m for _, m in got["seen"] if "failed to converge" in m]
    assert len(notes) == len(ref["excluded"])  # absl was asked to warn once per order ...
    assert got["excluded"] == ref["excluded"]  # ... the same orders left out
    assert got["eps"] == ref["eps"]  # bit for bit


def test_debug_logging_shows_them(plain: subprocess.CompletedProcess[str]) -> None:
    """The notes are DEBUG records of the "absl" logger, there for whoever asks."""
    done = _python(_FEDQR.replace("{setup}", "logging.basicConfig(level=logging.DEBUG)"))
    lines = [ln for ln in done.stderr.splitlines() if "failed to converge" in ln]
    assert len(lines) == len(json.loads(plain.stdout)["excluded"])
    assert all(ln.startswith("DEBUG:absl:_compute_log_a_frac") for ln in lines)
    assert json.loads(done.stdout)["eps"] == json.loads(plain.stdout)["eps"]


def _record(level: int, pathname: str) -> logging.LogRecord:
    return logging.LogRecord("absl", level, pathname, 1, "note", None, None)


def test_only_dp_accountings_records_below_error_are_demoted() -> None:
    logger = logging.getLogger("fedqr-test-absl")
    logger.setLevel(logging.WARNING)
    demote = DpAccountingToDebug(logger)
    inside = str(Path(dp_accounting.__file__).parent / "rdp" / "rdp_privacy_accountant.py")
    note = _record(logging.WARNING, inside)
    assert demote.filter(note) is False and note.levelname == "DEBUG"
    logger.setLevel(logging.DEBUG)
    assert demote.filter(_record(logging.WARNING, inside)) is True  # DEBUG enabled: kept
    error = _record(logging.ERROR, inside)
    assert demote.filter(error) is True and error.levelname == "ERROR"
    other = _record(logging.WARNING, "/somewhere/else/app.py")  # another absl user
    assert demote.filter(other) is True and other.levelname == "WARNING"
