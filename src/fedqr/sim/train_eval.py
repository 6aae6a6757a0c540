"""The training objective at an evaluation, at the cadence :class:`EvalTrain` asks.

``every`` evaluates F(theta) over all training rows at every evaluation (reusing the loss a
full-batch pass computed), ``end`` at the final evaluation only, ``none`` never, and
``sample`` estimates it at every evaluation from ``train_eval_rows`` rows drawn uniformly
without replacement. The draw comes from a generator of its own (:data:`TRAIN_EVAL_STREAM`,
seeded by ``(seed, TRAIN_EVAL_STREAM)``), so Poisson batches, noise and replies are the same
whatever the setting; all repeats share the rows drawn at an evaluation.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedqr.models.kernel import Attached, GradSums
from fedqr.sim.config import EvalTrain, SimConfig

__all__ = ["TRAIN_EVAL_STREAM", "TrainEvaluator", "sampled_mean"]

TRAIN_EVAL_STREAM = 2  # after the per-reply SAMPLE_STREAM (0) and NOISE_STREAM (1)


def sampled_mean(losses: Tensor, *, population: int) -> tuple[list[float], list[float]]:
    """Mean of per-row ``losses`` ``(R, m)`` and its standard error, per repeat.

    The rows are a simple random sample without replacement of ``population`` rows, so the
    error carries the finite-population correction ``(1 - m / population)``.
    """
    m = losses.shape[1]
    mean = losses.mean(dim=1)
    fpc = max(0.0, 1.0 - m / population)
    stderr = (losses.var(dim=1, correction=1) / m * fpc).sqrt()
    return mean.tolist(), stderr.tolist()


class TrainEvaluator:
    """The training objective of one run at its evaluations (see the module docstring)."""

    def __init__(self, *, config: SimConfig, model: Attached, num_train: int,
                 device: torch.device) -> None:
        self.mode, self.rows = config.train_eval, config.train_eval_rows
        self.weight_decay = config.weight_decay
        self.model, self.num_train, self.device = model, num_train, device
        if self.rows is not None and self.rows > num_train:
            raise ValueError(f"eval_train must sample at most the {num_train} training rows "
                             f"(sample:N, N <= {num_train}), got eval_train='sample:{self.rows}'")
        self.rng = np.random.default_rng(np.random.SeedSequence([config.seed,
                                                                 TRAIN_EVAL_STREAM]))

    def fused(self, *, evaluate_now: bool) -> bool:
        """Whether a full-batch pass of this round should also sum the training loss."""
        return evaluate_now and self.mode is EvalTrain.EVERY

    def __call__(self, theta: Tensor, fused: GradSums | None, *, sel: np.ndarray | None,
                 final: bool) -> tuple[list[float] | None, list[float] | None]:
        """``(objective, stderr)`` per repeat, or ``None`` for what is not evaluated now
        (``stderr`` is set for ``sample`` only)."""
        if self.mode is EvalTrain.EVERY or (self.mode is EvalTrain.END and final):
            return self.model.train_objective(theta, fused, sel=sel,
                                              weight_decay=self.weight_decay), None
        if self.mode is not EvalTrain.SAMPLE or self.rows is None:
            return None, None
        drawn = np.sort(self.rng.choice(self.num_train, size=self.rows, replace=False))
        losses = self.model.train_losses(theta, torch.as_tensor(drawn, device=self.device))
        mean, stderr = sampled_mean(losses.double(), population=self.num_train)
        reg = (0.5 * self.weight_decay * theta.double().pow(2).sum(dim=1)).tolist()
        return [m + w for m, w in zip(mean, reg, strict=True)], stderr
