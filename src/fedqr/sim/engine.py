"""FedSGD-DPC with softmax regression: the round loop with the fused logistic-regression kernel.

:func:`simulate` runs :func:`fedqr.sim.loop.run_rounds` with
:class:`~fedqr.models.logreg_kernel.LogRegKernel`: every repeat and every selected client in
one batch of tensor operations (no Python loop over clients or repeats in a pass). The loop,
the reply and the random streams are shared with every other model
(:mod:`fedqr.sim.loop`, :mod:`fedqr.sim.reply`, :mod:`fedqr.sim.streams`).
"""

from __future__ import annotations

import dataclasses

import torch

from fedqr.data import Dataset, Partition
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.sim.config import SimConfig
from fedqr.sim.loop import RoundCallback, aggregation_weights, run_rounds
from fedqr.sim.result import SimResult
from fedqr.sim.streams import (
    NOISE_STREAM,
    SAMPLE_STREAM,
    draw_noise,
    reply_generator,
    reply_positions,
)

__all__ = ["NOISE_STREAM", "SAMPLE_STREAM", "aggregation_weights", "draw_noise",
           "reply_generator", "reply_positions", "simulate"]


def simulate(
    dataset: Dataset,
    partition: Partition,
    config: SimConfig,
    *,
    device: str | torch.device = "cpu",
    on_round: RoundCallback | None = None,
) -> SimResult:
    """Run FedSGD-DPC with softmax regression ``config.repeats`` times in one batch.

    Parameters
    ----------
    dataset:
        Training and test arrays.
    partition:
        Which training rows each client owns.
    config:
        N, b, T, privacy, learning rate, repeats and seed.
    device:
        Torch device for all tensors (``"cuda"`` when available).
    on_round:
        Called with the number of finished rounds after every round (progress bars).

    Returns
    -------
    SimResult
        Every metric; ``final_theta`` has shape ``(R, k, p)``.

    Raises
    ------
    fedqr.privacy.PrivacyBudgetExceeded
        Before any reply that would take a client over its budget.
    """
    kernel = LogRegKernel(num_features=dataset.num_features, num_classes=dataset.num_classes)
    result = run_rounds(dataset, partition, config, kernel, device=device, on_round=on_round)
    return dataclasses.replace(result, final_theta=result.final_theta.reshape(
        config.repeats, dataset.num_classes, dataset.num_features))
