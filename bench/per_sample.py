"""Benchmark: per-sample clipped gradients per second for the paper's FEMNIST CNN.

Every method computes, for the same batch and the same model, the sum of per-sample
gradients clipped to l2 norm 1 (and l1 with ``--norm l1``), and is checked against fedqr's
result before it is timed:

- ``fedqr-ghost``: :func:`fedqr.models.per_sample.clipped_grad_sums` (rank-one norms for the
  linear layer, kernel-row batched matmuls for the convolutions; no per-sample linear grads);
- ``fedqr-vmap``: the same function with ``method="vmap"`` (torch.func vmap over grad);
- ``opacus``: Opacus's ``GradSampleModule`` (hooks materialise every per-sample gradient),
  clipped and summed as Opacus's ``DPOptimizer`` does, when opacus is installed
  (``pip install -c constraints.txt '.[bench]'``); always in the default memory format,
  because Opacus 1.6.0's per-sample gradients of a channels-last model are wrong (62%
  relative error against a per-sample autograd loop);
- ``no-clip``: one ordinary forward and backward of the summed loss (no per-sample work),
  the floor.

Methods run interleaved, ``--reps`` times each; the best time is reported (this machine is
shared, so the minimum is the least disturbed). ``--memory`` adds each method's peak extra
resident memory for one chunk, measured in a fresh subprocess (Linux: the high-water mark
``VmHWM`` after resetting it; CUDA: max allocated).

    python bench/per_sample.py [--threads 2] [--rows 1024] [--chunk 256] [--device cpu]
        [--groupnorm]

``--groupnorm`` puts GroupNorm(4) after each convolution (the ghost method takes it since
planner version 20; vmap was the only fedqr method for it before).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fedqr.models.cnn import femnist_cnn
from fedqr.models.per_sample import clipped_grad_sums

Step = Callable[[], Tensor]


def _batch(rows: int, device: torch.device) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(rows, 1, 28, 28, generator=gen).to(device)
    y = torch.randint(0, 62, (rows,), generator=gen).to(device)
    return x, y


def groupnorm_cnn() -> nn.Module:
    """The paper's CNN with GroupNorm(4) after each convolution: the recipe for DP when a
    network needs normalisation (batch normalisation mixes rows: fedqr refuses it, and
    Opacus's ``ModuleValidator.fix`` swaps it for GroupNorm)."""
    torch.manual_seed(1)
    return nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.GroupNorm(4, 16), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(16, 32, 5, padding=2), nn.GroupNorm(4, 32),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 7 * 7, 62))


def _model(device: torch.device, channels_last: bool, groupnorm: bool) -> nn.Module:
    model = (groupnorm_cnn() if groupnorm
             else femnist_cnn(generator=torch.Generator().manual_seed(1))).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return model


def opacus_step(model: nn.Module, x: Tensor, y: Tensor, *, clip: float, norm: str,
                chunk: int) -> Step | None:
    """Opacus GradSampleModule: per-sample grads by hooks, clipped and summed per chunk."""
    try:
        from opacus import GradSampleModule
    except ImportError:
        return None
    gsm = GradSampleModule(model, loss_reduction="sum")
    params = [p for p in gsm.parameters() if p.requires_grad]

    def run() -> Tensor:
        total = torch.zeros(sum(p.numel() for p in params), device=x.device)
        for start in range(0, x.shape[0], chunk):
            xc, yc = x[start:start + chunk], y[start:start + chunk]
            gsm.zero_grad(set_to_none=True)
            F.cross_entropy(gsm(xc), yc, reduction="sum").backward()
            samples = [p.grad_sample for p in params]  # type: ignore[attr-defined]
            per = [g.reshape(g.shape[0], -1) for g in samples]
            if norm == "l1":
                norms = torch.stack([g.abs().sum(1) for g in per], 1).sum(1)
            else:
                norms = torch.stack([g.norm(2, dim=1) for g in per], 1).norm(2, dim=1)
            factor = (clip / (norms + 1e-6)).clamp(max=1.0)  # as DPOptimizer
            total += torch.cat([torch.einsum("i,i...", factor, g) for g in per])
            for p in params:
                p.grad_sample = None  # type: ignore[attr-defined]
        return total

    return run


