"""FedSGD-DPC for any torch model, e.g. the paper's FEMNIST CNN: the round loop with a
:class:`~fedqr.models.torch_kernel.TorchKernel`.

The same algorithm, schedule, calibration, ledgers, reply and aggregation as every model
(:func:`fedqr.sim.loop.run_rounds`); ``theta`` is the model's flattened parameters and the
per-sample clipping is :func:`fedqr.models.per_sample.clipped_grad_sums`. Repeats run one
after another inside each round; the initial models come from one CPU generator seeded by
``seed`` (repeat r gets the r-th draw) and repeat r draws its batches and noise from its own
generator (:mod:`fedqr.sim.streams`).
"""

from __future__ import annotations

import torch

from fedqr.data import Dataset, Partition
from fedqr.models.torch_kernel import TorchKernel, evaluate_model
from fedqr.sim.config import SimConfig
from fedqr.sim.loop import RoundCallback, run_rounds
from fedqr.sim.network_parts import (
    ModelFactory,
    NetworkOptions,
    paper_cnn_factory,
)
from fedqr.sim.result import SimResult

__all__ = ["ModelFactory", "NetworkOptions", "evaluate_model", "paper_cnn_factory",
           "simulate_network"]


def simulate_network(
    dataset: Dataset,
    partition: Partition,
    config: SimConfig,
    *,
    model_factory: ModelFactory | None = None,
    device: str | torch.device = "cpu",
    on_round: RoundCallback | None = None,
    options: NetworkOptions | None = None,
) -> SimResult:
    """Run FedSGD-DPC with a torch model ``config.repeats`` times and return every metric.

    Parameters
    ----------
    dataset:
        Training and test arrays; rows are reshaped to ``dataset.image_shape`` when set.
    partition:
        Which training rows each client owns.
    config:
        N, b, T, privacy, learning rate, weight decay, repeats, seed, ``eval_every``,
        ``train_eval``.
    model_factory:
        Builds an initialised model from a CPU ``torch.Generator``; default: the paper's CNN.
    device, on_round, options:
        Torch device; progress callback; chunk sizes, per-sample method, memory format
        (when the training objective is evaluated is ``config.train_eval``).

    Returns
    -------
    SimResult
        Every metric; ``final_theta`` has shape ``(R, P)``.
    """
    kernel = TorchKernel(
        build=model_factory if model_factory is not None else paper_cnn_factory(dataset),
        input_shape=dataset.image_shape or (dataset.num_features,),
        num_classes=dataset.num_classes, label="cnn" if model_factory is None else "torch",
        options=options if options is not None else NetworkOptions())
    return run_rounds(dataset, partition, config, kernel, device=device, on_round=on_round)
