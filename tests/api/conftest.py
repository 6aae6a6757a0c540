"""Fixtures of the API's tests: a small federation of four clients."""

from __future__ import annotations

import numpy as np
import pytest

import fedqr


@pytest.fixture(scope="module")
def data() -> fedqr.FederatedData:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 6)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    return fedqr.FederatedData.from_arrays(x=x, y=y, client=rng.integers(0, 4, 600),
                                           test_share=0.25, seed=0)
