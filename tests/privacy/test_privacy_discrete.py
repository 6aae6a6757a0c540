"""The discrete Laplace mechanism: calibration against the PLD accountant, exact sampler."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from scipy import stats

from fedqr.privacy import Accountant, Mechanism, make_accountant, mechanism_for
from fedqr.privacy.discrete import SecureIntegers, SeededIntegers, sample_discrete_laplace

MECH = mechanism_for(Mechanism.DISCRETE_LAPLACE)


def _eps(event: dp_event.DpEvent, replies: int, delta: float) -> float:
    acct = make_accountant(Accountant.PLD)
    return float(acct.compose(dp_event.SelfComposedDpEvent(event, replies)).get_epsilon(delta))


@pytest.mark.parametrize(("replies", "eps"), [(3, 1.0), (20, 2.0)])
def test_calibration_meets_the_budget_and_is_the_smallest_integer_scale(
        replies: int, eps: float) -> None:
    cal = MECH.calibrate(replies=replies, eps=eps, delta=1e-5, clip=10.0, sample_rate=1.0,
                         size=100, accountant=Accountant.PLD, num_params=50)
    assert cal.event is not None and cal.param == int(cal.param)
    assert _eps(cal.event, replies, 1e-5) <= eps
    looser = MECH.event(param=cal.param - 1, clip=10.0, sample_rate=1.0, size=100,
                        num_params=50)
    assert looser is not None and _eps(looser, replies, 1e-5) > eps


def test_an_eps_below_the_pld_grid_is_refused_naming_eps() -> None:
    """At eps 1e-6 no scale meets the budget on the 1e-3 privacy-loss grid: a ValueError that
    names eps, not dp-accounting's bracketing error; a small eps the grid resolves still
    calibrates within budget."""
    with pytest.raises(ValueError, match=r"eps must be large enough for the pld accountant.*"
                                         r"got eps=1e-06"):
        MECH.calibrate(replies=1, eps=1e-6, delta=1e-5, clip=5.0, sample_rate=1.0, size=100,
                       accountant=Accountant.PLD, num_params=12)
    cal = MECH.calibrate(replies=1, eps=0.01, delta=1e-5, clip=5.0, sample_rate=1.0,
                         size=100, accountant=Accountant.PLD, num_params=12)
    assert cal.event is not None and _eps(cal.event, 1, 1e-5) <= 0.01


def test_calibration_needs_the_reply_dimension() -> None:
    with pytest.raises(ValueError, match="num_params"):
        MECH.calibrate(replies=1, eps=1.0, delta=1e-5, clip=1.0, sample_rate=1.0, size=10,
                       accountant=Accountant.PLD)


@pytest.mark.parametrize("t", [1, 4])
def test_sampler_matches_the_discrete_laplace_pmf(t: int) -> None:
    """Chi-square goodness of fit (fixed seed) and the variance 2e^{-1/t} / (1 - e^{-1/t})^2."""
    z = sample_discrete_laplace(np.full(200_000, t), source=SeededIntegers(
        np.random.default_rng(7)))
    assert z.dtype == np.int64
    k = np.arange(-6 * t, 6 * t + 1)
    pmf = np.exp(-np.abs(k) / t) * np.tanh(1 / (2 * t))
    observed = np.array([(z == v).sum() for v in k] + [(np.abs(z) > 6 * t).sum()])
    expected = np.append(pmf, 1 - pmf.sum()) * z.size
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    var = 2 * math.exp(-1 / t) / (1 - math.exp(-1 / t)) ** 2
    se = var * math.sqrt(2 / z.size) * 3  # generous: heavier-than-normal tails
    assert abs(z.var() - var) < 5 * se
    assert abs(z.mean()) < 5 * math.sqrt(var / z.size)


def test_secure_source_is_uniform_and_drives_the_sampler() -> None:
    u = SecureIntegers().below(np.full(60_000, 6))
    assert u.min() >= 0 and u.max() <= 5
    assert stats.chisquare(np.bincount(u, minlength=6)).pvalue > 1e-6
    z = sample_discrete_laplace(np.full(50_000, 3), source=SecureIntegers())
    var = 2 * math.exp(-1 / 3) / (1 - math.exp(-1 / 3)) ** 2
    assert abs(z.var() / var - 1) < 0.1


def test_release_is_the_grid_times_an_integer_vector_plus_decay() -> None:
    cal = MECH.calibrate(replies=4, eps=1.0, delta=1e-5, clip=5.0, sample_rate=1.0, size=40,
                         accountant=Accountant.PLD, num_params=30)
    std = torch.full((2,), cal.std, dtype=torch.float32)
    param = torch.full((2,), cal.param, dtype=torch.float64)
    noise = MECH.draw(std=std, param=param, shape=(2, 30),
                      generator=torch.Generator().manual_seed(0))
    assert torch.equal(noise, noise.round())
    g = torch.randn(2, 30)
    decay = torch.full((2, 30), 0.25)
    out = MECH.release(g_data=g, decay=decay, noise=noise, std=std, param=param)
    a = 1 / cal.param
    gamma = cal.std / (math.sqrt(2 * math.exp(-a)) / -math.expm1(-a))
    units = (out.double() - 0.25) / gamma
    assert torch.allclose(units, units.round(), atol=1e-3)


def test_config_refuses_sampling_and_coerces_its_name() -> None:
    from fedqr.sim.config import PrivacyConfig

    assert PrivacyConfig(mechanism="discrete-laplace", sample_rate=1.0,  # type: ignore[arg-type]
                         clip=1.0).mechanism is Mechanism.DISCRETE_LAPLACE
    with pytest.raises(ValueError, match="q = 1"):
        PrivacyConfig(mechanism=Mechanism.DISCRETE_LAPLACE, sample_rate=0.5, clip=1.0)
    with pytest.raises(ValueError, match="mechanism must be one of"):
        PrivacyConfig(mechanism="lapalce", sample_rate=1.0)  # type: ignore[arg-type]
