"""The estimator on torch kernels: a linear model agrees with the closed forms of softmax
regression, the kernel's own loss is the one estimated, and an MLP on the real heart-disease
hospitals gives finite, positive constants."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fedqr.data import Dataset, FederatedData, Partition, load_dataset, make_partition
from fedqr.models.logreg import Norm
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.models.torch_kernel import TorchKernel
from fedqr.models.zoo import make_kernel
from fedqr.theory.estimate import EstimateSettings, estimate_constants

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def digits() -> tuple[Dataset, Partition]:
    ds = load_dataset("digits")
    ds = dataclasses.replace(ds, x_train=ds.x_train[:300], y_train=ds.y_train[:300])
    return ds, make_partition("iid", labels=ds.y_train, num_clients=3,
                              rng=np.random.default_rng(0))


def _linear(gen: torch.Generator) -> nn.Module:
    linear = nn.Linear(64, 10, bias=False)
    nn.init.zeros_(linear.weight)  # theta_0 = 0, as softmax regression's
    return nn.Sequential(nn.Flatten(), linear)


@pytest.mark.parametrize(("norm", "clip"), [(Norm.L1, 100.0), (Norm.L2, 7.5)])
def test_linear_torch_model_agrees_with_the_closed_forms(
        digits: tuple[Dataset, Partition], norm: Norm, clip: float) -> None:
    ds, part = digits
    common = dict(dataset=ds, partition=part, clip=clip, norm=norm, eps=1.0,
                  settings=EstimateSettings(gd_steps=4, lanczos_steps=40))
    ref = estimate_constants(**common, kernel=LogRegKernel(  # type: ignore[arg-type]
        num_features=64, num_classes=10))
    net = estimate_constants(**common, kernel=TorchKernel(  # type: ignore[arg-type]
        build=_linear, input_shape=(1, 8, 8), num_classes=10))
    a, b = net.constants, ref.constants
    assert a.p == b.p == 640 and a.d_i == b.d_i
    assert a.lam == pytest.approx(b.lam, rel=1e-4)
    assert a.mu == pytest.approx(b.mu, rel=1e-3)  # convex: the measured mu (> 0)
    assert a.G == pytest.approx(b.G, rel=1e-5)
    assert a.Lambda2_i == pytest.approx(b.Lambda2_i, rel=1e-4)
    assert net.clipped_fraction == pytest.approx(ref.clipped_fraction)
    for key in ("l1", "l2"):
        assert net.norm_quantiles[key] == pytest.approx(ref.norm_quantiles[key], rel=1e-4)


def test_the_kernels_loss_is_estimated(digits: tuple[Dataset, Partition]) -> None:
    """A kernel whose loss is twice the cross-entropy has twice its per-sample gradients."""
    ds, part = digits

    def doubled(logits: Tensor, y: Tensor) -> Tensor:
        return 2.0 * F.cross_entropy(logits, y, reduction="none")

    settings = EstimateSettings(gd_steps=0, lanczos_steps=8, local_steps=2)
    norms = []
    for loss in (None, doubled):
        kernel = make_kernel("mlp", input_shape=(1, 8, 8), num_classes=10, hidden=(8,),
                             loss_fn=loss)
        est = estimate_constants(dataset=ds, partition=part, clip=1e6, norm=Norm.L2, eps=1.0,
                                 kernel=kernel, settings=settings)
        norms.append(est.norm_quantiles["l2"][0])
    assert norms[1] == pytest.approx(2 * norms[0], rel=1e-5)


def test_mlp_on_the_heart_disease_hospitals(data_dir: Path, tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "examples/heart_disease/prepare.py"),
                    "--data-dir", str(data_dir / "heart-disease"), "--out", str(tmp_path)],
                   check=True, capture_output=True)
    data = FederatedData.from_file(tmp_path / "heart_all.csv",
                                   test_path=tmp_path / "heart_all_test.csv").to_client_data()
    kernel = make_kernel("mlp", input_shape=(data.dataset.num_features,), num_classes=2,
                         hidden=(16,))
    est = estimate_constants(dataset=data.dataset, partition=data.partition, clip=1.0,
                             norm=Norm.L2, eps=1.0, delta=1e-5, sample_rate=0.01,
                             weight_decay=0.01, kernel=kernel,
                             settings=EstimateSettings(gd_steps=3, lanczos_steps=10,
                                                       local_steps=30))
    c = est.constants
    assert est.reads_private_data
    assert c.N == 4 and c.d_i == (199, 172, 30, 85)  # FLamby's training rows per hospital
    assert c.p == kernel.num_params == 10 * 16 + 16 + 16 * 2 + 2
    assert c.Lambda2_i is not None
    values = [c.mu, c.lam, c.G, c.Y0, *c.Lambda2_i]
    assert all(math.isfinite(v) and v > 0 for v in values), values
    assert math.isfinite(c.Gamma) and c.Gamma >= 0
    assert c.mu == (min(est.mu_i) if min(est.mu_i) > 0 else 0.01)  # wd where not convex
    assert c.lam >= max(est.lambda_i) * (1 - 1e-12) and c.lam > c.mu
    assert all(0 <= f <= 1 for f in est.clipped_fraction)


@pytest.mark.parametrize(("norm", "clip"), [(Norm.L1, 3.0), (Norm.L2, 2.0)])
def test_sample_stats_over_chunks_equal_the_whole_clients(
        digits: tuple[Dataset, Partition], norm: Norm, clip: float) -> None:
    """300 rows (three chunks of at most 128): the statistics summed chunk by chunk equal
    those of all the client's per-sample gradients at once (float64)."""
    from torch.func import functional_call, grad, vmap

    from fedqr.theory.estimate_torch import TorchObjective

    ds, _ = digits
    kernel = make_kernel("mlp", input_shape=(64,), num_classes=10, hidden=(8,))
    assert isinstance(kernel, TorchKernel)
    obj = TorchObjective(kernel, weight_decay=0.01, seed=0, local_steps=1, local_lr=0.1)
    x, y = obj.tensors(ds.x_train, ds.y_train)
    theta = obj.theta0
    full, lam2, l1, l2, frac = obj.sample_stats(x, y, theta, clip=clip, norm=norm)

    def one(t: Tensor, xi: Tensor, yi: Tensor) -> Tensor:
        logits = functional_call(obj.model, obj._params(t), (xi[None],))
        return F.cross_entropy(logits, yi[None], reduction="sum")

    g = vmap(grad(one), in_dims=(None, 0, 0))(theta, x, y).double()
    s = torch.clamp(clip / (g.abs().sum(1) if norm is Norm.L1 else g.norm(dim=1)), max=1.0)
    c = s[:, None] * g
    assert 0 < frac < 1 and x.shape[0] == 300
    assert frac == pytest.approx(float((s < 1).double().mean()))
    torch.testing.assert_close(l1, g.abs().sum(1), rtol=1e-12, atol=0)
    torch.testing.assert_close(l2, g.norm(dim=1), rtol=1e-12, atol=0)
    assert full == pytest.approx(float((c + 0.01 * theta.double()).pow(2).sum(1).mean()),
                                 rel=1e-12)
    assert lam2 == pytest.approx(float(c.pow(2).sum(1).mean() - c.mean(0).pow(2).sum()),
                                 rel=1e-10)
