"""The twin's summed Laplace noise of a round: one draw per group of equal replies.

The twin uses a round's b Laplace replies only through their weighted sum
``sum_i w_ci L_i`` (column c, repeat, coordinate; ``L_i`` of unit variance, shared by the
columns of a repeat). Replies whose weights are equal in every column form a group g, and
``sum_{i in g} w_ci L_i = w_cg sum_{i in g} L_i``. A unit-variance Laplace variable is a normal
scale mixture, ``L = sqrt(W) Z`` with ``W ~ Exp(1)`` and ``Z ~ N(0, 1)`` independent, so a sum
of n i.i.d. ones is, given the W's, normal of variance ``sum_i W_i ~ Gamma(n, 1)``: exactly
``sqrt(G) Z`` with ``G ~ Gamma(n, 1)``. Each group costs one gamma and one normal draw per
coordinate instead of two uniforms per reply: the same law (not the same draws), and
N = 1,000 clients of equal budgets cost what one does (weights equal to :data:`GROUP_BITS`
bits: float32 rounding does not split a group).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["GROUP_BITS", "laplace_groups", "laplace_sum"]


GROUP_BITS = 20
"""Replies whose weights agree to ``2**-GROUP_BITS`` of their column's largest weight (with the
next reply in sorted order) form one group. Equal budgets make every reply's weight
``c_i sigma_i`` the same in exact arithmetic (``c_i`` grows with ``d_i`` as ``sigma_i`` falls
with it), but float32 rounds them apart; a group's weight is its members' mean."""


def laplace_groups(weights: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct weight columns of a round's replies (to :data:`GROUP_BITS`) and their sizes.

    Parameters
    ----------
    weights:
        ``(C, b)``: column c's weight of reply i (``>= 0``).

    Returns
    -------
    tuple of torch.Tensor
        ``(C, G)`` the weights of each group (the mean of its replies') and ``(G,)`` how many
        replies share them; groups in lexicographic order of their weights.
    """
    c, b = weights.shape
    if b == 0:
        return weights, torch.zeros(0, dtype=torch.int64, device=weights.device)
    uniq, counts = torch.unique(weights, dim=1, return_counts=True)  # lexicographic order
    if uniq.shape[1] == 1:
        return uniq, counts
    tol = weights.abs().amax(dim=1, keepdim=True) * 2.0 ** -GROUP_BITS
    new = torch.ones(uniq.shape[1], dtype=torch.bool, device=weights.device)
    new[1:] = ((uniq[:, 1:] - uniq[:, :-1]).abs() > tol).any(dim=0)  # near-equal neighbours
    group = new.cumsum(0) - 1
    n = int(group[-1]) + 1
    merged = torch.zeros(n, dtype=counts.dtype, device=weights.device).index_add_(0, group,
                                                                                  counts)
    sums = torch.zeros(c, n, dtype=weights.dtype, device=weights.device).index_add_(
        1, group, uniq * counts.to(weights.dtype))
    return sums / merged.to(weights.dtype), merged


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
        Source of the gamma and normal draws (float64).
    """
    alpha = counts.to(torch.float64)[None, :, None].expand(
        repeats, len(counts), num_params).contiguous()
    gamma = torch._standard_gamma(alpha, generator=generator)
    z = torch.randn(alpha.shape, generator=generator, dtype=torch.float64,
                    device=alpha.device)
    unit = gamma.sqrt_().mul_(z).to(groups.dtype)  # (K, G, P): sqrt(Gamma(n)) Z
    return torch.einsum("cg,kgp->ckp", groups, unit).contiguous()
