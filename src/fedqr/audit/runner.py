"""Run an audit: simulate the canary game, choose a test, bound epsilon from below."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from fedqr.audit._noise import noise_parameter, one_reply_claim, round_robin_replies
from fedqr.audit.config import NUM_SAMPLES, AuditConfig, ThreatModel
from fedqr.audit.stats import Evaluation, evaluate, select_threshold
from fedqr.audit.trials import final_model_scores, reply_scores
from fedqr.privacy import Mechanism, mechanism_for

__all__ = ["AuditReport", "ThreatResult", "run_audit"]

STATISTIC = {
    ThreatModel.REPLIES: "log-likelihood ratio of all the client's replies (coordinate 1)",
    ThreatModel.FINAL_MODEL: "coordinate 1 of the final model (sum of every reply's noise)",
    ThreatModel.ONE_REPLY: "log-likelihood ratio of one reply, the canary in its batch",
}
CLAIM = {
    ThreatModel.REPLIES: "the client's (eps, delta) over the whole run",
    ThreatModel.FINAL_MODEL: "the client's (eps, delta) over the whole run",
    ThreatModel.ONE_REPLY: "one reply's epsilon at the same delta, as the accountant composes "
                           "it (laplace: eps / R; gaussian: GaussianDpEvent(z) by PLD, before "
                           "amplification by sampling)",
}
WHOLE_RUN = (ThreatModel.REPLIES, ThreatModel.FINAL_MODEL)


@dataclass(frozen=True)
class ThreatResult:
    """The audit under one threat model: the chosen test and its evaluation.

    ``selection`` is the best test on the first half of the trials (its bound is optimistic
    and not reported as the result); ``evaluation`` is that test on the second half.
    """

    threat_model: ThreatModel
    statistic: str
    epsilon_claimed: float
    confidence: float
    selection: Evaluation
    evaluation: Evaluation

    @property
    def epsilon_lower_bound(self) -> float:
        """The lower bound on epsilon, holding with probability ``confidence``."""
        return self.evaluation.epsilon_lower_bound

    @property
    def violation(self) -> bool:
        """Whether the bound exceeds the claim it audits: a privacy bug, proven."""
        return self.epsilon_lower_bound > self.epsilon_claimed


@dataclass(frozen=True)
class AuditReport:
    """Everything an audit found; :meth:`to_json` is the document ``fedqr audit`` writes."""

    config: AuditConfig
    client: int
    replies: int
    noise: float
    shift: float
    results: tuple[ThreatResult, ...]
    wall_time_s: float

    @property
    def epsilon_claimed(self) -> float:
        """The client's claimed epsilon."""
        return float(self.config.eps)

    @property
    def epsilon_lower_bound(self) -> float:
        """The largest bound on the whole run's epsilon (``replies``, ``final-model``).

        ``0`` when only ``one-reply`` was audited: that bound is on one reply's epsilon and
        is compared with its own claim (:attr:`ThreatResult.epsilon_claimed`).
        """
        return max((r.epsilon_lower_bound for r in self.results
                    if r.threat_model in WHOLE_RUN), default=0.0)

    @property
    def violation(self) -> bool:
        """Whether any audit's bound exceeds the claim it audits."""
        return any(r.violation for r in self.results)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready document (finite numbers only)."""
        c = self.config
        return {
            "epsilon_claimed": self.epsilon_claimed,
            "delta_claimed": c.delta_claimed,
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "violation": self.violation,
            "confidence": c.confidence,
            "trials": c.trials,
            "one_reply_trials": c.one_reply_trials,
            "threat_model": c.threat_model.value,
            "mechanism": c.mechanism.value,
            "scenario": {"num_clients": c.num_clients, "clients_per_round": c.clients_per_round,
                         "rounds": c.rounds, "eps": float(c.eps), "delta": c.delta_claimed,
                         "clip": float(c.clip), "sample_rate": float(c.sample_rate),
                         "accountant": c.accountant.value, "selection": "round-robin",
                         "seed": c.seed},
            "audited_client": {"id": self.client, "replies": self.replies,
                               "num_samples": NUM_SAMPLES,
                               "noise_scale" if c.mechanism is Mechanism.LAPLACE
                               else "noise_std": self.noise,
                               "canary_shift": self.shift},
            "method": "each of the k audits at confidence 1 - (1 - confidence) / k (all "
                      "hold at once with the stated confidence); one-sided Clopper-Pearson "
                      "bounds at half its error each; test chosen on the first half of the "
                      "trials of each world, evaluated on the second half",
            "results": [{"threat_model": r.threat_model.value, "statistic": r.statistic,
                         "claim": CLAIM[r.threat_model],
                         "epsilon_claimed": r.epsilon_claimed,
                         "epsilon_lower_bound": r.epsilon_lower_bound,
                         "violation": r.violation, "confidence": r.confidence,
                         "selection": _ev(r.selection), "evaluation": _ev(r.evaluation)}
                        for r in self.results],
            "wall_time_s": self.wall_time_s,
        }


def _ev(e: Evaluation) -> dict[str, Any]:
    d = asdict(e)
    d["direction"] = e.direction.value
    return d


def run_audit(config: AuditConfig, *, _noise_scale_factor: float = 1.0) -> AuditReport:
    """Audit ``config``: canary trials in both worlds, a test, a lower bound on epsilon.

    The audited client is the one with the fewest (positive) replies, the strongest case
    for an audit. ``_noise_scale_factor`` is a private test hook: it multiplies every
    client's noise after calibration, so a factor below 1 breaks the mechanism on purpose
    and the audit must then report a bound above the claim.
    """
    if not 0 < _noise_scale_factor < float("inf"):
        raise ValueError(f"_noise_scale_factor must be > 0, got {_noise_scale_factor}")
    started = time.perf_counter()
    sim = config.sim_config()
    n = config.num_clients
    counts = round_robin_replies(sim)
    client = min((i for i in range(n) if counts[i] > 0), key=lambda i: (counts[i], i))
    scales = [noise_parameter(sim, client=i, replies=counts[i], num_samples=NUM_SAMPLES)
              * _noise_scale_factor if counts[i] > 0 else 0.0 for i in range(n)]
    mech, q = config.mechanism, float(config.sample_rate)
    # the canary's effect on a reply: clip / d_i (replace-one) or clip / (q d_i) (add/remove)
    shift = config.clip / (mechanism_for(mech).denominator_rate(q) * NUM_SAMPLES)
    others = [(counts[i], scales[i]) for i in range(n) if i != client]
    gen = torch.Generator().manual_seed(config.seed)
    models = config.threat_model.audits()
    confidence = 1.0 - (1.0 - config.confidence) / len(models)  # union bound over audits
    results = []
    for tm in models:
        one = tm is ThreatModel.ONE_REPLY
        trials = config.one_reply_trials if one else config.trials
        claim = (one_reply_claim(sim, client=client, replies=counts[client],
                                 num_samples=NUM_SAMPLES) if one else float(config.eps))
        scores = []
        for canary in (True, False):
            # one-reply: the canary is in the reply's batch (q = 1 for its signal)
            kw: dict[str, Any] = {"canary": canary, "trials": trials,
                                  "replies": 1 if one else counts[client],
                                  "scale": scales[client], "shift": shift,
                                  "sample_rate": 1.0 if one else q, "generator": gen}
            scores.append(final_model_scores(mech, others=others, **kw)
                          if tm is ThreatModel.FINAL_MODEL else reply_scores(mech, **kw))
        half = trials // 2
        s_in, s_out = scores
        # a stricter level on the selection half prefers tests with enough trials that
        # their bound survives on fresh trials (less winner's curse); any choice made
        # without the evaluation half keeps the bound valid
        sel = select_threshold(s_in[:half], s_out[:half], delta=config.delta_claimed,
                               confidence=1.0 - (1.0 - confidence) / 20.0)
        ev = evaluate(s_in[half:], s_out[half:], threshold=sel.threshold,
                      direction=sel.direction, delta=config.delta_claimed,
                      confidence=confidence)
        results.append(ThreatResult(threat_model=tm, statistic=STATISTIC[tm],
                                    epsilon_claimed=claim, confidence=confidence,
                                    selection=sel, evaluation=ev))
    return AuditReport(config=config, client=client, replies=counts[client],
                       noise=scales[client], shift=shift, results=tuple(results),
                       wall_time_s=time.perf_counter() - started)
