"""Benchmark: the mixed arithmetic's pass (bfloat16 logits, exact int8 gradient sums) over MNIST.

Two changes of ``fedqr.models.logreg_coded`` are timed against what they replaced, in one
process and alternating, on the paper's partition (10 clients of two digits, 10 repeats):

* **the integer part of one client** (about 6,000 rows, 100 residual columns): the residuals
  stored as the bytes of one int32 each and one int8 product per client (``CodedSum``),
  against three limbs of base 128 written by shifts and masks, one product per 2,048-row
  chunk and an int64 sum of the chunks' products (``LIMBS`` below). Both must give the same
  integers (checked);
* **the whole pass of 10 clients** (``full_batch_sums``) with the float work in chunks of at
  least ``CHUNK_LOGITS`` logits (one chunk per client here) against chunks of 2,048 rows: the
  same sums bit for bit (checked).

    FEDQR_DATA=../shared/data python bench/coded_pass.py [--threads 2] [--rounds 3]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from _timing import best_seconds  # bench/ is on sys.path when run as a script
from torch import Tensor

from fedqr.data import load_dataset, make_partition
from fedqr.models import logreg_coded
from fedqr.models.logreg import Norm
from fedqr.models.logreg_coded import QUANT, CodedSum, code_rows
from fedqr.models.logreg_pass import client_layout, full_batch_sums


def limbs(codes_t: Tensor, res: Tensor, chunk: int) -> tuple[Tensor, Tensor]:
    """The former integer part: ``sum_j t_j c_j`` and ``sum_j t_j`` (int64) from three limbs
    of base 128 per residual, one int8 product per chunk of rows."""
    cols = res.shape[1]
    acc = torch.zeros(codes_t.shape[0], 3 * cols, dtype=torch.int64)
    total = torch.zeros(cols, dtype=torch.int64)
    buf = torch.empty(chunk, 3 * cols, dtype=torch.int8)
    for start in range(0, res.shape[0], chunk):
        t = res[start:start + chunk].mul(float(QUANT)).to(torch.int32)
        n = t.shape[0]
        total += t.sum(dim=0)
        for i in range(3):
            shift = 7 * (2 - i)
            limb = t >> shift if i == 0 else (t >> shift) & 127
            buf[:n, i * cols:(i + 1) * cols].copy_(limb)
        acc += torch._int_mm(codes_t[:, start:start + n].contiguous(), buf[:n])
    whole = acc[:, :cols].clone()
    for i in range(1, 3):
        whole.mul_(128).add_(acc[:, i * cols:(i + 1) * cols])
    return whole, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the timings")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ds = load_dataset("mnist")
    part = make_partition("two-digits", labels=ds.y_train, num_clients=10,
                          rng=np.random.default_rng(0))
    order = np.concatenate(part.indices)
    x = torch.as_tensor(ds.x_train[order], dtype=torch.float32)
    y = torch.as_tensor(ds.y_train[order], dtype=torch.int64)
    offsets = np.concatenate([[0], np.cumsum(part.sizes)]).astype(np.int64)
    coding = code_rows(ds.x_train)
    assert coding is not None  # MNIST's pixels are coded
    layout = client_layout(x, y, offsets=offsets, num_classes=10, norm=Norm.L1,
                           coding=coding.rows(order), chunk_rows=2048)
    assert layout.blocks is not None
    block = layout.blocks[0]
    assert block is not None and block.coded is not None
    coded = block.coded
    res = torch.rand(coded.x16.shape[0], 100, generator=torch.Generator().manual_seed(0)) * 2 - 1
    old_codes = coded.codes_t[0][:-1].contiguous()  # without the row of ones

    def new() -> tuple[Tensor, Tensor]:
        sums = CodedSum(coded, 100)
        sums.add(0, res.clone())
        return sums.integers()

    a, b = new(), limbs(old_codes, res, 2048)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), "the integers differ"
    theta = 0.01 * torch.randn(10, 10, x.shape[1], generator=torch.Generator().manual_seed(0))
    sel = np.tile(np.arange(10), (10, 1))

    def pass_() -> Tensor:
        return full_batch_sums(layout, theta, sel, clip=300.0, norm=Norm.L1, chunk_rows=2048,
                               with_train_loss=False).grad

    default = logreg_coded.CHUNK_LOGITS
    small = 2048 * 100  # 2,048-row chunks at 100 columns
    pass_()  # a warm-up: a process's first exp_ was less precise in 3 of 20 (CHANGELOG)
    logreg_coded.CHUNK_LOGITS = small
    g_small = pass_()
    logreg_coded.CHUNK_LOGITS = default
    assert torch.equal(pass_(), g_small), "the pass depends on its chunks"
    print(f"threads={args.threads}; client 0: {coded.x16.shape[0]} rows, "
          f"{coded.x16.shape[1]} varying columns, 100 residual columns")
    for rnd in range(args.rounds):
        t_new = best_seconds(new, 20) * 1e3
        t_old = best_seconds(lambda: limbs(old_codes, res, 2048), 20) * 1e3
        logreg_coded.CHUNK_LOGITS = small
        p_small = best_seconds(pass_, 5) * 1e3
        logreg_coded.CHUNK_LOGITS = default
        p_big = best_seconds(pass_, 5) * 1e3
        print(f"[{rnd}] integer part of one client: bytes {t_new:.2f} ms, limbs {t_old:.2f} ms "
              f"({t_old / t_new:.2f}x); pass of 10 clients x 10 repeats: chunks of "
              f">= {default:,} logits {p_big:.1f} ms, of 2,048 rows {p_small:.1f} ms "
              f"({p_small / p_big:.2f}x)")


if __name__ == "__main__":
    main()
