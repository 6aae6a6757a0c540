"""Softmax cross-entropy with rank-one per-sample clipping, against per-sample autograd."""

from __future__ import annotations

import pytest
import torch

from fedqr.models.logreg import Norm, clipped_residual, row_norms, weighted_residual


@pytest.mark.parametrize("norm", [Norm.L1, Norm.L2])
def test_clipped_residual_equals_per_sample_autograd(norm: Norm) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 7, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (64,), generator=g)
    theta = torch.randn(7, 4, generator=g, dtype=torch.float64)
    clip = 1.5
    want = torch.zeros_like(theta)
    clipped = 0
    for xj, yj in zip(x, y, strict=True):
        t = theta.clone().requires_grad_(True)
        torch.nn.functional.cross_entropy((xj @ t)[None], yj[None]).backward()
        assert t.grad is not None
        n = t.grad.abs().sum() if norm is Norm.L1 else t.grad.norm()
        clipped += int(n > clip)
        want += t.grad * min(1.0, clip / float(n))
    out = clipped_residual(x @ theta, y, x_norm=row_norms(x, norm), clip=clip, norm=norm)
    assert out.residual is not None and out.clipped is not None
    torch.testing.assert_close(x.T @ out.residual, want)
    assert int(out.clipped.sum()) == clipped > 0
    assert out.loss is not None and out.correct is not None
    torch.testing.assert_close(
        out.loss, torch.nn.functional.cross_entropy(x @ theta, y, reduction="none"))


def test_metrics_off_skips_loss_and_keeps_the_residual() -> None:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(32, 10, generator=g)
    y = torch.randint(0, 10, (32,), generator=g)
    x_norm = torch.rand(32, generator=g) * 10
    on = clipped_residual(logits.clone(), y, x_norm=x_norm, clip=3.0, norm=Norm.L1)
    off = clipped_residual(logits.clone(), y, x_norm=x_norm, clip=3.0, norm=Norm.L1,
                           metrics=False)
    assert off.loss is None and off.correct is None
    assert on.residual is not None and off.residual is not None
    assert torch.equal(on.residual, off.residual)


def test_evaluation_metrics_match_torch_logsumexp_and_argmax() -> None:
    """The evaluation branch (one max for the shift and the argmax) gives torch's
    log-sum-exp loss and first-maximum argmax, also for ties and non-finite logits."""
    gen = torch.Generator().manual_seed(3)
    wide = torch.randn(500, 3, 10, generator=gen) * 30
    odd = torch.tensor([[[float("inf"), 0.0, 1.0]], [[float("nan"), 0.0, 1.0]],
                        [[-float("inf"), 0.0, 1.0]], [[1e30, 1e30, 0.0]], [[2.0, 2.0, 1.0]],
                        [[-float("inf"), -float("inf"), -float("inf")]]])
    for logits in (wide, odd):
        y = torch.randint(0, logits.shape[-1], logits.shape[:-1], generator=gen)
        out = clipped_residual(logits, y, residual=False)
        ref = torch.logsumexp(logits, dim=-1) - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        assert out.loss is not None and out.correct is not None
        torch.testing.assert_close(out.loss, ref, equal_nan=True, rtol=1e-6, atol=1e-5)
        assert torch.equal(out.correct, logits.argmax(dim=-1) == y)
    tied = clipped_residual(torch.tensor([[[2.0, 2.0, 1.0]]]), torch.tensor([[1]]),
                            residual=False).correct
    assert tied is not None and not bool(tied.item())  # the first maximum is class 0


@pytest.mark.parametrize("norm", [Norm.L1, Norm.L2])
@pytest.mark.parametrize("clip", [0.5, float("inf")])
def test_weighted_residual_is_the_clipped_residual_times_the_weight(norm: Norm,
                                                                    clip: float) -> None:
    """The twin's form ``min(w, w xi / (||x|| ||r||)) (p - y)`` is ``w s (p - y)``, also for a
    row of weight 0 (padding), a zero row and a row whose residual is zero to float32 (its
    other classes' probabilities are the exp floor's 1.8e-35: ``fedqr.models.logreg``)."""
    gen = torch.Generator().manual_seed(0)
    rows, cols, k = 40, 3, 5
    logits = torch.randn(2, rows, cols, k, generator=gen) * 3
    logits[0, 1] = torch.tensor([200.0, 0.0, 0.0, 0.0, 0.0])  # p = onehot(0): r = 0
    y = torch.randint(0, k, (2, rows, 1), generator=gen)
    y[0, 1] = 0
    x_norm = torch.rand(2, rows, 1, generator=gen) * 4 + 0.1
    x_norm[1, 2] = 0.0
    w = torch.rand(2, rows, 1, generator=gen)
    w[1, :5] = 0.0
    want = clipped_residual(logits, y.expand(2, rows, cols), x_norm=x_norm, clip=clip,
                            norm=norm, metrics=False).residual
    assert want is not None
    want = want * w[..., None]
    got = weighted_residual(logits.clone(), y[..., None], bound=(clip / x_norm) * w,
                            weight=w, norm=norm)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert (got[0, 1].abs() < 1e-34).all() and (got[1, :5] == 0).all()


def test_the_exp_floor_keeps_softmax_terms_out_of_the_subnormal_range() -> None:
    """Logits spread over hundreds (a noisy model) give no subnormal residual entry (slow on
    x86), and the loss and clipped residual are those without the floor to float32."""
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(300, 3, 10, generator=gen) * 300
    y = torch.randint(0, 10, (300, 3), generator=gen)
    x_norm = torch.rand(300, 1, generator=gen) * 5 + 1
    out = clipped_residual(logits, y, x_norm=x_norm, clip=2.0, norm=Norm.L2)
    assert out.residual is not None and out.loss is not None
    tiny = torch.finfo(torch.float32).tiny
    assert not ((out.residual != 0) & (out.residual.abs() < tiny)).any()
    ref = torch.logsumexp(logits, dim=-1) - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out.loss, ref, rtol=1e-6, atol=1e-5)
    p = torch.softmax(logits.double(), dim=-1) - torch.nn.functional.one_hot(y, 10).double()
    scale = (2.0 / (x_norm.double() * p.norm(dim=-1))).clamp(max=1.0)
    torch.testing.assert_close(out.residual.double(), p * scale.unsqueeze(-1), rtol=1e-5,
                               atol=1e-7)
    y0 = y[:, :1]  # the twin's rows: one label across the columns
    want = clipped_residual(logits, y0.expand(300, 3), x_norm=x_norm, clip=2.0, norm=Norm.L2,
                            metrics=False).residual
    got = weighted_residual(logits.clone(), y0[..., None], bound=2.0 / x_norm,
                            weight=torch.ones(300, 1), norm=Norm.L2)
    assert want is not None and not ((got != 0) & (got.abs() < tiny)).any()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
