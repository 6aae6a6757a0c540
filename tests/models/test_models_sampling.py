"""The Poisson sampler of local batches: the law the Gaussian mechanism's accounting assumes.

dp-accounting composes a Poisson-subsampled Gaussian: every row joins a batch independently
with probability q. These tests check that law statistically (each row's rate, the batch size
distribution, the independence of neighbouring rows, which a geometric-gap sampler could
break) and the layout the passes rely on, with fixed seeds (deterministic) and p-value
thresholds of 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from fedqr.models.sampling import poisson_positions

DRAWS = 4000


def _inclusion(size: int, q: float, *, draws: int = DRAWS, seed: int = 0) -> np.ndarray:
    """``(draws, size)`` booleans: whether row j joined draw i's batch."""
    gen = torch.Generator().manual_seed(seed)
    pos, valid = poisson_positions(torch.full((draws,), size, dtype=torch.int64),
                                   sample_rate=q, generator=gen)
    out = np.zeros((draws, size), dtype=bool)
    rows, cols = np.nonzero(valid.numpy())
    out[rows, pos.numpy()[rows, cols]] = True
    return out


@pytest.mark.parametrize(("size", "q"), [(40, 0.1), (25, 0.5), (300, 0.01)])
def test_every_row_joins_with_probability_q(size: int, q: float) -> None:
    inc = _inclusion(size, q)
    counts = inc.sum(axis=0)
    # the total is Binomial(draws * size, q), each row's count Binomial(draws, q)
    total = stats.binomtest(int(counts.sum()), DRAWS * size, q)
    assert total.pvalue > 1e-4, (counts.sum(), DRAWS * size * q)
    expected = np.full(size, counts.sum() / size)
    assert stats.chisquare(counts, expected).pvalue > 1e-4  # no row favoured (first, last)


def test_batch_size_is_binomial() -> None:
    size, q = 30, 0.2
    sizes = _inclusion(size, q).sum(axis=1)
    k = np.arange(size + 1)
    expected = DRAWS * stats.binom.pmf(k, size, q)
    keep = expected >= 5  # pool the sparse tails into their neighbours' cells
    observed = np.bincount(sizes, minlength=size + 1).astype(float)
    obs = np.concatenate([[observed[k < k[keep][0]].sum()], observed[keep][1:-1],
                          [observed[k > k[keep][-2]].sum()]])
    exp = np.concatenate([[expected[k < k[keep][0]].sum()], expected[keep][1:-1],
                          [expected[k > k[keep][-2]].sum()]])
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-4


def test_neighbouring_rows_are_independent() -> None:
    inc = _inclusion(20, 0.3, draws=8000)
    for j in (0, 7, 18):  # a row and the next: the pair the gaps of one process link
        a, b = inc[:, j], inc[:, j + 1]
        table = np.array([[np.sum(a & b), np.sum(a & ~b)], [np.sum(~a & b), np.sum(~a & ~b)]])
        assert stats.chi2_contingency(table).pvalue > 1e-4, (j, table)


def test_layout_valid_first_sorted_unique_and_padded_with_zeros() -> None:
    gen = torch.Generator().manual_seed(3)
    sizes = torch.tensor([[0, 5, 200], [1, 50, 3]])
    pos, valid = poisson_positions(sizes, sample_rate=0.3, generator=gen)
    assert pos.shape == valid.shape and pos.shape[:2] == sizes.shape
    assert int(valid.sum(dim=-1).max()) == pos.shape[-1]  # m is the largest batch drawn
    for p, v, d in zip(pos.reshape(-1, pos.shape[-1]), valid.reshape(-1, pos.shape[-1]),
                       sizes.reshape(-1), strict=True):
        n = int(v.sum())
        assert bool(v[:n].all()) and not bool(v[n:].any())  # valid positions come first
        chosen = p[:n]
        assert bool((chosen[1:] > chosen[:-1]).all())  # increasing: no row twice
        assert bool(((chosen >= 0) & (chosen < d)).all())
        assert bool((p[n:] == 0).all())
    assert int(valid[0, 0].sum()) == 0  # a client without rows has an empty batch


def test_rate_one_takes_every_row_and_draws_are_reproducible() -> None:
    sizes = torch.tensor([4, 7])
    pos, valid = poisson_positions(sizes, sample_rate=1.0, generator=torch.Generator())
    assert valid.sum(dim=-1).tolist() == [4, 7]
    assert pos[1].tolist() == list(range(7)) and pos[0, :4].tolist() == list(range(4))
    a = poisson_positions(sizes * 10, sample_rate=0.2,
                          generator=torch.Generator().manual_seed(11))
    b = poisson_positions(sizes * 10, sample_rate=0.2,
                          generator=torch.Generator().manual_seed(11))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
