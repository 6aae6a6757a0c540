"""Bad input gives ValueError naming the parameter, the allowed range and the value."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import dp_accounting
import pytest

from fedqr.privacy import (
    Accountant,
    calibrate_noise_multiplier,
    epsilon_spent,
    gaussian_event,
    gaussian_std,
    laplace_event,
    laplace_scale,
    make_accountant,
    paper_gaussian_sigma,
)

LAP = {"replies": 10, "clip": 1.0, "num_samples": 100, "eps": 1.0}
GSTD = {"noise_multiplier": 1.0, "clip": 1.0, "sample_rate": 0.1, "num_samples": 100}
CAL = {"replies": 10, "sample_rate": 0.1, "eps": 1.0, "delta": 1e-5}
PAPER = {"replies": 10, "clip": 1.0, "num_samples": 100, "eps": 1.0, "delta": 1e-5, "c2": 1.0}

CASES: list[tuple[Callable[..., Any], dict[str, Any], str]] = [
    (laplace_scale, {**LAP, "eps": -1}, "eps must be > 0 and finite, got eps=-1"),
    (laplace_scale, {**LAP, "eps": math.inf}, "eps must be > 0 and finite, got eps=inf"),
    (laplace_scale, {**LAP, "eps": math.nan}, "eps must be > 0 and finite, got eps=nan"),
    (laplace_scale, {**LAP, "replies": -1}, "replies must be an integer >= 0, got replies=-1"),
    (laplace_scale, {**LAP, "replies": 2.0}, "replies must be an integer >= 0, got replies=2.0"),
    (laplace_scale, {**LAP, "replies": True}, "replies must be an integer >= 0, got replies=True"),
    (laplace_scale, {**LAP, "clip": 0.0}, "clip must be > 0 and finite, got clip=0.0"),
    (
        laplace_scale,
        {**LAP, "num_samples": 0},
        "num_samples must be an integer >= 1, got num_samples=0",
    ),
    (
        gaussian_std,
        {**GSTD, "noise_multiplier": -0.5},
        "noise_multiplier must be >= 0 and finite, got noise_multiplier=-0.5",
    ),
    (gaussian_std, {**GSTD, "sample_rate": 0}, "sample_rate must be in (0, 1], got sample_rate=0"),
    (
        gaussian_std,
        {**GSTD, "sample_rate": 1.5},
        "sample_rate must be in (0, 1], got sample_rate=1.5",
    ),
    (
        laplace_event,
        {"scale": 0.0, "clip": 1.0, "num_samples": 3},
        "scale must be > 0 and finite, got scale=0.0",
    ),
    (
        gaussian_event,
        {"noise_multiplier": 0.0, "sample_rate": 0.5},
        "noise_multiplier must be > 0 and finite, got noise_multiplier=0.0",
    ),
    (calibrate_noise_multiplier, {**CAL, "delta": 0.0}, "delta must be in (0, 1), got delta=0.0"),
    (calibrate_noise_multiplier, {**CAL, "delta": 1.0}, "delta must be in (0, 1), got delta=1.0"),
    (calibrate_noise_multiplier, {**CAL, "eps": 0}, "eps must be > 0 and finite, got eps=0"),
    (
        calibrate_noise_multiplier,
        {**CAL, "accountant": Accountant.PURE},
        "accountant must be 'rdp' or 'pld' for the Gaussian mechanism, got accountant='pure'",
    ),
    (
        calibrate_noise_multiplier,
        {**CAL, "accountant": "moments"},
        "accountant must be one of 'rdp', 'pld', 'pure', got accountant='moments'",
    ),
    (paper_gaussian_sigma, {**PAPER, "c2": -1.0}, "c2 must be > 0 and finite, got c2=-1.0"),
    (
        epsilon_spent,
        {"events": {}, "delta": 0.0, "accountant": Accountant.RDP},
        "delta must be in (0, 1), got delta=0.0",
    ),
    (
        epsilon_spent,
        {
            "events": {gaussian_event(noise_multiplier=1.0, sample_rate=1.0): 1},
            "delta": 0.0,
            "accountant": Accountant.PURE,
        },
        "events must be supported by the 'pure' accountant",
    ),
    (
        epsilon_spent,
        {
            "events": {gaussian_event(noise_multiplier=1.0, sample_rate=1.0): -3},
            "delta": 1e-5,
            "accountant": Accountant.RDP,
        },
        "events count must be an integer >= 0, got events count=-3",
    ),
    (
        epsilon_spent,
        {"events": [dp_accounting.ComposedDpEvent([])], "delta": 1e-5, "accountant": "rdp"},
        "events must hold hashable dp_accounting.DpEvents",
    ),
    (
        epsilon_spent,
        {"events": "gaussian", "delta": 1e-5, "accountant": "rdp"},
        "events must be a mapping DpEvent -> count or a list of DpEvents",
    ),
    (
        make_accountant,
        {"kind": Accountant.RDP, "neighboring_relation": "replace"},
        "neighboring_relation must be a dp_accounting.NeighboringRelation or None",
    ),
]


@pytest.mark.parametrize(("func", "kwargs", "message"), CASES)
def test_bad_input_messages(func: Callable[..., Any], kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        func(**kwargs)


def test_public_args_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        laplace_scale(10, 1.0, 100, 1.0)  # type: ignore[misc]
    with pytest.raises(TypeError):
        calibrate_noise_multiplier(10, 0.1, 1.0, 1e-5)  # type: ignore[misc]


@pytest.mark.parametrize(("eps", "clip"), [(1e308, 5.0), (1e306, 5.0), (1e30, 1e-300)])
def test_a_laplace_scale_beyond_the_floats_is_refused_naming_eps_and_clip(
        eps: float, clip: float) -> None:
    """A huge budget (or a tiny clip) makes 2 R clip / (d eps) underflow to 0: a ValueError
    naming both, where dividing by the scale used to raise ZeroDivisionError."""
    from fedqr.privacy.pure import laplace_scale_within

    with pytest.raises(ValueError, match=re.escape(f"got eps={eps!r} and clip={clip!r}")):
        laplace_scale_within(replies=1, clip=clip, num_samples=300, eps=eps)
    assert laplace_scale_within(replies=1, clip=5.0, num_samples=300, eps=1e6) > 0  # still fine
