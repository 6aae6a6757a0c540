"""What produced a result: fedqr and torch versions, device, model (``result.json``)."""

from __future__ import annotations

from typing import Any

import torch

import fedqr
from fedqr.models.factory import ModelSpec

__all__ = ["provenance"]


def provenance(*, model: ModelSpec, device: str | torch.device) -> dict[str, Any]:
    """The ``provenance`` section of ``result.json``.

    Keys: ``fedqr_version``, ``torch_version``, ``device`` (e.g. ``"cpu"``, ``"cuda:0"``),
    ``model`` (``{"name", "num_params"}``).
    """
    return {"fedqr_version": fedqr.__version__, "torch_version": torch.__version__,
            "device": str(torch.device(device)), "model": model.to_json()}
