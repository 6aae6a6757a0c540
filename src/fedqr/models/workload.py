"""The workload: the clients' federated data and the model kernel trained on them.

It is the one object the layers above take for "what is trained on what": ``fedqr run``,
``plan`` and ``estimate`` build one from their options (:func:`fedqr.cli.scenario.workload`),
:func:`fedqr.simulate` and :func:`fedqr.plan` from their arguments; the round loop
(:func:`fedqr.sim.loop.run_rounds`), the twin and the estimator read its client data and its
kernel. :func:`kernel_for` is the one place a model choice becomes a kernel sized for data (a
built-in data set's default model is its row in :data:`fedqr.data.presets.PRESETS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fedqr.data import ClientData, Dataset, DatasetName
from fedqr.data.presets import default_model_name
from fedqr.data.source import DataSource
from fedqr.models.kernel import Kernel
from fedqr.models.losses import LossFn
from fedqr.models.zoo import UserFactory, make_kernel

__all__ = ["Model", "Workload", "input_shape", "kernel_for"]

Model = str | UserFactory | Kernel
"""``"logreg"``, ``"linear"``, ``"mlp"``, ``"cnn"``, ``"FILE.py:FUNCTION"``, a factory
``(input_shape, num_classes) -> nn.Module`` or a ready kernel."""


def input_shape(dataset: Dataset) -> tuple[int, ...]:
    """One sample's shape: the image shape, or ``(num_features,)``."""
    return tuple(dataset.image_shape) if dataset.image_shape else (dataset.num_features,)


def kernel_for(model: Model | None, dataset: Dataset, *, preset: DatasetName | str | None = None,
               hidden: Sequence[int] = (64,), loss_fn: LossFn | None = None) -> Kernel:
    """The kernel of ``model`` sized for ``dataset``'s samples and classes.

    Parameters
    ----------
    model:
        See :data:`Model`; ``None``: the default model of the data set named ``preset`` (a
        :class:`~fedqr.data.DatasetName`; ``linear`` for a user's own data).
    hidden, loss_fn:
        Hidden widths of ``mlp``; per-sample loss of a torch model (default cross-entropy).

    Raises
    ------
    ValueError
        Naming the model, when it cannot take the data or has no per-sample gradients.
    """
    choice = model if model is not None else default_model_name(preset)
    return make_kernel(choice, input_shape=input_shape(dataset),
                       num_classes=dataset.num_classes, hidden=hidden, loss_fn=loss_fn)


@dataclass(frozen=True)
class Workload:
    """Federated data (a built-in recipe or a user's data) and the model kernel trained on it.

    Attributes
    ----------
    data:
        Where the client data come from (:class:`~fedqr.data.DataSpec` or
        :class:`~fedqr.data.source.OwnData`).
    kernel:
        The model: clipped per-sample gradient sums, evaluation, parameter count.
    """

    data: DataSource
    kernel: Kernel

    @classmethod
    def of(cls, data: DataSource, model: Model | None = None, *,
           hidden: Sequence[int] = (64,), loss_fn: LossFn | None = None) -> Workload:
        """The workload of ``data`` and ``model`` (default: the data set's paper model)."""
        return cls(data=data, kernel=kernel_for(model, data.build().dataset,
                                                preset=data.dataset, hidden=hidden,
                                                loss_fn=loss_fn))

    def build(self) -> ClientData:
        """The client data (a data set and its partition into clients)."""
        return self.data.build()

    @property
    def num_clients(self) -> int:
        """N."""
        return self.data.num_clients

    def identity(self) -> dict[str, Any]:
        """What a result depends on: the data's identity and the model's description."""
        return {"data": self.data.identity(), "model": self.kernel.describe()}