def steps(x: Tensor, y: Tensor, *, clip: float, norm: str, chunk: int,
          channels_last: bool, groupnorm: bool = False) -> dict[str, Step]:
    """Every method as a zero-argument callable returning the flat clipped sum."""
    model = _model(x.device, channels_last, groupnorm)
    out: dict[str, Step] = {
        "fedqr-ghost": lambda: clipped_grad_sums(model, x, y, clip=clip, norm=norm,
                                                 chunk_rows=chunk).grad[0],
        "fedqr-vmap": lambda: clipped_grad_sums(model, x, y, clip=clip, norm=norm,
                                                chunk_rows=chunk, method="vmap").grad[0],
    }
    op_model = _model(x.device, False, groupnorm)  # Opacus 1.6.0 is wrong with channels-last models
    op = opacus_step(op_model, x, y, clip=clip, norm=norm, chunk=chunk)
    if op is not None:
        out["opacus"] = op

    def plain() -> Tensor:
        grads: list[Tensor] = []
        for start in range(0, x.shape[0], chunk):
            loss = F.cross_entropy(model(x[start:start + chunk]), y[start:start + chunk],
                                   reduction="sum")
            g = torch.autograd.grad(loss, list(model.parameters()))
            grads.append(torch.cat([t.flatten() for t in g]))
        return torch.stack(grads).sum(0)

    out["no-clip"] = plain
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def throughput(args: argparse.Namespace) -> dict[str, float]:
    """Samples per second of every method, best of ``args.reps`` interleaved runs."""
    dev = torch.device(args.device)
    x, y = _batch(args.rows, dev)
    fns = steps(x, y, clip=args.clip, norm=args.norm, chunk=args.chunk,
                channels_last=args.channels_last, groupnorm=args.groupnorm)
    ref = fns["fedqr-ghost"]()
    for name, fn in fns.items():  # warm up and check agreement
        if name != "no-clip":
            err = float((fn() - ref).abs().max() / ref.abs().max())
            if err > 2e-3:  # float32; methods differ in conv algorithm and summation order
                raise SystemExit(f"{name} disagrees with fedqr-ghost: relative error {err:.2e}")
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(args.reps):
        for name, fn in fns.items():
            _sync(dev)
            t = time.perf_counter()
            fn()
            _sync(dev)
            best[name] = min(best[name], time.perf_counter() - t)
    return {name: args.rows / t for name, t in best.items()}


def peak_memory_mb(args: argparse.Namespace, method: str) -> float:
    """Peak extra memory (MB) of one call of ``method``, in a fresh process."""
    cmd = [sys.executable, __file__, "--only", method, "--rows", str(args.chunk),
           "--chunk", str(args.chunk), "--norm", args.norm, "--device", args.device,
           "--threads", str(args.threads)] + (["--channels-last"] if args.channels_last else []
                                              ) + (["--groupnorm"] if args.groupnorm else [])
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["peak_mb"])


def _vm_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _only(args: argparse.Namespace) -> None:
    dev = torch.device(args.device)
    x, y = _batch(args.rows, dev)
    fn = steps(x, y, clip=args.clip, norm=args.norm, chunk=args.chunk,
               channels_last=args.channels_last, groupnorm=args.groupnorm)[args.only]
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        fn()
        peak = (torch.cuda.max_memory_allocated(dev) - base) / 2**20
    else:  # reset the kernel's high-water mark of resident memory, then read it back
        Path("/proc/self/clear_refs").write_text("5")
        base = _vm_kb("VmRSS")
        fn()
        peak = (_vm_kb("VmHWM") - base) / 1024
    print(json.dumps({"method": args.only, "peak_mb": peak}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", type=int, default=1024, help="samples per timed call")
    parser.add_argument("--chunk", type=int, default=256, help="rows per chunk")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--norm", choices=["l1", "l2"], default="l2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--memory", action="store_true", help="also measure peak memory")
    parser.add_argument("--channels-last", action="store_true",
                        help="every model in channels-last memory format (fedqr's engine default)")
    parser.add_argument("--groupnorm", action="store_true",
                        help="the paper's CNN with GroupNorm(4) after each convolution")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.only:
        _only(args)
        return
    rates = throughput(args)
    name = "with GroupNorm (110,622" if args.groupnorm else "(110,526"
    print(f"FEMNIST CNN {name} params), {args.rows} samples, chunks of {args.chunk}, "
          f"{args.norm} clip, {args.device}, {args.threads} threads, "
          f"channels_last={args.channels_last}")
    for name, rate in rates.items():
        mem = f"  peak +{peak_memory_mb(args, name):7.1f} MB" if args.memory else ""
        print(f"  {name:12s} {rate:9.0f} samples/s{mem}")
    if "opacus" in rates:
        print(f"  fedqr-ghost / opacus: {rates['fedqr-ghost'] / rates['opacus']:.2f}x")


if __name__ == "__main__":
    main()
