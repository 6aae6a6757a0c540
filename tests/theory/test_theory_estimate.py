"""Curvature estimation on ridge regression, and constants/Table I on real MNIST."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedqr.data import load_dataset, make_partition
from fedqr.models.logreg import Norm
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.theory.constants import constants_from_json, constants_to_json
from fedqr.theory.estimate import (
    EstimateSettings,
    estimate_constants,
    hessian_extreme_eigenvalues,
)
from fedqr.theory.planner import Rounding, joint_optimum, table_one


def test_ridge_curvature_recovered() -> None:
    rng = np.random.default_rng(0)
    n, p, wd = 400, 60, 0.3
    a = rng.standard_normal((n, p)) * np.linspace(0.2, 3.0, p)
    x = torch.as_tensor(a)
    yv = torch.as_tensor(rng.standard_normal(n))
    eig = np.linalg.eigvalsh(a.T @ a / n + wd * np.eye(p))

    def loss(theta: torch.Tensor) -> torch.Tensor:
        return 0.5 * (x @ theta - yv).pow(2).mean() + 0.5 * wd * theta.pow(2).sum()

    low, top = hessian_extreme_eigenvalues(loss=loss, theta=torch.zeros(p, dtype=torch.float64))
    assert low == pytest.approx(eig[0], rel=0.05)
    assert top == pytest.approx(eig[-1], rel=0.05)


PAPER = {1.0: (5, 2, 1, 22), 5.0: (32, 20, 3, 121), 10.0: (67, 42, 5, 244)}


@pytest.mark.slow
def test_mnist_constants_and_table_one(data_dir: Path) -> None:
    torch.set_num_threads(1)
    ds = load_dataset("mnist", data_dir=data_dir / "mnist", download=False)
    part = make_partition("two-digits", labels=ds.y_train, num_clients=10,
                          rng=np.random.default_rng(0))  # fmt: skip
    est = estimate_constants(dataset=ds, partition=part, clip=300.0, norm=Norm.L1, eps=1.0,
                             proxy_fraction=0.1, rng=np.random.default_rng(0),
                             settings=EstimateSettings(gd_steps=5))  # fmt: skip
    c = est.constants
    assert est.reads_private_data
    assert c.N == 10 and c.d == 60000 and c.p == 7840
    assert c.mu == pytest.approx(0.01, rel=0.05)  # weight decay: softmax has a null space
    assert c.lam > c.mu and c.G > 0 and c.Gamma >= 0 and c.Y0 > 0
    assert constants_from_json(constants_to_json(c)) == c
    rows = table_one(c, [1.0, 5.0, 10.0], rounding=Rounding.PAPER)
    print("\neps | T*(b=5) | T*(b=10) | b*(T=50) | joint (T, b)   [paper]")
    for r in rows:
        print(r["eps"], r["T_star_fix_b"][5], r["T_star_fix_b"][10], r["b_star_fix_T"][50],
              (r["joint"]["T"], r["joint"]["b"]), PAPER[r["eps"]])  # fmt: skip
    for key in (5, 10):
        ts = [r["T_star_fix_b"][key] for r in rows]
        assert ts == sorted(ts)
    assert all(r["T_star_fix_b"][5] >= r["T_star_fix_b"][10] for r in rows)
    bs = [r["b_star_fix_T"][50] for r in rows]
    assert bs == sorted(bs)
    for r in rows:  # C1 > 0 and the Moebius argument: the joint optimum sits at b = 1 or N
        assert r["joint"]["b"] in (1, 10)
        assert joint_optimum(c.with_budget(eps=r["eps"])).b in (1.0, 10.0)


class _NoKernel:
    """Not a kernel the estimator can see through."""

    name = "other"


def test_bad_kernel_and_settings_are_named() -> None:
    ds = load_dataset("digits")
    part = make_partition("iid", labels=ds.y_train, num_clients=2,
                          rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"kernel must be a LogRegKernel or a TorchKernel.*"
                                         r"got kernel=_NoKernel"):
        estimate_constants(dataset=ds, partition=part, clip=1.0, norm=Norm.L2, eps=1.0,
                           kernel=_NoKernel())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"weight_decay must be > 0.*got weight_decay=0\.0"):
        estimate_constants(dataset=ds, partition=part, clip=1.0, norm=Norm.L2, eps=1.0,
                           weight_decay=0.0)
    with pytest.raises(ValueError, match=r"client rows must have 10 features.*got shape"):
        estimate_constants(dataset=ds, partition=part, clip=1.0, norm=Norm.L2, eps=1.0,
                           kernel=LogRegKernel(num_features=10, num_classes=10))
    for field, value in (("gd_steps", -1), ("lanczos_steps", 0), ("local_steps", 1.5),
                         ("seed", -2), ("local_lr", 0.0)):
        with pytest.raises(ValueError, match=f"{field} must be .*got {field}={value}"):
            EstimateSettings(**{field: value})  # type: ignore[arg-type]
