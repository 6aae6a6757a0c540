"""Arrays as users hold them: torch tensors (that require grad, in bfloat16, on the meta
device) and ragged lists are read or refused by the parameter's name, never with torch's or
NumPy's own error."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch

from fedqr.data import FederatedData

RNG = np.random.default_rng(0)
X = RNG.normal(size=(40, 3)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int64)
C = np.arange(40) % 4


def _build(**change: Any) -> FederatedData:
    arrays: dict[str, Any] = {"x": X, "y": Y, "client": C, "test_share": 0.25, "seed": 0,
                              **change}
    return FederatedData.from_arrays(**arrays)


def test_tensors_that_require_grad_or_hold_bfloat16_are_read_as_their_values() -> None:
    plain = _build()
    grad = _build(x=torch.tensor(X, requires_grad=True), y=torch.tensor(Y),
                  client=torch.tensor(C))
    np.testing.assert_array_equal(grad.x, plain.x)
    np.testing.assert_array_equal(grad.y, plain.y)
    half = torch.tensor(X).to(torch.bfloat16)
    from_half = _build(x=half)
    np.testing.assert_array_equal(from_half.x, _build(x=half.float().numpy()).x)
    assert from_half.x.dtype == np.float32
    tested = _build(test_share=None, x_test=torch.tensor(X[:5], requires_grad=True),
                    y_test=torch.tensor(Y[:5]))
    np.testing.assert_array_equal(tested.x_test, _build(test_share=None, x_test=X[:5],
                                                         y_test=Y[:5]).x_test)


@pytest.mark.parametrize(("change", "message"), [
    ({"x": torch.empty(40, 3, device="meta")},
     "x is a tensor on the meta device, which holds shapes but no values; give its values, "
     "got x.shape=(40, 3) on device 'meta'"),
    ({"x": [[1.0, 2.0], [3.0]] * 20}, "x must be a rectangular array (every row of the same "
                                       "length), got a ragged sequence ("),
    ({"y": [0, [1], 0, 1] * 10}, "y must be a rectangular array"),
    ({"client": [[0], 1] * 20}, "client must be a rectangular array"),
    ({"test_share": None, "x_test": X[:2], "y_test": [[0, 1], [1]]},
     "y_test must be a rectangular array"),
])
def test_arrays_numpy_cannot_read_are_refused_by_name(change: dict[str, Any],
                                                      message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _build(**change)
