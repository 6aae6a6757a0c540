"""CSR rows with a background: the logistic passes give the dense results, only faster."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedqr.models import sparse_rows
from fedqr.models.logreg import Norm, row_norms
from fedqr.models.logreg_eval import evaluate
from fedqr.models.logreg_pass import ClientLayout, client_layout, full_batch_sums
from fedqr.models.sparse_rows import SparseCache, SparseRows, background, density, pays


def _images(n: int, p: int, *, seed: int, ink: float = 0.15,
            per_column: bool = False) -> torch.Tensor:
    """Standardised sparse 'images': a background value almost everywhere (one scalar, or one
    per column as per-column standardisation gives), random ink on a share ``ink``."""
    g = torch.Generator().manual_seed(seed)
    raw = torch.rand(n, p, generator=g) * (torch.rand(n, p, generator=g) < ink)
    if per_column:
        mean, std = torch.rand(p, generator=g), 0.5 + torch.rand(p, generator=g)
        return (raw - mean) / std
    return (raw - 0.13) / 0.31


def test_background_is_each_columns_mode() -> None:
    x = _images(200, 12, seed=0, per_column=True)
    m = background(x)
    assert m is not None and m.shape == (12,)
    assert density(x, m) < 0.3 < density(x)  # the background makes it sparse
    assert background(torch.zeros(5, 3)) is None and density(torch.zeros(0, 3)) == 1.0


@pytest.mark.parametrize("cols", [1, 7, 10, 16, 20])  # padded to 4, 8, 12; as given
@pytest.mark.parametrize("per_column", [False, True])
def test_products_equal_dense(per_column: bool, cols: int) -> None:
    x = _images(300, 40, seed=1, per_column=per_column)
    rows = SparseRows.of(x, offset=background(x), transpose=True)
    assert rows.csr.crow_indices().dtype == torch.int32  # the faster index type
    w_t = torch.randn(40, cols, generator=torch.Generator().manual_seed(2))
    s = torch.randn(300, cols, generator=torch.Generator().manual_seed(3))
    got = rows.mm(w_t)
    assert got.shape == (300, cols)
    torch.testing.assert_close(got, x @ w_t, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.view(300, 1, cols), (x @ w_t).view(300, 1, cols),
                               rtol=1e-5, atol=1e-5)  # a padded product's view reshapes
    torch.testing.assert_close(rows.tmm(s), s.T @ x, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="transpose"):
        SparseRows.of(x, offset=None, transpose=False).tmm(s)


def test_padded_columns_are_the_next_multiple_of_4_below_16() -> None:
    assert [sparse_rows.padded_columns(c) for c in (1, 4, 5, 10, 12, 15, 16, 17, 30)] == [
        4, 4, 8, 12, 12, 16, 16, 17, 30]


def test_pays_crosses_where_measured() -> None:
    assert pays(0.19, 10) and pays(0.19, 42) and not pays(0.19, 43)
    assert not pays(0.6, 1) and not pays(0.3, 1)  # the copies would outweigh the dense rows
    assert pays(0.01, 800)


def test_cache_builds_only_what_pays() -> None:
    x = torch.cat([_images(50, 30, seed=4), torch.randn(50, 30)])
    cache = SparseCache.of(x, [(0, 50), (50, 100)], transpose=False)
    assert not cache._scan  # nothing measured before it is asked for
    assert cache.density_of(0) < 0.3 and cache.density_of(1) > 0.9
    assert cache.get(1, 10) is None and cache.get(0, 1000) is None
    assert not cache._built  # deciding builds nothing
    pieces = cache.get(0, 10)
    assert pieces is not None and cache.get(0, 10) is pieces


def _layouts(norm: Norm) -> tuple[ClientLayout, ClientLayout, np.ndarray]:
    sizes = [70, 45, 60]
    x = _images(sum(sizes), 30, seed=5)
    y = torch.randint(0, 4, (sum(sizes),), generator=torch.Generator().manual_seed(6))
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    sparse = client_layout(x, y, offsets=off, num_classes=4, norm=norm)
    dense = ClientLayout(x=x, y=y, x_norm=row_norms(x, norm), offsets=off, num_classes=4)
    return sparse, dense, off


@pytest.mark.parametrize("norm", [Norm.L1, Norm.L2])
@pytest.mark.parametrize("with_train_loss", [False, True])
def test_sparse_pass_equals_dense_pass(norm: Norm, with_train_loss: bool,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sparse_rows, "SPARSE_CHUNK_ROWS", 32)  # several pieces per client
    sparse, dense, _ = _layouts(norm)
    theta = torch.randn(2, 4, 30, generator=torch.Generator().manual_seed(7))
    sel = np.array([[0, 1], [1, 2]])  # repeats select different clients
    a, b = (full_batch_sums(layout, theta, sel, clip=2.0, norm=norm, chunk_rows=16,
                            with_train_loss=with_train_loss) for layout in (sparse, dense))
    assert sparse.sparse is not None and sparse.sparse._built  # the sparse pass ran
    assert len(sparse.sparse._built[0]) == 3  # 70 rows in pieces of 32
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-4)
    assert torch.equal(a.clipped, b.clipped) and torch.equal(a.rows, b.rows)
    assert 0 < float(a.clipped.sum()) < float(a.rows.sum())  # the clip binds on some rows
    if with_train_loss:
        assert a.loss_sum is not None and b.loss_sum is not None
        torch.testing.assert_close(a.loss_sum, b.loss_sum, rtol=1e-5, atol=1e-4)


def test_evaluate_sparse_equals_dense() -> None:
    x = _images(500, 30, seed=8, per_column=True)
    y = torch.randint(0, 4, (500,), generator=torch.Generator().manual_seed(9))
    theta = torch.randn(3, 4, 30, generator=torch.Generator().manual_seed(10))
    cache = SparseCache.of(x, [(0, 500)], transpose=False)
    loss, correct = evaluate(x, y, theta, chunk_rows=64, sparse=cache)
    assert cache._built  # 3 x 4 columns pay at this density
    loss_d, correct_d = evaluate(x, y, theta, chunk_rows=64)
    torch.testing.assert_close(loss, loss_d, rtol=1e-5, atol=1e-4)
    assert torch.equal(correct, correct_d)


def test_a_one_off_evaluation_builds_nothing() -> None:
    x = _images(200, 30, seed=11)
    y = torch.randint(0, 4, (200,), generator=torch.Generator().manual_seed(12))
    theta = torch.randn(1, 4, 30, generator=torch.Generator().manual_seed(13))
    cache = SparseCache.of(x, [(0, 100), (100, 200)], transpose=True)
    loss, _ = evaluate(x, y, theta, chunk_rows=64, sparse=cache, build_sparse=False)
    assert not cache._built  # dense throughout
    assert cache.get(1, 4) is not None  # built by a pass: now the evaluation uses it
    both, _ = evaluate(x, y, theta, chunk_rows=64, sparse=cache, build_sparse=False)
    assert set(cache._built) == {1}
    torch.testing.assert_close(both, loss, rtol=1e-5, atol=1e-4)


def test_only_cpu_rows_go_sparse() -> None:
    x = _images(60, 30, seed=14)
    meta = SparseCache.of(x.to("meta"), [(0, 60)], transpose=False)
    assert meta.get(0, 10) is None  # any other device keeps its dense products
    assert SparseCache.of(x, [(0, 60)], transpose=False).get(0, 10) is not None
