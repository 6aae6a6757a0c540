"""Building blocks of :mod:`fedqr.sim.network`: options, model factory, evaluation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fedqr.data import Dataset
from fedqr.data._validate import parse_enum
from fedqr.models.factory import ModelName, build_model
from fedqr.models.per_sample import DEFAULT_CHUNK_ROWS, Method

#: Builds a freshly initialised model from a CPU generator (the same model on every device).
ModelFactory = Callable[[torch.Generator], nn.Module]


@dataclass(frozen=True, kw_only=True)
class NetworkOptions:
    """Execution settings of :func:`simulate_network` (no effect on the algorithm).

    Attributes
    ----------
    chunk_rows:
        Rows per chunk of the per-sample clipping (bounds memory: see
        :mod:`fedqr.models.per_sample`).
    eval_rows:
        Rows per chunk of forward-only evaluation (on 2 CPU threads 256 was as fast as or
        faster than 1,000 and 4,000).
    method:
        Per-sample method: ``ghost`` (fast; Linear/Conv2d models) or ``vmap`` (any model).
    channels_last:
        Keep 4-D parameters and evaluation inputs in channels-last memory format (on 2 CPU
        threads the CNN's forward pass is about 1.5x faster, per-sample clipping 1.2x).
    train_loss:
        Evaluate the training objective over all training rows at every evaluation (a forward
        pass over the training set unless every client computed its full gradient that
        round); ``False`` reports NaN (``null`` in JSON) and saves that time.
    """

    chunk_rows: int = DEFAULT_CHUNK_ROWS
    eval_rows: int = 256
    method: Method = Method.GHOST
    channels_last: bool = True
    train_loss: bool = True

    def __post_init__(self) -> None:
        for name in ("chunk_rows", "eval_rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {name}={value!r}")
        parse_enum(Method, "method", self.method)


def paper_cnn_factory(dataset: Dataset) -> ModelFactory:
    """The paper's CNN sized for ``dataset`` (square images with a side divisible by 4)."""
    build_model(ModelName.CNN, dataset=dataset, generator=None)  # fail early on bad shapes
    return lambda gen: build_model(ModelName.CNN, dataset=dataset, generator=gen)


def place_model(model: nn.Module, device: torch.device, *, channels_last: bool) -> nn.Module:
    """``model`` on ``device``, 4-D parameters in channels-last format when asked (the network
    engine and the Flower client place it alike, so their per-sample sums agree bit for bit)."""
    model = model.to(device)
    if channels_last:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 4:
                    p.data = p.data.contiguous(memory_format=torch.channels_last)
    return model


def repeat_seeds(seed: int, repeats: int) -> list[int]:
    """One 63-bit seed per repeat from ``numpy.random.SeedSequence(seed).spawn``: repeat r's
    seed does not depend on the number of repeats."""
    children = np.random.SeedSequence(seed).spawn(repeats)
    return [int(c.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)) for c in children]


def load_flat(model: nn.Module, theta: Tensor) -> None:
    """Copy the flat ``theta`` into ``model``'s parameters (keeping their memory format)."""
    pos = 0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(theta[pos:pos + p.numel()].view_as(p))
            pos += p.numel()


@torch.no_grad()
def evaluate_model(
    model: nn.Module, x: Tensor, y: Tensor, *, chunk_rows: int, channels_last: bool = False
) -> tuple[float, int]:
    """Summed cross-entropy (float64) and number of correct predictions over ``(x, y)``."""
    loss = torch.zeros((), dtype=torch.float64, device=x.device)
    correct = torch.zeros((), dtype=torch.int64, device=x.device)
    for start in range(0, x.shape[0], chunk_rows):
        xc, yc = x[start:start + chunk_rows], y[start:start + chunk_rows]
        if channels_last and xc.dim() == 4:
            xc = xc.contiguous(memory_format=torch.channels_last)
        logits = model(xc)
        loss += F.cross_entropy(logits, yc, reduction="sum").double()
        correct += (logits.argmax(dim=1) == yc).sum()
    return float(loss), int(correct)
