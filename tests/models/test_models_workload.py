"""The workload: data and the kernel sized for them, the data set's paper model by default."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedqr.data import DatasetName, DataSpec
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.models.torch_kernel import TorchKernel
from fedqr.models.workload import Workload, kernel_for


def test_default_model_is_the_presets_and_a_choice_is_sized_for_the_data() -> None:
    spec = DataSpec(dataset=DatasetName.DIGITS, num_clients=4, seed=0)
    work = Workload.of(spec)
    assert isinstance(work.kernel, LogRegKernel)
    assert (work.kernel.num_features, work.kernel.num_classes) == (64, 10)
    mlp = Workload.of(spec, "mlp", hidden=(8,))
    assert isinstance(mlp.kernel, TorchKernel) and mlp.kernel.name == "mlp"
    assert mlp.kernel.num_params == 64 * 8 + 8 + 8 * 10 + 10
    assert mlp.num_clients == 4 and mlp.build().dataset.num_features == 64
    ident = mlp.identity()
    assert ident["data"] == spec.identity() and ident["model"]["name"] == "mlp"


def test_a_model_that_cannot_take_the_data_is_refused_by_name() -> None:
    ds = DataSpec(dataset=DatasetName.DIGITS, num_clients=2).build().dataset
    with pytest.raises(ValueError, match="model"):
        kernel_for("resnet", ds)


def test_linear_is_softmax_regression_with_an_intercept_from_zero() -> None:
    spec = DataSpec(dataset=DatasetName.DIGITS, num_clients=4, seed=0)
    work = Workload.of(spec, "linear")
    assert isinstance(work.kernel, LogRegKernel) and work.kernel.intercept  # the fused path
    assert work.kernel.name == "linear" and work.kernel.param_shape == (10, 65)
    assert work.kernel.num_params == 64 * 10 + 10  # a weight per feature and class, a bias each
    theta = work.kernel.init(repeats=2, generator=torch.Generator().manual_seed(5))
    assert theta.shape == (2, 650) and not theta.any()  # from zero, like logreg
    assert work.identity()["model"] == {"name": "linear", "num_params": 650}


def test_linear_learns_the_label_frequencies_that_logreg_cannot() -> None:
    """Standardised features that carry nothing and 85% of one class: without an intercept
    the best softmax regression predicts both classes alike (loss log 2); with one it
    learns the labels' balance (the entropy of 85/15, 0.423)."""
    import fedqr

    rng = np.random.default_rng(11)
    n = 1200
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = (rng.random(n) < 0.15).astype(np.int64)
    data = fedqr.FederatedData.from_arrays(x=x, y=y, client=rng.integers(0, 3, n),
                                           test_share=0.25, seed=0)
    kw = dict(data=data, mechanism="none", rounds=150, clients_per_round=3, lr=0.5,
              weight_decay=0.0)
    linear = fedqr.simulate(model="linear", **kw).final_test_loss  # type: ignore[arg-type]
    logreg = fedqr.simulate(model="logreg", **kw).final_test_loss  # type: ignore[arg-type]
    prior = 0.15 * -np.log(0.15) + 0.85 * -np.log(0.85)
    assert logreg > np.log(2) - 0.03  # noise features: nothing better than 50/50 to learn
    assert linear < prior + 0.03  # the intercept is the prior's log-odds


def test_linear_trains_exactly_as_a_torch_linear_layer_with_clipping() -> None:
    """The fused ``linear`` (rows ``[x, 1]``) against ``nn.Linear`` with a bias through the
    torch kernel: the same clipped per-sample gradients (weight and bias together), so with
    no noise and full batches the runs agree to float32 rounding, round by round."""
    from torch import nn

    import fedqr

    def torch_linear(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        layer = nn.Linear(input_shape[0], num_classes)
        nn.init.zeros_(layer.weight)
        nn.init.zeros_(layer.bias)
        return nn.Sequential(nn.Flatten(), layer)

    rng = np.random.default_rng(4)
    n = 600
    x = rng.normal(size=(n, 5)).astype(np.float32)
    y = (x[:, 0] + rng.normal(size=n) > 1.0).astype(np.int64) + (x[:, 1] > 0.8)  # 3 classes
    data = fedqr.FederatedData.from_arrays(x=x, y=y, client=rng.integers(0, 4, n),
                                           test_share=0.25, seed=0)
    kw = dict(data=data, mechanism="none", clip=0.5, rounds=12, clients_per_round=3, lr=0.5,
              eval_every=1)
    fused = fedqr.simulate(model="linear", **kw)  # type: ignore[arg-type]
    torch_path = fedqr.simulate(model=torch_linear, **kw)  # type: ignore[arg-type]
    assert fused.document["provenance"]["model"]["name"] == "linear"
    got = [r["test_loss"] for r in fused.document["runs"][0]["rounds"]]
    want = [r["test_loss"] for r in torch_path.document["runs"][0]["rounds"]]
    np.testing.assert_allclose(got, want, rtol=2e-5)
    assert got[-1] < got[0] - 0.1  # it trained
    clipped = fused.document["clients"][0]["clipped_fraction"]
    assert clipped > 0.5  # the clip binds: the norms of [x, 1] are compared, not of x
