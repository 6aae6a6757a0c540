"""Empirical privacy audit: how well can an adversary tell whether a canary was there?

A canary record is inserted into one client (the worst case for the mechanism), the
mechanism is run many times with and without it, and the true and false positive rates of
the best distinguisher give a Clopper-Pearson lower bound on epsilon (Jagielski, Ullman,
Oprea 2020; Nasr et al. 2021). A bound above the claimed epsilon proves a privacy bug; a
bound below it is evidence, not proof, that the claim holds. See docs/privacy.md.

This package sits above :mod:`fedqr.sim` and only reaches fedqr's noise through
:mod:`fedqr.audit._noise`.
"""

from fedqr.audit.config import NUM_SAMPLES, AuditConfig, ThreatModel
from fedqr.audit.runner import AuditReport, ThreatResult, run_audit
from fedqr.audit.stats import (
    Direction,
    Evaluation,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_bound,
    evaluate,
    select_threshold,
)

__all__ = [
    "NUM_SAMPLES",
    "AuditConfig",
    "AuditReport",
    "Direction",
    "Evaluation",
    "ThreatModel",
    "ThreatResult",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "epsilon_bound",
    "evaluate",
    "run_audit",
    "select_threshold",
]
