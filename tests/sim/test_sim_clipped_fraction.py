"""A client's clipped fraction is its clipped rows over its sampled rows (Poisson sampling's
empty batches count for nothing, not as replies with no row clipped)."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

import jsonschema
import numpy as np
import pytest

import fedqr

SIZES = (3, 5, 12, 60)  # small clients: at q = 0.05 most of their batches are empty


def _data() -> fedqr.FederatedData:
    rng = np.random.default_rng(0)
    n = sum(SIZES)
    x = rng.normal(size=(n, 5)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    client = np.repeat(np.arange(len(SIZES)), SIZES)
    x_test = rng.normal(size=(40, 5)).astype(np.float32)
    return fedqr.FederatedData.from_arrays(x=x, y=y, client=client, x_test=x_test,
                                           y_test=(x_test[:, 0] > 0).astype(np.int64))


def _run(model: str, clip: float, *, sample_rate: float = 0.05) -> dict[str, Any]:
    res = fedqr.simulate(data=_data(), model=model, mechanism="gaussian", eps=4.0, clip=clip,
                         sample_rate=sample_rate, rounds=40, clients_per_round=2, repeats=2,
                         hidden=(4,) if model == "mlp" else None)
    doc: dict[str, Any] = json.loads(json.dumps(res.document))
    schema = json.loads(files("fedqr").joinpath("sim/result.schema.json").read_text())
    jsonschema.validate(doc, schema)
    return doc


@pytest.mark.parametrize("model", ["linear", "mlp"])  # the batched and the torch kernel
def test_a_tiny_clip_clips_every_sampled_row(model: str) -> None:
    """Every row's gradient exceeds a clip of 1e-9: each client's fraction is exactly 1,
    however many of its Poisson batches were empty."""
    doc = _run(model, 1e-9)
    assert [c["clipped_fraction"] for c in doc["clients"]] == [1.0] * len(SIZES)
    assert all(c["replies"] == 20 for c in doc["clients"])  # the other statistics stay
    assert all(c["snr"] is not None and c["snr"] > 0 for c in doc["clients"])


def test_a_huge_clip_clips_no_row_and_full_batches_agree() -> None:
    assert [c["clipped_fraction"] for c in _run("linear", 1e9)["clients"]] == [0.0] * 4
    full = _run("linear", 1e-9, sample_rate=1.0)
    assert [c["clipped_fraction"] for c in full["clients"]] == [1.0] * 4


def test_the_fraction_pools_rows_over_replies_and_repeats() -> None:
    """(2, R, N) sums of clipped and sampled rows: repeat 0 clipped 1 of 1 row of client 0,
    repeat 1 none of 9; client 1 sampled nothing (0); client 2 clipped 3 of 4 in one repeat
    and had empty batches only in the other."""
    from fedqr.sim.result import _clipped_fraction

    rows = np.array([[[1.0, 0.0, 3.0], [0.0, 0.0, 0.0]],
                     [[1.0, 0.0, 4.0], [9.0, 0.0, 0.0]]])
    np.testing.assert_array_equal(_clipped_fraction(rows), [0.1, 0.0, 0.75])
