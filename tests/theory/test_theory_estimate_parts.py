"""The steps every constants estimator shares: the GD path's statistics and the assembly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedqr.theory.estimate_parts import SampleStats, assemble_estimate, gradient_path


def _stats(theta: torch.Tensor) -> list[SampleStats]:
    """Two clients whose statistics are simple functions of the scalar ``theta``."""
    t = float(theta)
    return [(t**2, 1.0 / (1.0 + t), torch.tensor([t, 2 * t]), torch.tensor([3 * t]), 0.5),
            (2 * t**2, 0.1, torch.tensor([4 * t]), torch.tensor([t]), 1.0)]


def test_gradient_path_records_every_step_and_both_ends() -> None:
    w = np.array([0.25, 0.75])
    path = gradient_path(theta=torch.tensor(1.0), steps=3, weights=w, client_stats=_stats,
                         descent=lambda t: t + 1)
    assert float(path.theta) == 4.0
    np.testing.assert_allclose(path.g2, [[1, 2], [4, 8], [9, 18], [16, 32]])
    np.testing.assert_allclose(path.lambda2, [0.5, 0.1])  # the largest along the run
    np.testing.assert_allclose(path.norm_quantiles["l1"][:, -1], [4.0, 16.0])  # max at ends
    np.testing.assert_allclose(path.norm_quantiles["l2"][:, 0], [2.0, 8.0])  # median of {3t, t}
    assert path.clipped_fraction == pytest.approx((0.875, 0.875))


def test_assemble_estimate_applies_the_papers_formulas() -> None:
    path = gradient_path(theta=torch.tensor(1.0), steps=1, weights=np.array([0.5, 0.5]),
                         client_stats=_stats, descent=lambda t: 2 * t)
    est = assemble_estimate(path=path, mu=0.1, mu_i=(0.1, 0.2), lambda_i=(3.0, 5.0),
                            f_star=np.array([1.0, 2.0]), y0_i=np.array([4.0, 8.0]),
                            sizes=(10, 30), p=7, clip=2.0, eps=(1.0, 2.0), delta=0.0,
                            sample_rate=1.0, reads_private_data=False)
    c = est.constants
    assert (c.N, c.d_i, c.p, c.mu, c.lam, c.xi) == (2, (10, 30), 7, 0.1, 5.0, 2.0)
    assert c.G == pytest.approx(np.sqrt(8.0))  # sqrt of the largest mean squared norm
    assert c.Gamma == pytest.approx(2.0 - (0.25 * 1.0 + 0.75 * 2.0))  # max F* - mean F*
    assert c.Y0 == pytest.approx(0.25 * 4.0 + 0.75 * 8.0)
    assert c.eps_i == (1.0, 2.0) and c.delta_i == (0.0, 0.0)
    assert not est.reads_private_data and est.F_i_star == (1.0, 2.0)
