"""The fitted fine horizons: a parabola in log T per repeat, read only where it can be trusted."""

from __future__ import annotations

import numpy as np
import pytest

from fedqr.planner.fit import parabola_in_log_t

TS = [256, 512, 1024, 2048]


def _curves(coef: list[tuple[float, float, float]]) -> np.ndarray:
    x = np.log(np.asarray(TS, dtype=np.float64))
    return np.stack([a * x ** 2 + b * x + c for a, b, c in coef], axis=1)  # (points, repeats)


def test_a_parabola_in_log_t_is_read_back_for_every_repeat() -> None:
    coef = [(0.01, -0.14, 0.9), (0.02, -0.27, 1.3)]
    got = parabola_in_log_t(TS, _curves(coef), [300, 700, 1600])
    assert sorted(got) == [300, 700, 1600]
    for t, values in got.items():
        x = np.log(t)
        want = [a * x ** 2 + b * x + c for a, b, c in coef]
        np.testing.assert_allclose(values, want, rtol=1e-9, atol=1e-12)


def test_no_extrapolation_beyond_the_points() -> None:
    got = parabola_in_log_t(TS, _curves([(0.01, -0.14, 0.9)]), [128, 256, 4096])
    assert sorted(got) == [256]


@pytest.mark.parametrize("case", ["one repeat concave", "two points", "not finite"])
def test_no_fit_to_trust_reads_nothing(case: str) -> None:
    curves = _curves([(0.01, -0.14, 0.9), (-0.01, 0.14, 0.1)])
    ts = TS
    if case == "two points":
        ts, curves = TS[:2], curves[:2, :1]
    elif case == "not finite":
        curves = _curves([(0.01, -0.14, 0.9)])
        curves[1, 0] = np.inf
    assert parabola_in_log_t(ts, curves, [300, 700]) == {}
