"""The command line's public proxy is prepared as the deployment's data file: a proxy file
standardised as the file's rows are (or not, with ``--no-standardize``), a built-in proxy
set per feature for a file of rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedqr.cli.scenario import _public_source
from fedqr.data import DatasetName, FederatedData
from fedqr.data.source import OwnData
from fedqr.planner import Scenario
from fedqr.privacy import Mechanism

from ..data.test_data_proxy_prep import _per_feature, _pixels


@pytest.mark.parametrize("standardize", [True, False])
def test_the_command_lines_proxy_file_is_prepared_as_the_data_file(
        tmp_path: Path, standardize: bool) -> None:
    x = _pixels(240, 3)
    deployment = FederatedData.from_arrays(
        x=x.reshape(240, 16), y=np.arange(240) % 2, client=np.arange(240) % 4,
        test_share=0.25, standardize=standardize)
    scenario = Scenario(data=OwnData(data=deployment, seed=0), mechanism=Mechanism.LAPLACE,
                        eps=(2.0,), clip=5.0, sample_rate=1.0)
    proxy = tmp_path / "images.npz"  # images, where the deployment has rows
    np.savez(proxy, x=_pixels(200, 4), y=np.arange(200) % 2, client=np.arange(200) % 3)
    src, _, option = _public_source(proxy_data=proxy, proxy_dataset=None, proxy_classes=None,
                                    scenario=scenario, client_column="client",
                                    label_column="label")
    assert option == "proxy_data" and isinstance(src, OwnData)
    stats = src.data.standardization
    assert src.data.input_shape == (16,)
    assert (stats is not None and _per_feature(stats.std)) if standardize else stats is None


def test_a_built_in_proxy_for_rows_is_standardised_per_feature() -> None:
    x = _pixels(240, 5).reshape(240, 16)
    deployment = FederatedData.from_arrays(x=np.pad(x, ((0, 0), (0, 64 - 16))).reshape(240, 64),
                                           y=np.arange(240) % 10, client=np.arange(240) % 4,
                                           test_share=0.25)
    scenario = Scenario(data=OwnData(data=deployment, seed=0), mechanism=Mechanism.LAPLACE,
                        eps=(2.0,), clip=5.0, sample_rate=1.0)
    src, _, _ = _public_source(proxy_data=None, proxy_dataset=DatasetName.DIGITS,
                               proxy_classes=None, scenario=scenario, client_column="client",
                               label_column="label")
    assert isinstance(src, OwnData) and src.data.input_shape == (64,)
    assert src.data.standardization is not None and _per_feature(src.data.standardization.std)
