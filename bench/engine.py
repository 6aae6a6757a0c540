"""Benchmark: ms per FedSGD-DPC round on MNIST logistic regression (Laplace, b = 10, T = 100).

Prints fedqr's engine (1 and 10 batched repeats), a naive per-client autograd loop, this
machine's floor: max(FLOPs / measured float32 GEMM throughput, one pass over the training data
/ measured memory bandwidth), and one training pass (10 clients x 10 repeats) on the dense
layout, with each client's constant columns split off, with the loss and argmax added, and in
the mixed arithmetic (``--arithmetic mixed``: bfloat16 logits, exact int8 gradient sums).
Every engine round includes a test evaluation (10,000 samples).

    FEDQR_DATA=../shared/data python bench/engine.py [--threads 2] [--rounds 100] [--device cpu]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch
from _timing import best_seconds  # bench/ is on sys.path when run as a script
from torch.func import grad, vmap

from fedqr.data import load_dataset, make_partition
from fedqr.models.logreg import Norm
from fedqr.models.logreg_coded import code_rows
from fedqr.models.logreg_pass import client_layout, full_batch_sums
from fedqr.privacy import Mechanism
from fedqr.sim.config import PrivacyConfig, SimConfig
from fedqr.sim.engine import simulate


def machine_floor(n_train: int, n_test: int, p: int, k: int) -> dict[str, float]:
    """Measured GEMM FLOP/s and memory bandwidth, and the implied floor of one round."""
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    gflops = 2 * 2048**3 / best_seconds(lambda: a @ b, 10) / 1e9
    big = torch.randn(64_000_000)  # 256 MB, far beyond the caches
    gbps = big.numel() * 4 / best_seconds(big.sum, 10) / 1e9
    flop = 2 * 2 * n_train * p * k + 2 * n_test * p * k  # forward + backward + test forward
    nbytes = n_train * p * 4
    floor_ms = max(flop / (gflops * 1e9), nbytes / (gbps * 1e9)) * 1e3
    return {"gemm_gflops": gflops, "mem_gbps": gbps, "gflop": flop / 1e9,
            "mbytes": nbytes / 1e6, "floor_ms": floor_ms}


def engine_ms(ds, part, *, rounds: int, repeats: int, device: str) -> float:
    cfg = SimConfig(num_clients=10, clients_per_round=10, rounds=rounds, repeats=repeats,
                    privacy=PrivacyConfig(mechanism=Mechanism.LAPLACE, eps=10.0, clip=300.0,
                                          sample_rate=1.0), eval_every=1)
    marks: list[float] = []
    simulate(ds, part, cfg, device=device, on_round=lambda t: marks.append(time.perf_counter()))
    return (marks[-1] - marks[0]) / (len(marks) - 1) * 1e3  # steady state, setup excluded


def pass_ms(ds, part, *, repeats: int, split: bool, metrics: bool, device: str,
            mixed: bool = False) -> float:
    """One Laplace pass of all 10 clients (``full_batch_sums``) on the dense layout or with
    each client's constant columns split off, with or without the loss and argmax; ``mixed``:
    in the mixed arithmetic (bfloat16 logits, exact int8 gradient sums of the coded rows)."""
    order = np.concatenate(part.indices)
    x = torch.as_tensor(ds.x_train[order], dtype=torch.float32, device=device)
    y = torch.as_tensor(ds.y_train[order], dtype=torch.int64, device=device)
    offsets = np.concatenate([[0], np.cumsum(part.sizes)]).astype(np.int64)
    coding = code_rows(ds.x_train).rows(order) if mixed else None
    layout = client_layout(x, y, offsets=offsets, num_classes=10, norm=Norm.L1, coding=coding,
                           chunk_rows=2048)
    if not split:
        layout = dataclasses.replace(layout, with_blocks=False)
    theta = 0.01 * torch.randn(repeats, 10, x.shape[1], generator=torch.Generator().manual_seed(0))
    sel = np.tile(np.arange(10), (repeats, 1))
    return 1e3 * best_seconds(lambda: full_batch_sums(
        layout, theta.to(device), sel, clip=300.0, norm=Norm.L1, chunk_rows=2048,
        with_train_loss=metrics), 5)


def naive_ms(ds, part, *, rounds: int) -> float:
    """Per-client autograd loop: per-sample gradients materialised with vmap(grad)."""
    xs = [torch.as_tensor(ds.x_train[i]) for i in part.indices]
    ys = [torch.as_tensor(ds.y_train[i]) for i in part.indices]
    xt, yt = torch.as_tensor(ds.x_test), torch.as_tensor(ds.y_test)
    theta = torch.zeros(10, ds.x_train.shape[1])
    gen = torch.Generator().manual_seed(0)

    def loss(th, x, y):
        return torch.nn.functional.cross_entropy((x @ th.T)[None], y[None])

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))
    t0 = time.perf_counter()
    for _ in range(rounds):
        new = torch.zeros_like(theta)
        for x, y in zip(xs, ys, strict=True):
            gs = per_sample(theta, x, y)
            s = torch.clamp(300.0 / gs.flatten(1).abs().sum(1), max=1.0)
            g = (gs * s[:, None, None]).mean(0) + 0.01 * theta
            w = torch.distributions.Laplace(0.0, 0.42).sample(g.shape)
            new += 0.1 * (theta - 0.05 * (g + w))
        theta = new
        with torch.no_grad():
            torch.nn.functional.cross_entropy(xt @ theta.T, yt)
    del gen
    return (time.perf_counter() - t0) / rounds * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--naive-rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ds = load_dataset("mnist")
    part = make_partition("two-digits", labels=ds.y_train, num_clients=10,
                          rng=np.random.default_rng(0))
    fl = machine_floor(len(ds.y_train), len(ds.y_test), ds.x_train.shape[1], 10)
    one = engine_ms(ds, part, rounds=args.rounds, repeats=1, device=args.device)
    ten = engine_ms(ds, part, rounds=args.rounds, repeats=10, device=args.device)
    passes = {(split, metrics): pass_ms(ds, part, repeats=10, split=split, metrics=metrics,
                                        device=args.device)
              for split in (False, True) for metrics in (False, True)}
    mixed = (pass_ms(ds, part, repeats=10, split=True, metrics=False, device=args.device,
                     mixed=True) if args.device == "cpu" else None)
    naive = naive_ms(ds, part, rounds=args.naive_rounds)
    print(f"threads={args.threads} device={args.device}")
    print(f"measured: GEMM {fl['gemm_gflops']:.0f} GFLOP/s, memory {fl['mem_gbps']:.1f} GB/s")
    print(f"round: {fl['gflop']:.2f} GFLOP, {fl['mbytes']:.0f} MB -> floor {fl['floor_ms']:.2f} ms")
    print(f"fedqr engine, 1 repeat : {one:8.2f} ms/round  ({one / fl['floor_ms']:.2f}x floor)")
    print(f"fedqr engine, 10 repeats: {ten:8.2f} ms/round  ({ten / one:.2f}x one repeat)")
    print(f"naive per-client loop  : {naive:8.2f} ms/round  ({naive / one:.1f}x fedqr)")
    dense, split = passes[(False, False)], passes[(True, False)]
    print(f"pass, 10 clients x 10 repeats: dense {dense:.1f} ms, constant columns split off "
          f"{split:.1f} ms ({1 - split / dense:.0%} less); with loss and argmax "
          f"{passes[(True, True)]:.1f} ms ({passes[(True, True)] / split - 1:.0%} more)")
    if mixed is not None:
        print(f"pass in the mixed arithmetic (bfloat16 logits, exact int8 gradient sums): "
              f"{mixed:.1f} ms ({split / mixed:.2f}x the float32 pass with columns split off)")


if __name__ == "__main__":
    main()
