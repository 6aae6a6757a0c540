"""Constants of a torch model: equal to the logistic-regression estimator on a linear model,
and well-formed (mu floored at the weight decay) for the non-convex CNN."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from fedqr.data import Dataset, load_dataset, make_partition
from fedqr.models.logreg import Norm
from fedqr.sim.network_constants import estimate_network_constants
from fedqr.theory.estimate import EstimateSettings, estimate_constants


@pytest.fixture(scope="module")
def digits() -> Dataset:
    ds = load_dataset("digits")
    return dataclasses.replace(ds, x_train=ds.x_train[:300], y_train=ds.y_train[:300])


def _linear(gen: torch.Generator) -> nn.Module:
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10, bias=False))
    nn.init.zeros_(model[1].weight)  # theta_0 = 0, as the logistic-regression estimator
    return model


@pytest.mark.parametrize("norm, clip", [(Norm.L1, 5.0), (Norm.L2, 1.0)])
def test_linear_model_matches_the_logistic_regression_estimator(
        digits: Dataset, norm: Norm, clip: float) -> None:
    part = make_partition("iid", labels=digits.y_train, num_clients=3,
                          rng=np.random.default_rng(0))
    kw = dict(dataset=digits, partition=part, clip=clip, norm=norm, eps=1.0)
    ref = estimate_constants(**kw, settings=EstimateSettings(  # type: ignore[arg-type]
        gd_steps=6)).constants
    net = estimate_network_constants(**kw, model_factory=_linear,  # type: ignore[arg-type]
                                     gd_steps=6, lanczos_steps=40).constants
    assert net.p == ref.p == 640
    assert net.lam == pytest.approx(ref.lam, rel=1e-3)
    assert net.mu == pytest.approx(ref.mu, rel=1e-3)  # convex: the measured mu (= wd), > 0
    assert net.G == pytest.approx(ref.G, rel=1e-4)
    assert net.Lambda2_i == pytest.approx(ref.Lambda2_i, rel=1e-3)
    assert net.d_i == ref.d_i


def test_cnn_constants_are_local_estimates_with_mu_floored_at_weight_decay(
        digits: Dataset) -> None:
    part = make_partition("iid", labels=digits.y_train, num_clients=2,
                          rng=np.random.default_rng(0))
    est = estimate_network_constants(dataset=digits, partition=part, clip=10.0, norm=Norm.L2,
                                     eps=1.0, weight_decay=0.02, gd_steps=2, lanczos_steps=8,
                                     local_steps=20)
    c = est.constants
    assert c.p == 416 + 12832 + (32 * 2 * 2 * 10 + 10)  # the paper's CNN on 8x8 images
    assert min(est.mu_i) < 0  # the CNN's Hessian is indefinite ...
    assert c.mu == 0.02  # ... so mu is the regulariser's curvature
    assert c.lam > 0 and c.G > 0 and c.Y0 > 0 and c.Gamma >= 0
    assert est.reads_private_data


def test_bad_input(digits: Dataset) -> None:
    part = make_partition("iid", labels=digits.y_train, num_clients=2,
                          rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="clip must be > 0, got clip=0"):
        estimate_network_constants(dataset=digits, partition=part, clip=0.0, norm=Norm.L2,
                                   eps=1.0)
    with pytest.raises(ValueError, match="proxy_fraction must be in"):
        estimate_network_constants(dataset=digits, partition=part, clip=1.0, norm=Norm.L2,
                                   eps=1.0, proxy_fraction=1.5, rng=np.random.default_rng(0))
