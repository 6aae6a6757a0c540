"""The twin's summed Laplace noise of a round: one draw per group of equal replies.

The twin uses a round's b Laplace replies only through their weighted sum
``sum_i w_ci L_i`` (column c, repeat, coordinate; ``L_i`` of unit variance, shared by the
columns of a repeat). Replies whose weights are equal in every column form a group g, and
``sum_{i in g} w_ci L_i = w_cg sum_{i in g} L_i``. A unit-variance Laplace variable is a normal
scale mixture, ``L = sqrt(W) Z`` with ``W ~ Exp(1)`` and ``Z ~ N(0, 1)`` independent, so a sum
of n i.i.d. ones is, given the W's, normal of variance ``sum_i W_i ~ Gamma(n, 1)``: exactly
``sqrt(G) Z`` with ``G ~ Gamma(n, 1)``. Each group costs one gamma and one normal draw per
coordinate instead of two uniforms per reply (:func:`unit_sums`): the same law (not the same
draws), and
N = 1,000 clients of equal budgets cost what one does (weights equal to :data:`GROUP_BITS`
bits: float32 rounding does not split a group).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["GROUP_BITS", "laplace_groups", "laplace_sum", "unit_sums"]


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
        Source of the gamma and normal draws (float32: :func:`unit_sums`).
    """
    unit = unit_sums(counts, repeats=repeats, num_params=num_params,
                     generator=generator).to(groups.dtype)  # (K, G, P): sqrt(Gamma(n)) Z
    return torch.einsum("cg,kgp->ckp", groups, unit).contiguous()


def unit_sums(counts: Tensor, *, repeats: int, num_params: int,
              generator: torch.Generator) -> Tensor:
    """``sqrt(G) Z`` with ``G ~ Gamma(n_g, 1)`` and ``Z ~ N(0, 1)`` independent, float32
    ``(K, G, P)``: the sum of ``n_g`` i.i.d. unit-variance Laplace variables per group g.

    ``G`` by Marsaglia and Tsang's method (every ``n_g >= 1``: ``d = n - 1/3``, ``c = 1 /
    sqrt(9 d)``, ``v = (1 + c x)^3`` for a normal ``x``, accepted where ``v > 0`` and ``log u <
    x^2 / 2 + d - d v + d log v`` for a uniform ``u``, which holds for about 95% or more of
    the draws; the rest are drawn again), vectorised over every draw, and ``Z`` in float32:
    torch's CPU gamma sampler draws one element at a time (the 152,670 draws of a 3-repeat
    round of a 50,890-parameter model: 2.5 ms here, 7.6 ms with torch's gamma and float64
    normals, on the 2-vCPU Xeon: ``python bench/noise.py --twin``).
    """
    out = torch.empty((len(counts), repeats, num_params), dtype=torch.float32,
                      device=counts.device)
    for g, n in enumerate(counts.tolist()):
        _gamma(out[g].view(-1), float(n), generator)
    z = torch.randn(out.shape, generator=generator, device=out.device)
    return out.sqrt_().mul_(z).transpose(0, 1)


def _gamma(out: Tensor, n: float, generator: torch.Generator) -> None:
    """Fill the flat ``out`` with ``Gamma(n, 1)`` draws, ``n >= 1`` (:func:`unit_sums`)."""
    d = n - 1.0 / 3.0
    c = (9.0 * d) ** -0.5
    todo: Tensor | None = None  # positions still to draw (None: all of them)
    while todo is None or todo.numel():
        size = out.numel() if todo is None else todo.numel()
        x = torch.randn(size, generator=generator, device=out.device)
        v = x.mul(c).add_(1.0).pow_(3)
        # log u < x^2 / 2 + d (1 - v + log v); v <= 0 gives NaN, which fails the test
        bound = v.log().sub_(v).add_(1.0).mul_(d).add_(x.square_().mul_(0.5))
        ok = torch.rand(size, generator=generator, device=out.device).log_() < bound
        ok &= v > 0
        v.mul_(d)
        if todo is None:
            out.copy_(v)
            todo = torch.nonzero(~ok).flatten()
        else:
            out[todo[ok]] = v[ok]
            todo = todo[~ok]
