"""What produced a result: fedqr and torch versions, device, model (``result.json``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

import fedqr
from fedqr.models.factory import ModelSpec

__all__ = ["model_record", "provenance"]


def provenance(*, model: ModelSpec | Mapping[str, object],
               device: str | torch.device) -> dict[str, Any]:
    """The ``provenance`` section of ``result.json``.

    Keys: ``fedqr_version``, ``torch_version``, ``device`` (e.g. ``"cpu"``, ``"cuda:0"``),
    ``model`` (``{"name", "num_params", ...}``: a kernel's ``describe()``).
    """
    return {"fedqr_version": fedqr.__version__, "torch_version": torch.__version__,
            "device": str(torch.device(device)),
            "model": model.to_json() if isinstance(model, ModelSpec) else dict(model)}


def model_record(kernel: object) -> dict[str, object]:
    """A kernel's ``describe()`` and, where it has them, its ``parameter_shapes`` (an MLP's
    layer widths: what ``--hidden`` chose), for ``provenance.model``."""
    out = dict(kernel.describe())  # type: ignore[attr-defined]
    shapes = getattr(kernel, "parameter_shapes", None)
    if shapes:
        out["parameter_shapes"] = shapes
    return out
