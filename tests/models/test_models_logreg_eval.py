"""``summed_metrics``, the test evaluation's fused sums, against the per-row cross-entropy
of ``clipped_residual`` and ``torch.nn.functional.cross_entropy``, including a diverged model
(infinite and NaN logits)."""

from __future__ import annotations

import math

import torch

from fedqr.models.logreg import clipped_residual
from fedqr.models.logreg_eval import summed_metrics


def _reference(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    c, r, _ = logits.shape
    out = clipped_residual(logits, y[:, None].expand(c, r), residual=False)
    assert out.loss is not None and out.correct is not None
    return out.loss.double().sum(dim=0), out.correct.sum(dim=0)


def test_summed_metrics_match_per_row_cross_entropy() -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(4_000, 3, 10, generator=g) * 4
    y = torch.randint(0, 10, (4_000,), generator=g)
    loss, correct = summed_metrics(logits, y)
    ref_loss, ref_correct = _reference(logits, y)
    assert torch.equal(correct, ref_correct)
    torch.testing.assert_close(loss.double(), ref_loss, rtol=1e-5, atol=0.0)
    for r in range(3):  # and torch's own cross-entropy, repeat by repeat
        ce = torch.nn.functional.cross_entropy(logits[:, r].double(), y, reduction="sum")
        assert math.isclose(float(loss[r]), float(ce), rel_tol=1e-5)


def test_summed_metrics_ties_count_the_first_maximum() -> None:
    logits = torch.zeros(2, 1, 4)  # every class ties: the prediction is class 0
    loss, correct = summed_metrics(logits, torch.tensor([0, 3]))
    assert correct.tolist() == [1]
    assert math.isclose(float(loss[0]), 2 * math.log(4), rel_tol=1e-6)


def test_summed_metrics_of_a_diverged_model_are_not_finite_as_logsumexp() -> None:
    logits = torch.randn(6, 2, 5, generator=torch.Generator().manual_seed(0))
    logits[1, 0, 2] = math.inf  # repeat 0: an infinite logit, as a diverged model gives
    logits[4, 1, 0] = math.nan  # repeat 1: NaN
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    loss, _ = summed_metrics(logits, y)
    ref_loss, _ = _reference(logits, y)
    assert torch.equal(torch.isnan(loss), torch.isnan(ref_loss))
    assert torch.equal(torch.isinf(loss), torch.isinf(ref_loss))
    assert not bool(torch.isfinite(loss).any())


def test_summed_metrics_some_rows_tied_count_the_first_maximum() -> None:
    """Rows whose maximum two classes share: the label counts only where it is the first of
    them (as ``argmax``), beside untied rows; the same counts as ``clipped_residual``."""
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(400, 2, 6, generator=g)
    y = torch.randint(0, 6, (400,), generator=g)
    top = logits[:100].amax(dim=-1) + 1.0
    logits[:100, :, 1] = top  # classes 1 and 3 tie at the maximum in the first 100 rows
    logits[:100, :, 3] = top
    y[:50], y[50:100] = 3, 1  # tied behind class 1: wrong; class 1 itself: right
    loss, correct = summed_metrics(logits, y)
    ref_loss, ref_correct = _reference(logits, y)
    assert torch.equal(correct, ref_correct)
    assert bool((correct >= 50).all())  # rows 50..99 count in every repeat
    torch.testing.assert_close(loss.double(), ref_loss, rtol=1e-5, atol=0.0)
