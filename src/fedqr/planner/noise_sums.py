"""The twin's summed Laplace noise of a round: one draw per group of equal replies.

The twin uses a round's b Laplace replies only through their weighted sum
``sum_i w_ci L_i`` (column c, repeat, coordinate; ``L_i`` of unit variance, shared by the
columns of a repeat). Replies whose weights are equal in every column form a group g, and
``sum_{i in g} w_ci L_i = w_cg sum_{i in g} L_i``. A sum of n i.i.d. unit-variance Laplace
variables is exactly ``(G1 - G2) / sqrt(2)`` with ``G1, G2 ~ Gamma(n, 1)`` i.i.d. (a Laplace
variable is ``E1 - E2`` of two Exp(1), and a sum of n Exp(1) is Gamma(n, 1)). So each group
costs two gamma draws per coordinate instead of two uniforms per reply: the same law (not
the same draws), and N = 1,000 clients of equal size and budget cost what one does.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["laplace_groups", "laplace_sum"]


def laplace_groups(weights: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct weight columns of a round's replies and their sizes.

    Parameters
    ----------
    weights:
        ``(C, b)``: column c's weight of reply i.

    Returns
    -------
    tuple of torch.Tensor
        ``(C, G)`` the weights of each group (columns in sorted order) and ``(G,)`` how many
        replies share them.
    """
    groups, counts = torch.unique(weights, dim=1, return_counts=True)
    return groups, counts


def laplace_sum(groups: Tensor, counts: Tensor, *, repeats: int, num_params: int,
                generator: torch.Generator) -> Tensor:
    """``sum_i w_ci L_i`` for every column, repeat and coordinate, ``(C, K, P)`` (contiguous).

    Parameters
    ----------
    groups, counts:
        The groups of :func:`laplace_groups` (the first rows of ``groups`` for a prefix of
        the columns).
    repeats, num_params:
        K and P.
    generator:
        Source of the gamma draws (float64).
    """
    alpha = counts.to(torch.float64)[None, :, None].expand(
        repeats, len(counts), num_params).contiguous()
    g1 = torch._standard_gamma(alpha, generator=generator)
    g2 = torch._standard_gamma(alpha, generator=generator)
    unit = (g1.sub_(g2).mul_(0.5 ** 0.5)).to(groups.dtype)  # (K, G, P)
    return torch.einsum("cg,kgp->ckp", groups, unit).contiguous()
