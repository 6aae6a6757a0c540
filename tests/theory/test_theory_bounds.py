"""Closed forms of the Laplace planner against brute force, rounding modes, JSON, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedqr.theory.bounds import (
    aggregated_noise_variance,
    gaussian_bound,
    gaussian_bound_paper,
    laplace_bound,
    laplace_c3,
    paper_noise_constant,
)
from fedqr.theory.constants import ProblemConstants, constants_from_json, constants_to_json
from fedqr.theory.planner import (
    Rounding,
    b_star,
    b_star_int,
    joint_optimum,
    joint_optimum_int,
    laplace_acs,
    plan_laplace,
    t_star,
    t_star_int,
    table_one,
)

T_FINE = np.linspace(0.0, 400.0, 400_001)  # step 1e-3


@st.composite
def constants(draw: st.DrawFn) -> ProblemConstants:
    n = draw(st.integers(2, 12))
    mu = draw(st.floats(0.05, 2.0))
    return ProblemConstants.uniform(
        N=n,
        d=n * draw(st.integers(50, 5000)),
        p=draw(st.integers(10, 8000)),
        mu=mu,
        lam=mu * draw(st.floats(1.0, 5.0)),
        G=draw(st.floats(0.1, 20.0)),
        Gamma=draw(st.floats(0.0, 3.0)),
        Y0=draw(st.floats(0.0, 50.0)),
        xi=draw(st.floats(1.0, 300.0)),
        eps=draw(st.floats(0.5, 20.0)),
    )


def _t_in_range(c: ProblemConstants, b: float) -> bool:
    return t_star(c, b=b) < T_FINE[-1] * 0.9


@settings(max_examples=40, deadline=None)
@given(constants(), st.floats(0.0, 1.0))
def test_t_star_is_grid_minimum(c: ProblemConstants, frac: float) -> None:
    b = 1.0 + frac * (c.N - 1)
    if not _t_in_range(c, b):
        return
    u = laplace_bound(c, T=T_FINE, b=b)
    t_brute = T_FINE[int(np.argmin(u))]
    assert t_star(c, b=b) == pytest.approx(t_brute, abs=2e-3)
    assert float(laplace_bound(c, T=t_star(c, b=b), b=b)) <= u.min() + 1e-12 * abs(u.min())


@settings(max_examples=40, deadline=None)
@given(constants(), st.floats(0.01, 300.0))
def test_b_star_is_grid_minimum(c: ProblemConstants, t: float) -> None:
    bs = np.linspace(1.0, c.N, 100_001)
    u = laplace_bound(c, T=t, b=bs)
    assert b_star(c, T=t) == pytest.approx(bs[int(np.argmin(u))], abs=2 * (c.N - 1) / 100_000)


@settings(max_examples=40, deadline=None)
@given(constants())
def test_kkt_joint_equals_brute_force(c: ProblemConstants) -> None:
    if not all(_t_in_range(c, b) for b in (1.0, float(c.N))):
        return
    bs = np.arange(1, c.N + 1, dtype=np.float64)
    u = laplace_bound(c, T=T_FINE[:, None], b=bs[None, :])
    opt = joint_optimum(c)
    assert opt.U <= u.min() + 1e-9 * max(1.0, abs(u.min()))
    # the grid's minimum, refined 1000x finer around it (a small T* is steep on a 1e-3 grid)
    i, j = np.unravel_index(int(np.argmin(u)), u.shape)
    t_near = np.linspace(max(0.0, T_FINE[i] - 1e-3), T_FINE[i] + 1e-3, 2_001)
    fine = float(laplace_bound(c, T=t_near, b=np.full_like(t_near, bs[j])).min())
    assert opt.U <= fine + 1e-9 * max(1.0, abs(fine))
    assert opt.U == pytest.approx(fine, rel=1e-6, abs=1e-9)
    assert opt.b in (1.0, float(c.N))
    acs = laplace_acs(c)
    assert acs.U == pytest.approx(opt.U, rel=1e-9, abs=1e-12)
    # integer optimum is the exact integer minimum
    ti = np.arange(0, math.ceil(max(t_star(c, b=b) for b in bs)) + 2, dtype=np.float64)
    ui = laplace_bound(c, T=ti[:, None], b=bs[None, :])
    assert joint_optimum_int(c).U == pytest.approx(ui.min(), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(constants(), st.integers(1, 200))
def test_rounding_modes(c: ProblemConstants, t: int) -> None:
    for b in {1, c.N}:
        ts = t_star(c, b=b)
        assert t_star_int(c, b=b, rounding=Rounding.PAPER) == math.floor(ts)
        best = t_star_int(c, b=b, rounding=Rounding.BEST)
        assert best in (math.floor(ts), math.ceil(ts))
        paper = math.floor(ts)
        assert laplace_bound(c, T=best, b=b) <= laplace_bound(c, T=paper, b=b)
    bp = b_star_int(c, T=t, rounding=Rounding.PAPER)
    assert bp == min(math.ceil(b_star(c, T=t)), c.N)
    bb = b_star_int(c, T=t, rounding=Rounding.BEST)
    assert laplace_bound(c, T=t, b=bb) <= laplace_bound(c, T=t, b=bp)
    jb, jp = joint_optimum_int(c), joint_optimum_int(c, rounding=Rounding.PAPER)
    assert jb.U <= jp.U


def test_negative_c3_and_empty_root_give_t_zero() -> None:
    c = ProblemConstants.uniform(
        N=10, d=100, p=1000, mu=1.0, lam=1.0, G=10.0, Gamma=0.0, Y0=0.0, xi=1.0, eps=1.0
    )
    assert laplace_c3(c) < 0
    assert t_star(c, b=10.0) == 0.0  # C1/N + C3 < 0: U increases in T
    assert joint_optimum_int(c).T == 0.0


def test_gaussian_paper_form_matches_calibrated_form_with_paper_sigma() -> None:
    c = ProblemConstants.uniform(
        N=10, d=60000, p=7840, mu=0.5, lam=2.0, G=3.0, Gamma=0.2, Y0=4.0, xi=10.0, eps=0.5,
        delta=1e-5, q=0.01, Lambda2=2.0,
    )  # fmt: skip
    t, b, c2 = np.arange(0, 50.0), 4, 1.3
    k = paper_noise_constant(c, c2=c2)
    # paper's sigma_i^2 = c2^2 xi^2 (bT/N) log(1/delta) / (d_i^2 eps^2)
    d_i = np.asarray(c.d_i, dtype=np.float64)
    sig2 = c2**2 * c.xi**2 * (b * t[:, None] / c.N) * math.log(1e5) / (d_i**2 * 0.25)
    v = aggregated_noise_variance(c, b=b, sigma_i=np.sqrt(sig2))
    np.testing.assert_allclose(v, t * k, rtol=1e-12)
    np.testing.assert_allclose(
        gaussian_bound(c, T=t, b=b, noise_variance=v),
        gaussian_bound_paper(c, T=t, b=b, c2=c2),
        rtol=1e-10,
    )


def test_plan_laplace_spends_budget_and_json_roundtrip() -> None:
    c = ProblemConstants.uniform(
        N=10, d=60000, p=7840, mu=1.0, lam=1.0, G=20.0, Gamma=0.1, Y0=10.0, xi=30.0, eps=5.0
    )
    plan = plan_laplace(c)
    assert plan.T > 0
    assert sum(plan.replies) == plan.b * plan.T
    for spent, r in zip(plan.eps_spent, plan.replies, strict=True):
        assert spent == pytest.approx(5.0 if r else 0.0, rel=1e-9)
    assert plan.grid_U.shape == (plan.grid_T.size, plan.grid_b.size)
    assert constants_from_json(constants_to_json(c)) == c
    rows = table_one(c, [1.0, 5.0, 10.0], rounding=Rounding.PAPER)
    assert [r["T_star_fix_b"][5] for r in rows] == sorted(r["T_star_fix_b"][5] for r in rows)


def test_bad_input_names_parameter() -> None:
    with pytest.raises(ValueError, match="mu must be > 0"):
        ProblemConstants.uniform(
            N=2, d=10, p=1, mu=-1.0, lam=1.0, G=1, Gamma=0, Y0=0, xi=1.0, eps=1.0
        )
    c = ProblemConstants.uniform(N=2, d=10, p=1, mu=1.0, lam=1.0, G=1, Gamma=0, Y0=0, xi=1, eps=1)
    with pytest.raises(ValueError, match=r"b must be in \[1, N=2\]"):
        t_star(c, b=3.0)
    with pytest.raises(ValueError, match="T must be >= 0"):
        laplace_bound(c, T=-1.0, b=1.0)
    with pytest.raises(ValueError, match="eps_i"):
        constants_from_json('{"N": 2, "d": 10, "p": 1, "mu": 1, "lambda": 1, "G": 1, '
                            '"Gamma": 0, "Y0": 0, "xi": 1}')  # fmt: skip


def test_constants_whose_gamma_would_overflow_the_bounds_are_refused() -> None:
    """lam = 1e308 used to reach the integer optimum as NaN ("T must be >= 0 and finite, got
    T=array()"); the constants now say which of them is out of range."""

    base = dict(N=4, d=400, p=10, mu=0.01, G=1.0, Gamma=0.1, Y0=1.0, xi=1.0, eps=1.0)
    with pytest.raises(ValueError, match=r"lam / mu must be at most 5e\+149 .* got lam=1e\+308"):
        ProblemConstants.uniform(**base, lam=1e308)
    assert ProblemConstants.uniform(**base, lam=1e100).gamma == pytest.approx(2e102)
