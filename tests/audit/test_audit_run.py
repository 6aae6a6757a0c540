"""The canary game: simulated distributions, bounds below the claim, and broken noise found."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
import torch

from fedqr.audit import AuditConfig, ThreatModel, run_audit
from fedqr.audit.trials import final_model_scores, reply_scores
from fedqr.privacy import Mechanism

ONE_REPLY: dict[str, Any] = {"num_clients": 10, "clients_per_round": 1, "rounds": 10}  # R_i = 1
FAST: dict[str, Any] = {"one_reply_trials": 200_000}
LAPLACE: dict[str, Any] = {"mechanism": Mechanism.LAPLACE, "sample_rate": 1.0, "clip": 300.0}
GAUSS_FULL: dict[str, Any] = {"mechanism": Mechanism.GAUSSIAN, "sample_rate": 1.0}


def _binomial_close(k: int, n: int, p: float) -> bool:
    return abs(k - n * p) <= 5 * math.sqrt(n * p * (1 - p))


def test_laplace_reply_llr_saturates_with_the_theoretical_odds() -> None:
    """R = 1, b = 2c/eps: the LLR is +eps exactly when y >= c; P = 1/2 in D, e^-eps/2 in D'."""
    eps, c, n = 1.0, 3.0, 40_000
    gen = torch.Generator().manual_seed(1)
    kw: dict[str, Any] = {"trials": n, "replies": 1, "scale": 2 * c / eps, "shift": c,
                          "sample_rate": 1.0, "generator": gen}
    s_in = reply_scores(Mechanism.LAPLACE, canary=True, **kw)
    s_out = reply_scores(Mechanism.LAPLACE, canary=False, **kw)
    assert s_in.max() == eps and s_out.min() == -eps  # exactly saturated, no rounding
    assert _binomial_close(int(np.sum(s_in == eps)), n, 0.5)
    assert _binomial_close(int(np.sum(s_out == eps)), n, 0.5 * math.exp(-eps))


def test_gaussian_final_model_mean_and_variance() -> None:
    """Y = Delta * Binomial(R, q) * canary + N(0, sum of every reply's variance)."""
    n, r, q, delta_, sigma = 40_000, 5, 0.3, 2.0, 1.5
    others = [(5, 1.0), (4, 0.5)]
    gen = torch.Generator().manual_seed(2)
    kw: dict[str, Any] = {"trials": n, "replies": r, "scale": sigma, "others": others,
                          "shift": delta_, "sample_rate": q, "generator": gen}
    y_in = final_model_scores(Mechanism.GAUSSIAN, canary=True, **kw)
    y_out = final_model_scores(Mechanism.GAUSSIAN, canary=False, **kw)
    var_noise = r * sigma**2 + 5 * 1.0 + 4 * 0.25
    var_in = var_noise + delta_**2 * r * q * (1 - q)
    assert abs(y_out.mean()) < 5 * math.sqrt(var_noise / n)
    assert abs(y_in.mean() - delta_ * r * q) < 5 * math.sqrt(var_in / n)
    assert y_out.var() == pytest.approx(var_noise, rel=0.05)
    assert y_in.var() == pytest.approx(var_in, rel=0.05)


def test_laplace_final_model_sums_every_reply() -> None:
    n, r, c, b = 40_000, 3, 1.0, 2.0
    gen = torch.Generator().manual_seed(3)
    y = final_model_scores(Mechanism.LAPLACE, canary=False, trials=n, replies=r, scale=b,
                           others=[(6, 4.0)], shift=c, sample_rate=1.0, generator=gen)
    var = 2 * (r * b**2 + 6 * 4.0**2)  # Laplace(b) has variance 2 b^2
    assert abs(y.mean() + r * c) < 5 * math.sqrt(var / n)
    assert y.var() == pytest.approx(var, rel=0.05)


def test_laplace_audit_is_nearly_tight_for_one_reply() -> None:
    rep = run_audit(AuditConfig(eps=1.0, trials=6000, threat_model=ThreatModel.REPLIES,
                                **LAPLACE, **ONE_REPLY))
    assert rep.replies == 1
    assert 0.6 <= rep.epsilon_lower_bound <= rep.epsilon_claimed


@pytest.mark.parametrize("mech", [LAPLACE, GAUSS_FULL, {"mechanism": Mechanism.GAUSSIAN}])
def test_bound_stays_below_the_claim_at_eps_1(mech: dict[str, Any]) -> None:
    rep = run_audit(AuditConfig(eps=1.0, trials=4000, **mech, **ONE_REPLY, **FAST))
    assert [r.threat_model for r in rep.results] == [
        ThreatModel.REPLIES, ThreatModel.FINAL_MODEL, ThreatModel.ONE_REPLY]
    assert all(r.epsilon_lower_bound <= r.epsilon_claimed for r in rep.results)
    assert rep.epsilon_claimed == 1.0 and not rep.violation
    # every bound at 1 - 0.05 / 3, so that all three hold at once with probability 0.95
    assert all(r.confidence == pytest.approx(1 - 0.05 / 3) for r in rep.results)


