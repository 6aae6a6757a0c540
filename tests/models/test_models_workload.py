"""The workload: data and the kernel sized for them, the data set's paper model by default."""

from __future__ import annotations

import pytest

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
