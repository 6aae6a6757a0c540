"""The paper's Table I: the ratios it implies reproduce it through fedqr's own planner."""

from __future__ import annotations

import pytest

from fedqr.theory import ProblemConstants, Rounding, table_one
from fedqr.theory.paper import PAPER_TABLE_ONE_MNIST, BoundRatios, implied_ratios, laplace_ratios


def constants_with_ratios(r: BoundRatios, *, N: int = 10, d: int = 60000) -> ProblemConstants:
    """Constants (mu = 1, Gamma = 0) whose Theorem 3 ratios are ``r`` (eps = 1)."""
    p, xi = 7840, 300.0
    k = 32.0 * p * xi**2 / d**2  # C2 eps^2 with mu = 1 and every client at eps
    g2 = r.a * k * (N - 1) / (8.0 * N)  # C1 = 8 N G^2 / (N - 1)
    y0 = (r.c * k + 8.0 * g2 / (N - 1)) / r.gamma  # C3 = gamma Y0 - 8 G^2 / (N - 1)
    return ProblemConstants.uniform(N=N, d=d, p=p, mu=1.0, lam=r.gamma / 2.0, G=g2**0.5,
                                    Gamma=0.0, Y0=y0, xi=xi, eps=1.0)


def test_ratios_roundtrip_through_constants() -> None:
    r = BoundRatios(gamma=3.0, a=400.0, c=-20.0)
    back = laplace_ratios(constants_with_ratios(r))
    assert (back.gamma, back.a, back.c) == pytest.approx((3.0, 400.0, -20.0), rel=1e-9)


def test_implied_ratios_reproduce_the_published_table() -> None:
    r = implied_ratios()
    assert 2.0 <= r.gamma < 3.0  # gamma = 2 lambda / mu >= 2: the paper's lambda is ~ mu
    rows = table_one(constants_with_ratios(r), list(PAPER_TABLE_ONE_MNIST),
                     rounding=Rounding.PAPER)
    for row, (eps, paper) in zip(rows, PAPER_TABLE_ONE_MNIST.items(), strict=True):
        assert row["eps"] == eps
        assert row["T_star_fix_b"] == {5: paper["T_b5"], 10: paper["T_b10"]}
        assert row["b_star_fix_T"] == {50: paper["b_T50"]}
        assert (row["joint"]["T"], row["joint"]["b"]) == (paper["T_joint"], 1)


def test_a_different_table_gives_different_ratios() -> None:
    shifted = {e: {**row, "T_b5": row["T_b5"] * 2} for e, row in PAPER_TABLE_ONE_MNIST.items()}
    a, b = implied_ratios(shifted), implied_ratios()
    assert (a.gamma, a.a, a.c) != pytest.approx((b.gamma, b.a, b.c), rel=0.05)


def test_implied_ratios_reproduce_the_published_femnist_row() -> None:
    from fedqr.theory.paper import PAPER_TABLE_ONE_FEMNIST

    r = implied_ratios(PAPER_TABLE_ONE_FEMNIST)
    assert 2.0 <= r.gamma < 6.0
    rows = table_one(constants_with_ratios(r, d=57180), list(PAPER_TABLE_ONE_FEMNIST),
                     rounding=Rounding.PAPER)
    for row, (eps, paper) in zip(rows, PAPER_TABLE_ONE_FEMNIST.items(), strict=True):
        assert row["eps"] == eps
        assert row["T_star_fix_b"] == {5: paper["T_b5"], 10: paper["T_b10"]}
        assert row["b_star_fix_T"] == {50: paper["b_T50"]}
        assert (row["joint"]["T"], row["joint"]["b"]) == (paper["T_joint"], 1)
