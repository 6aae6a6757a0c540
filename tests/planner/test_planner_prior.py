"""The label prior's loss: weighted by real sizes, smoothed, and said where a plan loses to it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import fedqr
from fedqr.planner.prior import SMOOTHING, label_prior_loss, prior_note


def _loss(y: list[int], offsets: list[int], real: list[int], y_test: list[int], k: int) -> float:
    return label_prior_loss(y=torch.tensor(y), offsets=np.asarray(offsets),
                            real_sizes=np.asarray(real), y_test=torch.tensor(y_test),
                            num_classes=k)


def test_balanced_labels_give_log_k() -> None:
    got = _loss([0, 1, 2, 0, 1, 2], [0, 3, 6], [30, 30], [0, 1, 2, 2], 3)
    assert got == pytest.approx(math.log(3), rel=1e-12)


def test_each_proxy_row_stands_for_its_clients_real_rows() -> None:
    # client 0: 2 proxy rows of class 0 for 100 real rows; client 1: 4 rows of class 1 for 300
    got = _loss([0, 0, 1, 1, 1, 1], [0, 2, 6], [100, 300], [0, 1, 1, 1], 2)
    scale = 400 / 6  # weighted rows per proxy row
    f0 = (100 + SMOOTHING * scale) / (400 + 2 * SMOOTHING * scale)
    want = -(math.log(f0) + 3 * math.log(1 - f0)) / 4
    assert got == pytest.approx(want, rel=1e-12)
    unweighted = _loss([0, 0, 1, 1, 1, 1], [0, 2, 6], [2, 4], [0, 1, 1, 1], 2)
    assert abs(unweighted - got) > 1e-3  # the weights change the answer


def test_a_class_no_proxy_row_holds_has_a_finite_loss() -> None:
    got = _loss([0, 0, 0, 0], [0, 4], [4], [1], 2)
    assert math.isfinite(got) and got > math.log(2)


def test_only_logreg_is_told_of_the_intercept_it_lacks() -> None:
    log2 = math.log(2)
    for model in ("logreg", "linear", "mlp"):
        note = prior_note(0.6, 0.55, public=True, model=model, uniform=log2)
        assert "public proxy's labels" in note and "0.5500" in note
        assert ("--model linear" in note) == (model == "logreg")
        # beating imbalanced frequencies: logreg is told that linear may do better still
        beats = prior_note(0.5, 0.55, public=False, model=model, uniform=log2)
        assert ("imbalanced" in beats and "--model linear" in beats) == (model == "logreg")
    assert prior_note(0.5, 0.68, public=False, model="logreg", uniform=log2) == ""  # balanced
    assert prior_note(0.6, float("nan"), public=False, model="logreg", uniform=log2) == ""


def test_a_plan_that_barely_beats_the_label_frequencies_says_so() -> None:
    """A heart-disease MLP plan predicted 0.684 against the frequencies' 0.6927 (1.3%) and
    said nothing; its runs achieved 0.694, no better than the constant."""
    note = prior_note(0.684, 0.6927, public=False, model="mlp", uniform=math.log(2),
                      margin=0.02)
    assert "by only 1.3%, less than 2%" in note and "0.6927" in note
    assert prior_note(0.66, 0.6927, public=False, model="mlp", uniform=math.log(2),
                      margin=0.02) == ""  # 4.7% below: no note
    assert prior_note(0.684, 0.6927, public=False, model="mlp",
                      uniform=math.log(2)) == ""  # no margin asked
    both = prior_note(0.54, 0.55, public=False, model="logreg", uniform=math.log(2),
                      margin=0.02)  # barely, and logreg on imbalanced labels: both notes
    assert "by only 1.8%" in both and "--model linear" in both


def test_inconsistent_clients_are_refused() -> None:
    with pytest.raises(ValueError, match="offsets give 1 clients, real_sizes 2"):
        _loss([0, 1], [0, 2], [1, 1], [0], 2)


def test_a_plan_that_loses_to_the_label_frequencies_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path))
    rng = np.random.default_rng(3)
    n = 800
    x = rng.normal(size=(n, 5)).astype(np.float32)  # features carry nothing ...
    x[:, 0] = 1.0  # ... but a constant one: the model can learn the labels' balance
    y = (rng.random(n) < 0.1).astype(np.int64)  # 90% class 0
    data = fedqr.FederatedData.from_arrays(x=x, y=y, client=rng.integers(0, 4, n),
                                           test_share=0.25, seed=0, standardize=False)
    plan = fedqr.plan(data=data, model="logreg", mechanism="laplace", eps=1.0, clip=5.0,
                      lr=0.3, twin_repeats=2)
    doc = plan.document
    prior = doc["label_prior_test_loss"]
    assert 0.2 < prior < 0.45  # about the entropy of a 90/10 split (0.325)
    rec = doc["recommended"]
    assert rec["useful"] and rec["predicted_test_loss"]["mean"] >= prior
    assert f"predicting the label frequencies (estimated from the proxy's labels) has a test " \
           f"loss of {prior:.4f}" in rec["message"]
    assert "logreg has no intercept" in rec["message"] and "--model linear" in rec["message"]
    balanced = fedqr.FederatedData.from_arrays(
        x=x, y=(x[:, 1] > 0).astype(np.int64), client=rng.integers(0, 4, n), test_share=0.25,
        seed=0, standardize=False)
    learnt = fedqr.plan(data=balanced, model="logreg", mechanism="laplace", eps=2.0, clip=5.0,
                        lr=0.3, twin_repeats=2).document
    assert learnt["recommended"]["predicted_test_loss"]["mean"] < learnt["label_prior_test_loss"]
    assert "label frequencies" not in learnt["recommended"]["message"]


def test_the_kernel_twins_proxy_has_the_logistic_twins_prior() -> None:
    from fedqr.data import DatasetName, DataSpec, PartitionKind
    from fedqr.models.logreg import Norm
    from fedqr.models.zoo import make_kernel
    from fedqr.planner.prior import proxy_prior_loss
    from fedqr.planner.twin import make_proxy
    from fedqr.planner.twin_kernel import make_kernel_proxy

    data = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.DIRICHLET, alpha=0.3,
                    num_clients=4, seed=2).build()
    rows = tuple(np.asarray(i)[: len(i) // 3] for i in data.partition.indices)
    kw = dict(rows=rows, test=data.dataset, real_sizes=data.partition.sizes, norm=Norm.L2,
              device=torch.device("cpu"))
    fused = make_proxy(data, products="float32", **kw)  # type: ignore[arg-type]
    kernel = make_kernel("mlp", input_shape=(64,), num_classes=10, hidden=(8,))
    mlp = make_kernel_proxy(kernel, data, **kw)  # type: ignore[arg-type]
    want = proxy_prior_loss(fused)
    assert proxy_prior_loss(mlp) == pytest.approx(want, rel=1e-12)
    assert math.log(10) * 0.9 < want < math.log(10) * 1.2  # near uniform: ten digits
