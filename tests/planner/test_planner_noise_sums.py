"""The twin's grouped Laplace sums have the law of the replies' weighted sum."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from fedqr.planner.noise_sums import laplace_groups, laplace_sum
from fedqr.privacy import sample_laplace


def test_groups_are_the_replies_equal_in_every_column() -> None:
    w = torch.tensor([[1.0, 2.0, 1.0, 1.0], [3.0, 3.0, 3.0, 4.0]])
    groups, counts = laplace_groups(w)
    pairs = sorted(zip(map(tuple, groups.T.tolist()), counts.tolist(), strict=True))
    assert pairs == [((1.0, 3.0), 2), ((1.0, 4.0), 1), ((2.0, 3.0), 1)]
    total = (groups * counts).sum(dim=1)  # every reply is in exactly one group
    torch.testing.assert_close(total, w.sum(dim=1))


def test_rounding_does_not_split_a_group() -> None:
    """Equal budgets give equal weights up to float32 rounding: one group, the mean weight;
    weights a thousandth apart stay apart."""
    w = torch.tensor([[0.3, 0.3 * (1 + 2e-7), 0.3 * (1 - 1e-7), 0.3 * (1 + 1e-3)]])
    groups, counts = laplace_groups(w)
    assert counts.tolist() == [3, 1]
    assert groups[0, 0].item() == pytest.approx(0.3, rel=1e-6)
    assert groups[0, 1].item() == pytest.approx(0.3 * (1 + 1e-3), rel=1e-7)
    zero, n = laplace_groups(torch.zeros(2, 3))  # no noise: one group of weight 0
    assert n.tolist() == [3] and not zero.any()


@pytest.mark.parametrize("n", [1, 3, 40])
def test_sum_of_n_unit_laplace_has_their_law(n: int) -> None:
    """Two-sample KS against n unit-variance Laplace draws summed directly."""
    gen = torch.Generator().manual_seed(n)
    groups, counts = laplace_groups(torch.full((1, n), 0.7))
    got = laplace_sum(groups, counts, repeats=2, num_params=20_000, generator=gen)
    assert got.is_contiguous()  # the twin views it in place
    got = got.double().flatten().numpy()
    direct = (0.7 * sample_laplace(torch.tensor(2 ** -0.5, dtype=torch.float64),
                                   (40_000, n), generator=gen).sum(dim=1)).numpy()
    assert stats.ks_2samp(got, direct).pvalue > 1e-3
    assert got.var() == pytest.approx(0.49 * n, rel=0.04)
    kurt = stats.kurtosis(got)  # excess kurtosis of the sum: 3 / n
    assert kurt == pytest.approx(3 / n, abs=0.25 if n == 1 else 0.12)


def test_columns_scale_one_shared_draw_per_group() -> None:
    """Column c's noise is sum_g w_cg S_g with the same S_g in every column (common random
    numbers): two columns of proportional weights give proportional noise."""
    w = torch.tensor([[1.0, 1.0, 2.0], [3.0, 3.0, 6.0]])
    groups, counts = laplace_groups(w)
    noise = laplace_sum(groups, counts, repeats=3, num_params=50,
                        generator=torch.Generator().manual_seed(1))
    assert noise.shape == (2, 3, 50) and noise.is_contiguous()
    np.testing.assert_allclose(noise[1].numpy(), 3 * noise[0].numpy(), rtol=1e-5,
                               atol=1e-6 * float(noise.abs().max()))  # float32 sums' rounding
    var = laplace_sum(groups, counts, repeats=4, num_params=50_000,
                      generator=torch.Generator().manual_seed(2))[0].double().var().item()
    assert var == pytest.approx(1 + 1 + 4, rel=0.03)


def test_unit_sums_of_several_groups_have_each_its_law() -> None:
    """One call for groups of 1, 4 and 30 replies (Marsaglia and Tsang's gamma, drawn again
    where rejected): each group's sums have variance n and excess kurtosis 3 / n, and the
    4-reply group passes a KS test against 4 unit Laplace draws summed directly."""
    from fedqr.planner.noise_sums import unit_sums

    gen = torch.Generator().manual_seed(11)
    got = unit_sums(torch.tensor([1, 4, 30]), repeats=2, num_params=30_000, generator=gen)
    assert got.shape == (2, 3, 30_000) and got.dtype == torch.float32
    for g, n in enumerate((1, 4, 30)):
        x = got[:, g].double().flatten().numpy()
        assert x.mean() == pytest.approx(0.0, abs=4 * np.sqrt(n / x.size))
        assert x.var() == pytest.approx(n, rel=0.04)
        assert stats.kurtosis(x) == pytest.approx(3 / n, abs=0.25 if n == 1 else 0.12)
    direct = sample_laplace(torch.tensor(2 ** -0.5, dtype=torch.float64), (60_000, 4),
                            generator=gen).sum(dim=1).numpy()
    assert stats.ks_2samp(got[:, 1].double().flatten().numpy(), direct).pvalue > 1e-3
