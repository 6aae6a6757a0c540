"""The model factory: which model a data set trains, built by name, with its parameter count.

=======  ==============================================  ===========================
name     model                                           parameters
=======  ==============================================  ===========================
logreg   softmax regression without bias (the paper's    ``k * p`` (MNIST: 7,840;
         MNIST model), trained by the fused batched      digits: 640)
         engine :func:`fedqr.sim.engine.simulate`
linear   the same with a bias per class (a user's own    ``k * (p + 1)``
         data's default), on the same fused engine
cnn      the paper's FEMNIST CNN (:class:`PaperCNN`),    FEMNIST: 110,526
         trained by :func:`fedqr.sim.network.simulate_network`
=======  ==============================================  ===========================

:func:`model_for` is the one place that says which model a data set trains (FEMNIST: the
CNN, MNIST and digits: logistic regression, a user's data: ``linear``); every engine, Flower
and the CLI ask it. A new
model is a :class:`ModelName` member, a branch in :func:`build_model` and
:func:`num_params`, and a row in :data:`_DEFAULT`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from fedqr._enums import ModelName
from fedqr.data import Dataset, DatasetName
from fedqr.data.presets import default_model_name
from fedqr.models.cnn import PaperCNN
from fedqr.models.cnn import num_parameters as _count

__all__ = ["ModelName", "ModelSpec", "build_model", "build_network", "default_model",
           "flat_parameters", "model_for", "num_params"]




@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A model for a data set: its name and number of scalar parameters."""

    name: ModelName
    num_params: int

    @property
    def is_network(self) -> bool:
        """Whether it is a torch module trained by the network engine (not the fused pass)."""
        return self.name not in (ModelName.LOGREG, ModelName.LINEAR)

    def to_json(self) -> dict[str, object]:
        """``{"name": ..., "num_params": ...}`` for ``result.json``."""
        return {"name": self.name.value, "num_params": self.num_params}


def _dataset_name(dataset: Dataset | DatasetName | str) -> str:
    return dataset.name if isinstance(dataset, Dataset) else str(dataset)


def default_model(dataset: Dataset | DatasetName | str) -> ModelName:
    """The paper's model for ``dataset`` (by name)."""
    return ModelName(default_model_name(_dataset_name(dataset)))


def build_model(name: ModelName | str, *, dataset: Dataset,
                generator: torch.Generator | None) -> nn.Module:
    """A freshly initialised torch model ``name`` sized for ``dataset``, drawn from ``generator``
    (``None``: PyTorch's default initialisation, e.g. on the meta device).

    Raises
    ------
    ValueError
        For ``logreg`` (it has no torch module: the fused engine holds ``theta``), or a
        data set the model cannot take.
    """
    return build_network(name, image_shape=dataset.image_shape,
                         num_classes=dataset.num_classes, generator=generator,
                         dataset_name=dataset.name)


def build_network(name: ModelName | str, *, image_shape: tuple[int, ...] | None,
                  num_classes: int, generator: torch.Generator | None,
                  dataset_name: str = "") -> nn.Module:
    """:func:`build_model` from the input shape and class count alone (a Flower client
    holds only its own rows)."""
    model = _parse(name)
    if model is ModelName.CNN:
        shape = image_shape
        if shape is None or len(shape) != 3 or shape[1] != shape[2]:
            raise ValueError(f"the paper's CNN needs square images (C, H, H), got "
                             f"image_shape={shape} for dataset {dataset_name!r}")
        return PaperCNN(in_channels=shape[0], image_size=shape[1], num_classes=num_classes,
                        generator=generator)
    raise ValueError("model must be a torch model ('cnn'); 'logreg' and 'linear' are trained "
                     f"by the fused engine, got model={model.value!r}")


def num_params(name: ModelName | str, *, dataset: Dataset) -> int:
    """Number of scalar parameters of model ``name`` on ``dataset``."""
    model = _parse(name)
    if model is ModelName.LOGREG:
        return dataset.num_classes * dataset.num_features
    if model is ModelName.LINEAR:
        return dataset.num_classes * (dataset.num_features + 1)
    with torch.device("meta"):  # shapes only, nothing allocated or drawn
        return _count(build_model(model, dataset=dataset, generator=None))


def model_for(dataset: Dataset, *, name: ModelName | str | None = None) -> ModelSpec:
    """The model ``dataset`` trains (``name``, default the paper's) and its size."""
    model = _parse(name) if name is not None else default_model(dataset)
    return ModelSpec(name=model, num_params=num_params(model, dataset=dataset))


def _parse(name: object) -> ModelName:
    if isinstance(name, str) and name in ModelName._value2member_map_:
        return ModelName(name)
    allowed = ", ".join(repr(m.value) for m in ModelName)
    raise ValueError(f"model must be one of {allowed}, got model={name!r}")


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """The model's parameters as one flat float32 vector (``parameters()`` order)."""
    return torch.cat([p.detach().flatten() for p in model.parameters()]).to(torch.float32)

