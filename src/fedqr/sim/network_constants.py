"""The bounds' constants of a torch model on a data set: a thin entry to the one estimator.

**Privacy**: this reads client data WITHOUT differential privacy (``reads_private_data``); use
``proxy_fraction`` or public data where that matters. The estimator is
:func:`fedqr.theory.estimate.estimate_constants` with a
:class:`~fedqr.models.torch_kernel.TorchKernel` (what its constants mean for a non-convex
model: :mod:`fedqr.theory.estimate_torch`); this entry keeps the signature of the paper's
CNN experiments (a model factory, default the paper's CNN sized for the data set).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedqr.data import Dataset, Partition
from fedqr.models.logreg import Norm
from fedqr.models.torch_kernel import TorchKernel
from fedqr.sim.network_parts import ModelFactory, paper_cnn_factory
from fedqr.theory.estimate import EstimatedConstants, EstimateSettings, estimate_constants

__all__ = ["estimate_network_constants", "network_kernel"]


def network_kernel(dataset: Dataset, model_factory: ModelFactory | None = None) -> TorchKernel:
    """The kernel of ``model_factory``'s model on ``dataset`` (default: the paper's CNN)."""
    factory = model_factory if model_factory is not None else paper_cnn_factory(dataset)
    return TorchKernel(build=factory, input_shape=dataset.image_shape or
                       (dataset.num_features,), num_classes=dataset.num_classes,
                       label="cnn" if model_factory is None else "torch")


def estimate_network_constants(
    *,
    dataset: Dataset,
    partition: Partition,
    clip: float,
    norm: Norm,
    eps: float | Sequence[float],
    delta: float | Sequence[float] = 0.0,
    sample_rate: float = 1.0,
    weight_decay: float = 0.01,
    proxy_fraction: float | None = None,
    rng: np.random.Generator | None = None,
    model_factory: ModelFactory | None = None,
    seed: int = 0,
    gd_steps: int = 5,
    lanczos_steps: int = 12,
    local_steps: int = 60,
    local_lr: float = 1e-3,
) -> EstimatedConstants:
    """Estimate the constants of a torch model on ``dataset`` as partitioned (no privacy!).

    ``model_factory`` builds the model from a generator (default: the paper's CNN); the other
    arguments are those of :func:`fedqr.theory.estimate.estimate_constants` and of
    :class:`~fedqr.theory.estimate.EstimateSettings`.
    """
    kernel = network_kernel(dataset, model_factory)
    return estimate_constants(
        dataset=dataset, partition=partition, clip=clip, norm=norm, eps=eps, delta=delta,
        sample_rate=sample_rate, weight_decay=weight_decay, kernel=kernel,
        proxy_fraction=proxy_fraction, rng=rng,
        settings=EstimateSettings(gd_steps=gd_steps, lanczos_steps=lanczos_steps,
                                  local_steps=local_steps, local_lr=local_lr, seed=seed))
