"""Batched passes: the constant-column split of a client's rows changes nothing but speed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedqr.models.logreg import Norm, row_norms
from fedqr.models.logreg_pass import ClientLayout, client_block, client_layout, full_batch_sums


def _rows(seed: int) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Three clients of 7 features; client 0 has 3 constant columns (one of them 0), client 1
    has 2, client 2 none."""
    g = torch.Generator().manual_seed(seed)
    sizes = [40, 25, 33]
    x = torch.randn(sum(sizes), 7, generator=g)
    x[:40, [1, 4]] = torch.tensor([0.7, -1.3])
    x[:40, 6] = 0.0
    x[40:65, [0, 2]] = torch.tensor([2.0, 0.0])
    y = torch.randint(0, 3, (sum(sizes),), generator=g)
    return x, y, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def test_client_block_splits_exactly() -> None:
    x, _, _ = _rows(0)
    block = client_block(x[:40])
    assert block is not None
    assert block.cols.tolist() == [0, 2, 3, 5] and block.const_cols.tolist() == [1, 4, 6]
    rebuilt = torch.empty(40, 7)
    rebuilt[:, block.cols] = block.x
    rebuilt[:, block.const_cols] = block.const_vals
    assert torch.equal(rebuilt, x[:40])
    assert client_block(x[65:]) is None  # nothing constant: the dense pass
    assert client_block(x[:0]) is None
    wide = torch.randn(50, 64, generator=torch.Generator().manual_seed(1))
    wide[:, :3] = 1.0
    assert client_block(wide) is None  # 3 of 64 < 1/16: not worth a split
    wide[:, 3] = 1.0
    assert client_block(wide) is not None


@pytest.mark.parametrize("norm", [Norm.L1, Norm.L2])
@pytest.mark.parametrize("with_train_loss", [False, True])
def test_split_pass_equals_dense_pass(norm: Norm, with_train_loss: bool) -> None:
    x, y, off = _rows(2)
    split = client_layout(x, y, offsets=off, num_classes=3, norm=norm)
    assert split.blocks is not None and [b is None for b in split.blocks] == [False, False, True]
    dense = ClientLayout(x=x, y=y, x_norm=row_norms(x, norm), offsets=off, num_classes=3)
    theta = torch.randn(4, 3, 7, generator=torch.Generator().manual_seed(3))
    sel = np.array([[0, 1], [1, 2], [0, 2], [0, 1]])  # repeats select different clients
    a, b = (full_batch_sums(layout, theta, sel, clip=1.0, norm=norm, chunk_rows=16,
                            with_train_loss=with_train_loss) for layout in (split, dense))
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
    assert torch.equal(a.clipped, b.clipped) and torch.equal(a.rows, b.rows)
    assert float(a.clipped.sum()) > 0  # the clip binds, so scaling is exercised
    if with_train_loss:
        assert a.loss_sum is not None and b.loss_sum is not None
        torch.testing.assert_close(a.loss_sum, b.loss_sum)
    else:
        assert a.loss_sum is None


def test_a_one_row_client_is_all_bias() -> None:
    x, y, _ = _rows(4)
    x, y = x[:41], y[:41]  # client 1 keeps a single row: every column is constant over it
    off = np.array([0, 40, 41])
    split = client_layout(x, y, offsets=off, num_classes=3, norm=Norm.L2)
    assert split.blocks is not None and split.blocks[1] is not None
    assert split.blocks[1].x.shape == (1, 0)
    dense = ClientLayout(x=x, y=y, x_norm=row_norms(x, Norm.L2), offsets=off, num_classes=3)
    theta = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(5))
    sel = np.array([[0, 1], [0, 1]])
    a, b = (full_batch_sums(layout, theta, sel, clip=0.5, norm=Norm.L2, chunk_rows=16,
                            with_train_loss=True) for layout in (split, dense))
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)


def test_blocks_are_built_on_first_use_only() -> None:
    """A layout scans and copies its clients' rows only when a full-batch pass asks: a run of
    Poisson batches never does."""
    x, y, off = _rows(4)
    lay = client_layout(x, y, offsets=off, num_classes=3, norm=Norm.L2)
    assert "blocks" not in vars(lay)
    blocks = lay.blocks
    assert "blocks" in vars(lay) and lay.blocks is blocks  # built once
    assert blocks is not None and len(blocks) == 3
    for i, b in enumerate(blocks):
        eager = client_block(x[int(off[i]):int(off[i + 1])])
        assert (b is None) == (eager is None)
        if b is not None and eager is not None:
            assert torch.equal(b.x, eager.x) and torch.equal(b.cols, eager.cols)
    plain = ClientLayout(x=x, y=y, x_norm=row_norms(x, Norm.L2), offsets=off, num_classes=3)
    assert plain.blocks is None
