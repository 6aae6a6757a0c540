"""The workload every framework runs: data, clients, the four cases, the per-round clock, and
the reference torch pieces (per-sample clipped sum, noise, test loss) that the peers without a
per-sample clipping feature of their own (pfl, Flower) call.

Imports only numpy, torch and ``fedqr.data`` (the loader and the partitioner), so that every
peer's process can use it.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.func import grad, vmap

NUM_CLIENTS = 10
NUM_CLASSES = 10
WEIGHT_DECAY = 0.01  # fedqr's default: F = CE + (w/2) ||theta||^2, added after clipping
LR = 0.05  # the server's step; it changes no cost
LAPLACE_SCALE = 600.0  # noise scale of a Laplace reply (2 xi / eps with xi = 300, eps = 1)
GAUSSIAN_Z = 1.0  # noise multiplier z: std of a Gaussian reply = z * xi


@dataclass(frozen=True)
class Case:
    """One benchmark case: mechanism, replies per round b, clip norm, clip and sampling rate."""

    name: str
    mechanism: str  # "laplace" | "gaussian"
    b: int
    clip: float
    q: float  # Poisson sampling rate of a client's batch (1.0 = its full data)

    @property
    def norm(self) -> int:
        """Order of the clipping norm: l1 for Laplace, l2 for Gaussian."""
        return 1 if self.mechanism == "laplace" else 2

    @property
    def noise_param(self) -> float:
        """Laplace scale, or Gaussian standard deviation, of the noise added to a clipped sum."""
        return LAPLACE_SCALE if self.mechanism == "laplace" else GAUSSIAN_Z * self.clip


CASES = (
    Case("laplace-b10", "laplace", 10, 300.0, 1.0),
    Case("laplace-b1", "laplace", 1, 300.0, 1.0),
    Case("gaussian-b10", "gaussian", 10, 10.0, 0.01),
    Case("gaussian-b1", "gaussian", 1, 10.0, 0.01),
)
CASE_BY_NAME = {c.name: c for c in CASES}


@dataclass(frozen=True)
class Workload:
    """Training rows split among the clients, and the test set (torch CPU tensors)."""

    source: str  # "mnist (...)" or "random"
    x: tuple[torch.Tensor, ...]  # per client: (6000, 784) float32
    y: tuple[torch.Tensor, ...]  # per client: (6000,) int64
    x_test: torch.Tensor
    y_test: torch.Tensor
    dataset: object  # fedqr.data.Dataset of the same arrays (fedqr's own input)
    partition: object  # fedqr.data.Partition

    @property
    def num_features(self) -> int:
        return int(self.x_test.shape[1])


def load_workload(*, seed: int = 0) -> Workload:
    """Real MNIST from ``$FEDQR_DATA/mnist`` when it is there, else random data of its shape;
    10 IID clients of 6,000 rows each (``fedqr.data.make_partition("iid")``)."""
    from fedqr.data import Dataset, load_dataset, make_partition

    env = os.environ.get("FEDQR_DATA")
    mnist_dir = Path(env) / "mnist" if env else None
    ds = None
    if mnist_dir is not None and mnist_dir.is_dir():
        try:
            ds = load_dataset("mnist", data_dir=mnist_dir, download=False)
            source = f"mnist ({mnist_dir})"
        except Exception as exc:  # a missing or damaged file: fall back, and say why
            source = f"random (loading MNIST from {mnist_dir} failed: {exc})"
    else:
        source = "random (FEDQR_DATA/mnist not found)"
    if ds is None:
        rng = np.random.default_rng(seed)
        ds = Dataset(name="mnist", num_classes=NUM_CLASSES,
                     x_train=rng.standard_normal((60_000, 784), dtype=np.float32),
                     y_train=rng.integers(0, NUM_CLASSES, 60_000, dtype=np.int64),
                     x_test=rng.standard_normal((10_000, 784), dtype=np.float32),
                     y_test=rng.integers(0, NUM_CLASSES, 10_000, dtype=np.int64))
    part = make_partition("iid", labels=ds.y_train, num_clients=NUM_CLIENTS,
                          rng=np.random.default_rng(seed))
    x = tuple(torch.from_numpy(np.ascontiguousarray(ds.x_train[i])) for i in part.indices)
    y = tuple(torch.from_numpy(np.ascontiguousarray(ds.y_train[i])) for i in part.indices)
    return Workload(source=source, x=x, y=y, x_test=torch.from_numpy(ds.x_test),
                    y_test=torch.from_numpy(ds.y_test), dataset=ds, partition=part)


def selected(t: int, b: int) -> list[int]:
    """Round-robin selection of round t (Algorithm 1; fedqr's default)."""
    return [(t * b + j) % NUM_CLIENTS for j in range(b)]


def poisson_rows(n: int, q: float, gen: torch.Generator) -> torch.Tensor | None:
    """Indices of a Poisson(q) sample of n rows; None for the full batch (q = 1)."""
    if q >= 1.0:
        return None
    return torch.nonzero(torch.rand(n, generator=gen) < q).squeeze(1)


def _ce(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy((x @ theta.T)[None], y[None], reduction="sum")


_per_sample_grad = vmap(grad(_ce), in_dims=(None, 0, 0))


def clipped_sum(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, case: Case,
                chunk: int = 2000) -> torch.Tensor:
    """Sum over the rows of the per-sample gradients, each clipped to norm ``case.clip``:
    the generic torch way (``torch.func.vmap(grad)`` materialises every per-sample gradient,
    in chunks of ``chunk`` rows)."""
    out = torch.zeros_like(theta)
    for s in range(0, x.shape[0], chunk):
        gs = _per_sample_grad(theta, x[s:s + chunk], y[s:s + chunk])  # (B, k, p)
        norms = gs.flatten(1).norm(p=case.norm, dim=1)
        scale = torch.clamp(case.clip / (norms + 1e-12), max=1.0)
        out += torch.einsum("i,ijk->jk", scale, gs)
    return out


def add_noise(s: torch.Tensor, case: Case, gen: torch.Generator) -> torch.Tensor:
    """The client's noise on its clipped sum: Laplace(scale) or N(0, (z xi)^2) per coordinate."""
    if case.mechanism == "laplace":
        u = torch.rand(s.shape, generator=gen, dtype=s.dtype) - 0.5
        return s - case.noise_param * torch.sign(u) * torch.log1p(-2 * u.abs())
    return s + case.noise_param * torch.randn(s.shape, generator=gen, dtype=s.dtype)


def server_step(theta: torch.Tensor, noisy: list[torch.Tensor], rows: list[int]) -> torch.Tensor:
    """FedSGD: theta - eta (mean over replies of noisy_sum / d_i + w theta)."""
    g = torch.stack([s / max(d, 1) for s, d in zip(noisy, rows, strict=True)]).mean(0)
    return theta - LR * (g + WEIGHT_DECAY * theta)


@torch.no_grad()
def test_loss(theta: torch.Tensor, wl: Workload) -> float:
    """Mean cross-entropy over the 10,000 test rows."""
    return float(torch.nn.functional.cross_entropy(wl.x_test @ theta.T, wl.y_test))


@dataclass
class RoundClock:
    """Marks the end of every round; the first ``warmup`` rounds are not timed."""

    warmup: int
    marks: list[float] = dataclasses.field(default_factory=list)

    def start(self) -> None:
        self.marks = [time.perf_counter()]

    def tick(self) -> None:
        self.marks.append(time.perf_counter())

    def summary(self) -> dict[str, float | int]:
        ms = [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:], strict=False)]
        timed = ms[self.warmup:]
        if not timed:
            raise RuntimeError(f"no timed round: {len(ms)} rounds, warm-up {self.warmup}")
        return {"ms_median": statistics.median(timed), "ms_mean": statistics.fmean(timed),
                "ms_min": min(timed), "ms_max": max(timed), "rounds_timed": len(timed)}