@pytest.mark.parametrize("mech", [LAPLACE, {"mechanism": Mechanism.GAUSSIAN}])
def test_one_reply_audit_is_informative_where_the_whole_run_audit_is_not(
        mech: dict[str, Any]) -> None:
    """``fedqr run``'s default scenario (R = 100): the whole-run bound is about 0 (see
    docs/privacy.md), the per-reply bound within a factor 1.5 of its claim: eps / R for
    Laplace (eps = 4: 0.04, about 0.037 expected, sd 0.001), the unsampled eps of the
    calibrated z for Gaussian (eps = 1: about 4.0; about 3.3 expected)."""
    eps = 4.0 if mech is LAPLACE else 1.0
    rep = run_audit(AuditConfig(eps=eps, trials=2000, one_reply_trials=2_000_000,
                                threat_model=ThreatModel.ONE_REPLY, **mech))
    (one,) = rep.results
    assert rep.replies == 100
    if mech is LAPLACE:
        assert one.epsilon_claimed == pytest.approx(0.04)
    else:  # z calibrated for q = 0.01 over 100 replies is about 0.93: one reply is 4 eps
        assert 3.5 < one.epsilon_claimed < 4.5
    assert one.epsilon_claimed / 1.5 <= one.epsilon_lower_bound <= one.epsilon_claimed
    assert rep.epsilon_lower_bound == 0.0  # no whole-run audit ran


@pytest.mark.parametrize(("mech", "trials"), [
    (LAPLACE, 4000), (GAUSS_FULL, 4000),
    ({"mechanism": Mechanism.GAUSSIAN}, 20_000),  # q = 0.01: the canary is rarely sampled
])
def test_under_scaled_noise_is_reported_as_a_violation(mech: dict[str, Any],
                                                       trials: int) -> None:
    config = AuditConfig(eps=1.0, trials=trials, **mech, **ONE_REPLY, **FAST)
    broken = run_audit(config, _noise_scale_factor=0.2)
    assert broken.epsilon_lower_bound > broken.epsilon_claimed and broken.violation
    assert all(r.violation for r in broken.results if r.threat_model is not
               ThreatModel.FINAL_MODEL)
    assert not run_audit(config).violation


@pytest.mark.parametrize("mech", [LAPLACE, {"mechanism": Mechanism.GAUSSIAN}])
def test_one_reply_audit_finds_a_bug_the_whole_run_audit_misses(mech: dict[str, Any]) -> None:
    """Noise at 0.6 of its calibration over R = 100 replies (``fedqr run``'s default)."""
    config = AuditConfig(eps=1.0, trials=2000, one_reply_trials=4_000_000, **mech)
    broken = run_audit(config, _noise_scale_factor=0.6)
    assert [r.violation for r in broken.results] == [False, False, True]
    assert broken.violation and broken.epsilon_lower_bound <= broken.epsilon_claimed


def test_a_mild_laplace_bug_over_several_replies_is_found() -> None:
    """30% too little noise (true eps 1.43 over R = 3 replies) is caught."""
    config = AuditConfig(eps=1.0, trials=20_000, threat_model=ThreatModel.REPLIES,
                         **LAPLACE, num_clients=4, clients_per_round=1, rounds=12)
    rep = run_audit(config, _noise_scale_factor=0.7)
    assert rep.replies == 3 and rep.epsilon_lower_bound > 1.0


def test_report_is_reproducible_and_json_complete() -> None:
    config = AuditConfig(trials=200, one_reply_trials=200, num_clients=3, clients_per_round=2,
                         rounds=4, seed=5)
    a, b = run_audit(config).to_json(), run_audit(config).to_json()
    a.pop("wall_time_s")
    b.pop("wall_time_s")
    assert a == b
    json.dumps(a, allow_nan=False)
    assert {"epsilon_claimed", "epsilon_lower_bound", "confidence", "trials", "threat_model",
            "mechanism", "scenario", "results"} <= set(a)
    # round robin over 3 clients, 2 per round, 4 rounds: replies 3, 3, 2; the audit takes 2
    assert a["audited_client"] == {**a["audited_client"], "id": 2, "replies": 2}
    assert [r["threat_model"] for r in a["results"]] == ["replies", "final-model",
                                                         "one-reply"]
    assert a["violation"] is False and a["one_reply_trials"] == 200
    assert a["results"][0]["epsilon_claimed"] == 1.0 and a["results"][2]["claim"]
    ev = a["results"][0]["evaluation"]
    assert ev["trials_in"] == ev["trials_out"] == 100


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"eps": 0.0}, "eps"), ({"eps": math.inf}, "eps"), ({"trials": 9}, "trials"),
    ({"one_reply_trials": 9}, "one_reply_trials"),
    ({"confidence": 1.0}, "confidence"), ({"confidence": 0.0}, "confidence"),
    ({"delta": 1.0}, "delta"), ({"delta": -0.1}, "delta"),
    ({"mechanism": Mechanism.NONE}, "mechanism"), ({"rounds": 0}, "rounds"),
    ({"mechanism": Mechanism.DISCRETE_LAPLACE}, "mechanism"),  # no canary game derived
    ({"clients_per_round": 11}, "clients_per_round"), ({"seed": -1}, "seed"),
    ({"sample_rate": 0.0}, "sample_rate"), ({"clip": -1.0}, "clip"),
])
def test_bad_config_names_the_parameter(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=rf"\b{name}\b.*got {name}="):
        AuditConfig(**kwargs)
