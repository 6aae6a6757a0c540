"""Noise samplers and noise scales of fedqr.privacy.mechanisms.

Statistical tolerances come from the asymptotic standard errors (SE) of the estimators on
``n`` i.i.d. draws standardised to unit variance (delta method, symmetric distributions):

- mean: SE = 1 / sqrt(n);
- relative variance: SE = sqrt((mu4 - 1) / n), i.e. sqrt(5 / n) Laplace, sqrt(2 / n) Gauss;
- excess kurtosis: SE = sqrt((mu8 - mu4^2 - 4 mu4 (mu6 - mu4) + 4 mu4^2 (mu4 - 1)) / n),
  which is sqrt(1188 / n) for Laplace (mu4, mu6, mu8 = 6, 90, 2520) and sqrt(24 / n) for
  the Gaussian (3, 15, 105).

With n = 2^21 (about 2.1e6): Laplace kurtosis SE = 0.024 (tolerance 0.15, about 6 SE),
Gaussian kurtosis SE = 0.0034 (tolerance 0.025, about 7 SE), variance SE <= 0.16 %
(tolerance 2 %, > 10 SE). Seeds are fixed, so the tests are deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from fedqr.privacy import (
    Mechanism,
    Neighbours,
    PaperBound,
    ReplyStats,
    gaussian_event,
    gaussian_std,
    laplace_event,
    laplace_scale,
    mechanism_for,
    sample_gaussian,
    sample_laplace,
)

Sampler = Callable[..., torch.Tensor]
N_CLIENTS, P = 4, 1 << 19  # 2^21 draws in all
SCALES = [0.5, 1.0, 2.0, 7.5]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _pooled_moments(x: torch.Tensor) -> tuple[float, float, float, int]:
    """Mean, variance and excess kurtosis of the flattened float64 sample."""
    x = x.flatten().to(torch.float64)
    n = x.numel()
    c = x - x.mean()
    m2 = float((c * c).mean())
    m4 = float((c**4).mean())
    return float(x.mean()), m2, m4 / m2**2 - 3.0, n


def _noise(kind: Mechanism, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    scale = torch.tensor(SCALES, dtype=torch.float64).reshape(N_CLIENTS, 1)
    if kind is Mechanism.LAPLACE:
        return sample_laplace(scale, (N_CLIENTS, P), generator=_gen(seed)), scale * math.sqrt(2)
    return sample_gaussian(scale, (N_CLIENTS, P), generator=_gen(seed)), scale


@pytest.mark.parametrize(
    ("kind", "kurt", "kurt_tol"), [(Mechanism.LAPLACE, 3.0, 0.15), (Mechanism.GAUSSIAN, 0.0, 0.025)]
)
def test_noise_moments(kind: Mechanism, kurt: float, kurt_tol: float) -> None:
    x, std = _noise(kind, seed=1234)
    assert x.shape == (N_CLIENTS, P) and x.dtype == torch.float64
    assert torch.isfinite(x).all()
    # per-client variance: 2 b^2 (Laplace) or sigma^2 (Gaussian), broadcasting (b,1)->(b,p)
    var_rows = x.var(dim=1)
    torch.testing.assert_close(var_rows, (std**2).flatten(), rtol=0.02, atol=0.0)
    mean, var, excess_kurtosis, n = _pooled_moments(x / std)
    assert abs(mean) < 5.0 / math.sqrt(n)
    assert var == pytest.approx(1.0, rel=0.02)
    assert excess_kurtosis == pytest.approx(kurt, abs=kurt_tol)


@pytest.mark.parametrize("sampler", [sample_laplace, sample_gaussian])
def test_same_seed_same_draws_different_seed_different(sampler: Sampler) -> None:
    scale = torch.full((3, 1), 2.0)
    a = sampler(scale, (3, 1000), generator=_gen(7))
    b = sampler(scale, (3, 1000), generator=_gen(7))
    c = sampler(scale, (3, 1000), generator=_gen(8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert a.dtype == torch.float32


@pytest.mark.parametrize("sampler", [sample_laplace, sample_gaussian])
def test_zero_scale_rows_are_zero_and_scalar_broadcasts(sampler: Sampler) -> None:
    scale = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    x = sampler(scale, (2, 50), generator=_gen(0))
    assert torch.equal(x[0], torch.zeros(50, dtype=torch.float64))
    assert (x[1] != 0).any()
    y = sampler(torch.tensor(3.0), (5, 6, 7), generator=_gen(0))
    assert y.shape == (5, 6, 7)


def test_laplace_std_is_sqrt2_scale_in_float32() -> None:
    x = sample_laplace(torch.tensor([[3.0]]), (1, 1 << 20), generator=_gen(3))
    assert x.dtype == torch.float32
    assert float(x.double().std()) == pytest.approx(3.0 * math.sqrt(2), rel=0.02)


@pytest.mark.parametrize("sampler", [sample_laplace, sample_gaussian])
def test_sampler_bad_inputs(sampler: Sampler) -> None:
    name = "scale" if sampler is sample_laplace else "std"
    with pytest.raises(ValueError, match=f"{name} must broadcast to shape"):
        sampler(torch.ones(3, 1), (2, 5), generator=_gen(0))
    with pytest.raises(ValueError, match=f"{name} must broadcast to shape"):
        sampler(torch.ones(2, 5), (5,), generator=_gen(0))
    with pytest.raises(ValueError, match=f"{name} must be a floating-point torch.Tensor"):
        sampler(torch.ones(2, 1, dtype=torch.int64), (2, 5), generator=_gen(0))
    with pytest.raises(ValueError, match=f"{name} must be a floating-point torch.Tensor"):
        sampler(1.0, (2, 5), generator=_gen(0))
    with pytest.raises(ValueError, match="shape must be a tuple of integers >= 0"):
        sampler(torch.ones(1), (2, -1), generator=_gen(0))


def test_laplace_scale_matches_theorem_1() -> None:
    # b = 2 R xi / (d eps): R = 50 replies, xi = 300, d = 6000, eps = 1 -> b = 5
    assert laplace_scale(replies=50, clip=300.0, num_samples=6000, eps=1.0) == pytest.approx(5.0)
    assert laplace_scale(replies=0, clip=300.0, num_samples=6000, eps=1.0) == 0.0


def test_gaussian_std_formula() -> None:
    # z xi / (q d) = 1.08 * 10 / (0.01 * 6000)
    std = gaussian_std(noise_multiplier=1.08, clip=10.0, sample_rate=0.01, num_samples=6000)
    assert std == pytest.approx(0.18)
    assert gaussian_std(noise_multiplier=0.0, clip=1.0, sample_rate=1.0, num_samples=1) == 0.0


def test_events() -> None:
    ev = laplace_event(scale=5.0, clip=300.0, num_samples=6000)
    assert ev.noise_multiplier == pytest.approx(50.0)  # 5 / (2 * 300 / 6000)
    g = gaussian_event(noise_multiplier=1.5, sample_rate=0.01)
    assert g.sampling_probability == 0.01 and g.event.noise_multiplier == 1.5
    plain = gaussian_event(noise_multiplier=1.5, sample_rate=1.0)
    assert type(plain).__name__ == "GaussianDpEvent"
    assert hash(g) == hash(gaussian_event(noise_multiplier=1.5, sample_rate=0.01))


def test_mechanism_enum() -> None:
    assert Mechanism("laplace") is Mechanism.LAPLACE
    assert [m.value for m in Mechanism] == ["laplace", "gaussian", "none", "discrete-laplace"]


def test_mechanism_objects_answer_what_layers_above_ask() -> None:
    """Neighbouring relation, the paper's bound and the continuous noise of each mechanism
    agree with its sampling: replace-one exactly when every row is used and ``sum / d_i``."""
    want = {Mechanism.LAPLACE: (PaperBound.THEOREM_3, Mechanism.LAPLACE),
            Mechanism.GAUSSIAN: (PaperBound.THEOREM_4, Mechanism.GAUSSIAN),
            Mechanism.NONE: (None, Mechanism.GAUSSIAN),
            Mechanism.DISCRETE_LAPLACE: (None, Mechanism.LAPLACE)}
    for m, (bound, continuous) in want.items():
        spec = mechanism_for(m)
        assert (spec.bound, spec.continuous) == (bound, continuous)
        replace_one = spec.batch_rate(0.25) == 1.0 and spec.denominator_rate(0.25) == 1.0
        assert (spec.neighbours is Neighbours.REPLACE_ONE) == replace_one
        assert mechanism_for(spec.continuous).norm is spec.norm


def test_reply_stats() -> None:
    s = ReplyStats(noise_std=0.5, clipped_fraction=0.25, snr=math.inf)
    assert s.snr == math.inf
    with pytest.raises(AttributeError):
        s.snr = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"clipped_fraction must be in \[0, 1\]"):
        ReplyStats(noise_std=0.5, clipped_fraction=1.5, snr=1.0)
    with pytest.raises(ValueError, match="noise_std must be >= 0 and finite"):
        ReplyStats(noise_std=-1.0, clipped_fraction=0.5, snr=1.0)
    with pytest.raises(ValueError, match="snr must be >= 0"):
        ReplyStats(noise_std=1.0, clipped_fraction=0.5, snr=math.nan)


def test_summed_gaussian_noise_has_the_law_of_the_weighted_sum_of_replies_noise() -> None:
    """``draw_sum``: one draw of sum_j w_j N(0, s_j^2) per coordinate against the weighted sum
    of per-reply draws: the same variance (2% at about 10 SE, as above) and Gaussian kurtosis;
    the summed std is rounded up, never down, to float32."""
    spec = mechanism_for(Mechanism.GAUSSIAN)
    w = torch.tensor([[0.1, 0.25, 0.3, 0.35], [0.7, 0.1, 0.1, 0.1]])
    s = torch.tensor([[0.5, 1.0, 2.0, 7.5], [3.0, 0.2, 0.0, 1.0]])
    summed = spec.draw_sum(weights=w, std=s, num_params=P, generator=_gen(7))
    per_reply = (w.unsqueeze(-1).double() * spec.draw(
        std=s, param=torch.zeros_like(s), shape=(2, 4, P), generator=_gen(8)).double()).sum(1)
    want = (w.double() ** 2 * s.double() ** 2).sum(dim=1)
    for x in (summed.double(), per_reply):
        torch.testing.assert_close(x.var(dim=1), want, rtol=0.02, atol=0.0)
        _, var, excess_kurtosis, _ = _pooled_moments(x / want.sqrt().unsqueeze(-1))
        assert var == pytest.approx(1.0, rel=0.02)
        assert excess_kurtosis == pytest.approx(0.0, abs=0.025)
    from fedqr.privacy.continuous import summed_std
    rng = torch.Generator().manual_seed(3)
    w, s = torch.rand(1000, 5, generator=rng), torch.rand(1000, 5, generator=rng) * 10
    got = summed_std(w, s)
    exact = (w.double() ** 2 * s.double() ** 2).sum(dim=1).sqrt()
    assert got.dtype == torch.float32 and bool((got.double() >= exact).all())
    assert bool((got.double() < exact * (1 + 2.0**-22)).all())


@pytest.mark.parametrize("kind", [Mechanism.LAPLACE, Mechanism.DISCRETE_LAPLACE])
def test_noise_not_closed_under_sums_is_drawn_reply_by_reply(kind: Mechanism) -> None:
    spec = mechanism_for(kind)
    assert not spec.closed_under_sums
    with pytest.raises(ValueError, match="not closed under sums"):
        spec.draw_sum(weights=torch.ones(1, 2), std=torch.ones(1, 2), num_params=3,
                      generator=_gen(0))
    none = mechanism_for(Mechanism.NONE)
    assert none.closed_under_sums
    assert not none.draw_sum(weights=torch.ones(2, 3), std=torch.zeros(2, 3), num_params=4,
                             generator=_gen(0)).any()
