"""Names kept for torch models: options, factory, placement and evaluation (they live in
:mod:`fedqr.models.torch_kernel` and :mod:`fedqr.sim.streams`)."""

from __future__ import annotations

from fedqr.data import Dataset
from fedqr.models.factory import build_model
from fedqr.models.torch_kernel import ModelFactory, evaluate_model, load_flat, place_model
from fedqr.models.torch_kernel import TorchOptions as NetworkOptions
from fedqr.sim.streams import repeat_seeds

__all__ = ["ModelFactory", "NetworkOptions", "evaluate_model", "load_flat", "paper_cnn_factory",
           "place_model", "repeat_seeds"]


def paper_cnn_factory(dataset: Dataset) -> ModelFactory:
    """The paper's CNN sized for ``dataset`` (square images with a side divisible by 4)."""
    build_model("cnn", dataset=dataset, generator=None)  # fail early on bad shapes
    return lambda gen: build_model("cnn", dataset=dataset, generator=gen)
