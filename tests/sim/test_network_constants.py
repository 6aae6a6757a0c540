"""The paper's CNN through :func:`estimate_network_constants` (the one estimator with a torch
kernel, see tests/theory/test_theory_estimate_torch.py): well-formed local constants, mu
floored at the weight decay; bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedqr.data import Dataset, load_dataset, make_partition
from fedqr.models.logreg import Norm
from fedqr.sim.network_constants import estimate_network_constants


@pytest.fixture(scope="module")
def digits() -> Dataset:
    ds = load_dataset("digits")
    return dataclasses.replace(ds, x_train=ds.x_train[:300], y_train=ds.y_train[:300])


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
