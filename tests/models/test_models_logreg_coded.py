"""The mixed arithmetic: integer coding of rows, exact integer gradient sums, the clip bound."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedqr.models.logreg import Norm
from fedqr.models.logreg_coded import QUANT, CodedSum, code_rows, coded_block
from fedqr.models.logreg_pass import client_layout, full_batch_sums


def _images(n: int, p: int, seed: int) -> np.ndarray:
    """MNIST-like rows: grey levels k / 255 standardised by one scalar, many pixels blank."""
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 256, size=(n, p)) * (rng.random((n, p)) < 0.3)
    return ((k / 255.0 - 0.13) / 0.31).astype(np.float32)


def test_code_rows_finds_the_grid_of_images_and_one_hot_columns() -> None:
    x = _images(500, 12, 0)
    x[:, 3] = 0.7  # a constant column
    coding = code_rows(x)
    assert coding is not None and coding.codes.dtype == np.int8
    rebuilt = coding.codes * coding.scale + coding.offset
    assert np.abs(rebuilt - x).max() < 1e-6
    assert np.allclose(coding.scale[[0, 1, 2]], 1 / (255 * 0.31), rtol=1e-6)
    rng = np.random.default_rng(1)  # one-hot columns standardised each by its own statistics
    onehot = np.eye(4)[rng.integers(0, 4, 300)]
    z = ((onehot - onehot.mean(axis=0)) / onehot.std(axis=0)).astype(np.float32)
    coded = code_rows(z)
    assert coded is not None and np.abs(coded.codes * coded.scale + coded.offset - z).max() < 1e-6


def test_code_rows_finds_each_columns_grid_where_columns_are_standardised_on_their_own() -> None:
    """A data file's features standardised per column (``FederatedData``): each column has a
    grid of its own, and a column of rare values may show none of its neighbouring levels,
    in its first rows or at all (levels 0, 2 and 5 steps up: the smallest gap is 2 steps)."""
    rng = np.random.default_rng(4)
    k = (rng.integers(0, 256, size=(3000, 6)) * (rng.random((3000, 6)) < 0.3)).astype(float)
    k[:, 4] = 0
    k[2500:2510, 4] = [2, 5, 2, 5, 5, 2, 2, 5, 2, 5]  # only after the first 2,048 rows
    k[:, 5] = rng.choice([0.0, 3.0, 7.0, 12.0], size=3000)  # gaps 3, 4, 5: the step is 1
    x = (k / 255.0 - 0.13) / 0.31
    z = ((x - x.mean(axis=0)) / x.std(axis=0)).astype(np.float32)
    coding = code_rows(z)
    assert coding is not None
    rebuilt = coding.codes * coding.scale + coding.offset
    assert np.abs(rebuilt - z).max() <= 1e-4 * coding.scale.min()  # each value on its grid
    assert np.allclose(coding.scale[[4, 5]], [(z[:, c].max() - z[:, c].min()) / n
                                              for c, n in ((4, 5), (5, 12))], rtol=1e-6)


@pytest.mark.parametrize("case", ["gaussian", "levels", "nan"])
def test_code_rows_refuses_rows_that_are_not_coded(case: str) -> None:
    rng = np.random.default_rng(2)
    x = _images(400, 5, 3)
    if case == "gaussian":
        x[:, 2] = rng.normal(size=400)
    elif case == "levels":  # 300 levels on one grid: more than int8 holds
        x[:, 2] = rng.integers(0, 300, 400) / 7.0
    else:
        x[5, 1] = np.nan
    assert code_rows(x.astype(np.float32)) is None


def test_norms_bound_the_coded_and_the_float_rows() -> None:
    x = _images(300, 9, 4)
    coding = code_rows(x)
    assert coding is not None
    for ord_ in (1, 2):
        exact = np.linalg.norm(coding.codes * coding.scale + coding.offset, ord=ord_, axis=1)
        plain = np.linalg.norm(x.astype(np.float64), ord=ord_, axis=1)
        got = coding.norms(ord_).astype(np.float64)
        assert (got >= exact).all() and (got >= plain).all()
        assert np.allclose(got, exact, rtol=1e-5)
        sub = coding.rows(np.array([7, 2, 250]))
        assert np.array_equal(sub.norms(ord_), coding.norms(ord_)[[7, 2, 250]])


def test_coded_sum_is_the_exact_sum_of_truncated_residuals() -> None:
    x = _images(700, 11, 5)
    coding = code_rows(x)
    assert coding is not None
    cols = torch.arange(11)
    block = coded_block(torch.as_tensor(x), coding.codes, coding, cols, chunk_rows=256)
    assert block.chunk_rows == 256 and [c.shape for c in block.codes_t] == [(12, 700)]
    res = torch.rand(700, 6, generator=torch.Generator().manual_seed(6)) * 2 - 1
    res[:10] = torch.tensor([1.0, -1.0, 0.0, 1e-6, -1e-6, 0.5])  # the grid's ends and below it
    res[10] = torch.tensor([-1.0, -0.5, 0.999999, 2.0**-23, -(2.0**-23), 0.25])
    sums = CodedSum(block, 6)
    for start in (512, 0, 256):  # chunks in any order
        sums.add(start, res[start:start + 256].clone())
    t = torch.trunc(res * QUANT).long().numpy()  # the grid's integers (the product in float32)
    whole, total = sums.integers()
    assert np.array_equal(whole.numpy(), coding.codes.astype(np.int64).T @ t)  # exact
    assert np.array_equal(total.numpy(), t.sum(axis=0))
    grad, res_sum = sums.result()
    trunc = t / QUANT  # never larger than the residual but for float32's rounding of r QUANT
    assert (np.abs(trunc) <= np.abs(res.double().numpy()) * (1 + 2.0**-23)).all()
    rows = coding.codes * coding.scale + coding.offset  # the coded rows, float64
    want = trunc.T @ rows
    assert np.allclose(grad.double().numpy(), want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    assert np.allclose(res_sum.double().numpy(), trunc.sum(axis=0), rtol=1e-6, atol=1e-9)


def test_coded_sum_refuses_missing_rows_and_splits_large_clients() -> None:
    x = _images(70_000, 3, 11)
    coding = code_rows(x)
    assert coding is not None
    block = coded_block(torch.as_tensor(x), coding.codes, coding, torch.arange(3),
                        chunk_rows=4096)
    assert [c.shape[1] for c in block.codes_t] == [65_536, 4_464]  # int32 sums stay exact
    res = torch.full((70_000, 2), -1.0)
    res[::2, 1] = 1.0  # the largest digits everywhere
    sums = CodedSum(block, 2)
    sums.add(0, res[:60_000].clone())
    with pytest.raises(RuntimeError, match="60000 rows added, the block has 70000"):
        sums.integers()
    sums.add(60_000, res[60_000:].clone())
    whole, total = sums.integers()
    t = torch.trunc(res * QUANT).long().numpy()
    assert np.array_equal(whole.numpy(), coding.codes.astype(np.int64).T @ t)
    assert np.array_equal(total.numpy(), t.sum(axis=0))


def _clients(seed: int) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    x = _images(900, 30, seed)
    x[:300, :4] = x[0, :4]  # client 0 has constant columns
    y = torch.randint(0, 4, (900,), generator=torch.Generator().manual_seed(seed))
    return torch.as_tensor(x), y, np.array([0, 300, 650, 900])


@pytest.mark.parametrize("norm", [Norm.L1, Norm.L2])
def test_mixed_pass_is_close_to_float32(norm: Norm) -> None:
    x, y, off = _clients(7)
    coding = code_rows(x.numpy())
    assert coding is not None
    plain = client_layout(x, y, offsets=off, num_classes=4, norm=norm)
    mixed = client_layout(x, y, offsets=off, num_classes=4, norm=norm, coding=coding,
                          chunk_rows=128)
    assert mixed.blocks is not None and all(b is not None and b.coded for b in mixed.blocks)
    theta = 0.05 * torch.randn(3, 4, 30, generator=torch.Generator().manual_seed(8))
    sel = np.array([[0, 1], [1, 2], [2, 0]])
    clip = 3.0 if norm is Norm.L1 else 0.5
    a = full_batch_sums(plain, theta, sel, clip=clip, norm=norm, chunk_rows=128,
                        with_train_loss=False)
    b = full_batch_sums(mixed, theta, sel, clip=clip, norm=norm, chunk_rows=128,
                        with_train_loss=False)
    scale = a.grad.abs().max()
    assert (b.grad - a.grad).abs().max() < 2e-2 * scale  # bfloat16 logits, 6e-5 residual grid
    assert torch.equal(a.rows, b.rows)
    assert (a.clipped - b.clipped).abs().max() <= 0.05 * a.rows.max()
    a, b = (full_batch_sums(lay, theta, sel, clip=clip, norm=norm, chunk_rows=128,
                            with_train_loss=True) for lay in (plain, mixed))
    assert a.loss_sum is not None and b.loss_sum is not None  # a pass with the training loss:
    assert torch.allclose(b.loss_sum, a.loss_sum, rtol=1e-6)  # float32 on the layout's rows
    assert torch.allclose(b.grad, a.grad, rtol=1e-4, atol=1e-4 * float(a.grad.abs().max()))


@pytest.mark.parametrize("norm", [Norm.L1, Norm.L2])
def test_a_row_moves_the_mixed_sum_by_at_most_the_clip(norm: Norm) -> None:
    """The sensitivity itself: a client's sum with and without one row differs by that row's
    clipped gradient, never more than the clip in the mechanism's norm."""
    x, y, _ = _clients(9)
    coding = code_rows(x.numpy())
    assert coding is not None
    theta = 0.3 * torch.randn(2, 4, 30, generator=torch.Generator().manual_seed(10))
    clip = 2.0 if norm is Norm.L1 else 0.3
    for drop in (0, 17, 299):
        keep = np.delete(np.arange(300), drop)
        sums = []
        for rows in (np.arange(300), keep):
            lay = client_layout(x[rows], y[rows], offsets=np.array([0, len(rows)]),
                                num_classes=4, norm=norm, coding=coding.rows(rows),
                                chunk_rows=64)
            sums.append(full_batch_sums(lay, theta, np.zeros((2, 1), dtype=np.int64),
                                        clip=clip, norm=norm, chunk_rows=64,
                                        with_train_loss=False).grad[:, 0].double())
        moved = torch.linalg.vector_norm(sums[0] - sums[1], ord=1 if norm is Norm.L1 else 2,
                                         dim=1)
        assert (moved <= clip * (1 + 1e-5)).all(), (drop, moved)
        assert (moved > 0).all()


def test_mixed_pass_does_not_depend_on_its_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each row's logits and residual are its own and the integer sums are exact: chunks of
    any size give the same sums, bit for bit (so the pass may pick large ones)."""
    from fedqr.models import logreg_coded

    x, y, off = _clients(12)
    coding = code_rows(x.numpy())
    assert coding is not None
    theta = 0.2 * torch.randn(3, 4, 30, generator=torch.Generator().manual_seed(13))
    sel = np.array([[0, 1], [1, 2], [2, 0]])
    got = []
    for logits in (logreg_coded.CHUNK_LOGITS, 12 * 7, 12 * 64):  # one chunk; 7 or 64 rows
        monkeypatch.setattr(logreg_coded, "CHUNK_LOGITS", logits)
        lay = client_layout(x, y, offsets=off, num_classes=4, norm=Norm.L2, coding=coding,
                            chunk_rows=1)
        got.append(full_batch_sums(lay, theta, sel, clip=0.4, norm=Norm.L2, chunk_rows=1,
                                   with_train_loss=False))
    for other in got[1:]:
        assert torch.equal(other.grad, got[0].grad) and torch.equal(other.clipped, got[0].clipped)
