"""The machine's floor for one round of a case, as bench/engine.py computes it.

Measured: float32 GEMM throughput (2048 x 2048 matmul) and memory bandwidth (a sum over a
256 MB tensor), best of 10 after a warm-up, with bench/_timing.py's ``best_seconds``: the same
measurement as ``bench/engine.py``'s ``machine_floor``. The floor of a round is
max(FLOPs / GEMM rate, bytes / bandwidth) with, as there, FLOPs = forward + backward over the
training rows a round touches (2 * 2 * rows * p * k) + the test forward (2 * n_test * p * k)
and bytes = the training rows touched (rows * p * 4). For Laplace b = 10 the rows are all
60,000 (each client's full batch) and the formula gives bench/engine.py's number; for Gaussian
the rows are the expected Poisson sample, b * q * 6,000, and the test forward dominates.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from workload import NUM_CLASSES, Case

BENCH = Path(__file__).resolve().parent.parent


def measure_machine() -> dict[str, float]:
    """GEMM GFLOP/s and memory GB/s of this machine (torch's current thread count)."""
    sys.path.insert(0, str(BENCH))
    from _timing import best_seconds  # bench/_timing.py, shared with bench/engine.py

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    gflops = 2 * 2048**3 / best_seconds(lambda: a @ b, 10) / 1e9
    big = torch.randn(64_000_000)  # 256 MB, far beyond the caches
    gbps = big.numel() * 4 / best_seconds(big.sum, 10) / 1e9
    del big
    return {"gemm_gflops": gflops, "mem_gbps": gbps}


def round_floor(case: Case, machine: dict[str, float], *, rows_per_client: int, n_test: int,
                p: int) -> dict[str, float]:
    """FLOPs, bytes and floor (ms) of one round of ``case``."""
    rows = case.b * rows_per_client * case.q
    flop = 2 * 2 * rows * p * NUM_CLASSES + 2 * n_test * p * NUM_CLASSES
    nbytes = rows * p * 4
    floor_s = max(flop / (machine["gemm_gflops"] * 1e9), nbytes / (machine["mem_gbps"] * 1e9))
    return {"rows": rows, "gflop": flop / 1e9, "mbytes": nbytes / 1e6, "floor_ms": floor_s * 1e3}
