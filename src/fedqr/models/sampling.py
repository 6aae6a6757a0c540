"""Poisson sampling of a client's local batch, drawn in O(q d) (any model's batches).

Every path that samples a batch draws it here: the engine's batched streams and per-reply
generators (:mod:`fedqr.sim.streams`), the logistic pass (:func:`fedqr.models.logreg_pass.
poisson_sums`) and the twins (:mod:`fedqr.planner.gradients`, :mod:`fedqr.planner.twin_kernel`),
so the same generator state gives the same batch everywhere.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["poisson_positions"]


def poisson_positions(
    sizes: Tensor, *, sample_rate: float, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Poisson sampling: each of a client's d_i rows joins the batch independently with prob. q.

    Drawn as a Bernoulli process through geometric gaps, so the cost is O(q d) rather than O(d)
    draws. Returns ``positions`` (local row indices, 0 where invalid) and ``valid``, both of
    shape ``sizes.shape + (m,)`` with m the largest batch drawn.
    """
    log1mq = math.log1p(-sample_rate) if sample_rate < 1 else -math.inf
    max_d = float(sizes.max()) if sizes.numel() else 0.0
    k = int(sample_rate * max_d + 8 * math.sqrt(sample_rate * max_d + 1) + 16)
    last_row = sizes - 1
    parts: list[Tensor] = []
    last = None
    # extend until every process has left [0, d_i) (at least one draw when any d_i > 0)
    while (max_d > 0) if last is None else bool((last < last_row).any()):
        u = 1.0 - torch.rand(*sizes.shape, k, generator=generator, device=sizes.device,
                             dtype=torch.float64)  # (0, 1]
        gaps = torch.floor(torch.log(u) / log1mq).to(torch.int64) + 1
        new = gaps.cumsum(dim=-1)
        new = new.sub_(1) if last is None else new.add_(last.unsqueeze(-1))
        parts.append(new)
        last = new[..., -1]
    pos = (parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)) if parts else torch.empty(
        *sizes.shape, 0, dtype=torch.int64, device=sizes.device)
    valid = pos < sizes.unsqueeze(-1)
    m = int(valid.sum(dim=-1).max()) if valid.numel() else 0
    pos, valid = pos[..., :m], valid[..., :m]  # positions increase, so valid rows come first
    return pos.masked_fill(~valid, 0), valid
