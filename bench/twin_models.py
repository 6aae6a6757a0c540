"""The twin for torch models: engine speed, plan time, and the cost model's calibration.

    python bench/twin_models.py [--threads 2] [--part engines,plans] [--budget S]
    python bench/twin_models.py --part calibrate --threads 1 [--engine stacked-norm]

``engines``: one twin round of 24 columns (8 horizons x 3 repeats) for the MLPs
784-64-10 (MNIST) and 10-32-2 (heart disease), and the same with GroupNorm after the first
layer (``-gn``), by the stacked engine (an ``nn.Sequential`` module by module, and
``torch.func.vmap`` for any other model of Linear and norm layers) and column by column (the
kernel's own per-sample pass; ``loop-vmap``: by ``torch.func.vmap``, the only method for
GroupNorm before the ghost method took norm layers): full batches of half the clients, and
Poisson batches.

``plans``: ``make_plan`` from scratch with an MLP for heart disease (the real UCI files of
``$FEDQR_DATA/heart-disease``, prepared by ``examples/heart_disease/prepare.py``; 4 clients,
486 training rows, 10 features) and MNIST (N = 10, 60,000 rows), each with Laplace and with
the Gaussian mechanism; goals: heart disease <= 30 s, MNIST <= 120 s on 2 cores. Prints the
wall and CPU time, the twin's estimate and budget, and what it simulated.

``calibrate``: times batches of both MLPs and both engines (CPU seconds) and fits the
constants of :class:`fedqr.planner.budget.CostModel` (non-negative least squares on the
relative error). ``stacked-norm`` and ``loop-norm``: the same MLPs with GroupNorm after
their first layer on both engines (and, stacked, UCI Adult's 104-24-gn-2 at q = 0.05), priced
by the engine's constants (the "in use" line);
``loop-vmap``: those on the loop with per-sample gradients by ``torch.func.vmap``, which the
planner also prices by the loop's constants (a model the ghost method cannot take:
docs/planner.md, "What the planner gets wrong"); ``--engine`` times one engine's batches only.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from planner_workloads import deployment  # bench/ is on sys.path as a script
from planner_workloads import groupnorm_mlp as groupnorm_factory

from fedqr.data import ClientData, DatasetName, DataSpec, FederatedData
from fedqr.data.source import DataSource, OwnData
from fedqr.models.kernel import Kernel
from fedqr.models.logreg import Norm
from fedqr.models.per_sample import Method
from fedqr.models.sampling import poisson_positions
from fedqr.models.torch_kernel import TorchOptions
from fedqr.models.zoo import make_kernel
from fedqr.planner import Scenario, SearchSettings, make_plan
from fedqr.planner.budget import CONSTANTS, TERMS, CostModel
from fedqr.planner.columns import LoopColumns, StackedColumns
from fedqr.planner.kernels import forward_flops
from fedqr.planner.twin import TwinRun, proxy_rows
from fedqr.planner.twin_kernel import KernelProxy, make_kernel_proxy, simulate_columns_kernel
from fedqr.privacy import Mechanism
from fedqr.sim.config import Aggregation, LearningRate

ROOT = Path(__file__).resolve().parents[1]


def _data_dir() -> Path:
    return Path(os.environ.get("FEDQR_DATA", "/work/shared/data"))


def heart_source(tmp: Path) -> DataSource:
    """Heart disease as ``fedqr run --data`` reads it (FLamby's 4 hospitals)."""
    subprocess.run([sys.executable, str(ROOT / "examples/heart_disease/prepare.py"),
                    "--data-dir", str(_data_dir() / "heart-disease"), "--out", str(tmp)],
                   check=True, capture_output=True)
    return OwnData(data=FederatedData.from_file(tmp / "heart_all.csv",
                                                test_path=tmp / "heart_all_test.csv"))


def mnist_source() -> DataSource:
    """MNIST, N = 10, the paper's two-digit split."""
    return DataSpec(dataset=DatasetName.MNIST, num_clients=10, data_dir=_data_dir() / "mnist")


def mlp(data: ClientData, hidden: int) -> Kernel:
    """Flatten, Linear(p, hidden), ReLU, Linear(hidden, k), built from the run's generator."""
    ds = data.dataset
    return make_kernel("mlp", input_shape=(ds.num_features,), num_classes=ds.num_classes,
                       hidden=(hidden,))


def groupnorm_mlp(data: ClientData, hidden: int, *, vmap: bool = False) -> Kernel:
    """Linear(p, hidden), GroupNorm(4, hidden), Tanh, Linear(hidden, k); ``vmap``: its
    per-sample gradients by ``torch.func.vmap`` (the only method for it before the ghost
    method took norm layers) instead of the ghost method."""
    ds = data.dataset
    options = TorchOptions(method=Method.VMAP) if vmap else None
    return make_kernel(groupnorm_factory(hidden), input_shape=(ds.num_features,),
                       num_classes=ds.num_classes, options=options)


def workloads(tmp: Path) -> Iterator[tuple[str, DataSource, ClientData, Kernel]]:
    """(name, source, client data, MLP kernel) of heart disease and MNIST."""
    for name, source, hidden in (("heart", heart_source(tmp), 32),
                                 ("mnist", mnist_source(), 64)):
        data = source.build()
        yield name, source, data, mlp(data, hidden)


def _proxy(data: ClientData, kernel: Kernel, engine: str) -> KernelProxy:
    share = min(1.0, 4000 / float(data.partition.sizes.sum()))
    rows = proxy_rows(data.partition, share=share, rng=np.random.default_rng(0))
    test = np.arange(min(1000, len(data.dataset.y_test)))
    proxy = make_kernel_proxy(kernel, data, rows=rows, test=data.dataset,
                              real_sizes=data.partition.sizes, norm=Norm.L2,
                              device=torch.device("cpu"), test_rows=test)
    if engine.startswith("loop"):
        return dataclasses.replace(proxy, engine=LoopColumns(kernel.attach(proxy.data)))
    assert isinstance(proxy.engine, StackedColumns)
    if engine == "vmap":
        proxy.engine.sequence = None
    return proxy


def _seconds(f: Callable[[], Any], reps: int) -> tuple[float, float]:
    """(CPU, wall) seconds per call, the best of ``reps`` after a warm-up."""
    f()
    cpu, wall = [], []
    for _ in range(reps):
        c, w = time.process_time(), time.perf_counter()
        f()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return min(cpu), min(wall)


def engines(tmp: Path) -> None:
    """One round of 24 columns per engine (module docstring)."""
    cases = [(name, data, kernel, ("stacked", "vmap", "loop"))
             for name, _, data, kernel in workloads(tmp)]
    for name, data, _, _ in list(cases):
        hidden = 32 if name == "heart" else 64
        cases.append((f"{name}-gn", data, groupnorm_mlp(data, hidden),
                      ("stacked", "vmap", "loop")))
        cases.append((f"{name}-gn", data, groupnorm_mlp(data, hidden, vmap=True),
                      ("loop-vmap",)))
    for name, data, kernel, names in cases:
        n = data.partition.num_clients
        sel = np.arange(n // 2, dtype=np.int64)
        for engine in names:
            proxy = _proxy(data, kernel, engine)
            theta = kernel.init(repeats=24, generator=torch.Generator().manual_seed(0))
            weight = torch.full((len(sel),), 0.01)
            sizes = torch.as_tensor(proxy.proxy_sizes[sel]).expand(3, len(sel))
            pos = poisson_positions(sizes, sample_rate=0.1, generator=torch.Generator())
            full = _seconds(functools.partial(proxy.engine.full, theta, sel, weight, clip=1.0), 3)
            poisson = _seconds(functools.partial(proxy.engine.sampled, theta, sel, weight,
                                                 clip=1.0, positions=pos, repeats=3), 3)
            rows = int(proxy.proxy_sizes[sel].sum())
            print(f"{name:8s} P={kernel.num_params:6d} {engine:9s} full batch ({rows} rows): "
                  f"{1e3 * full[1]:8.1f} ms wall {1e3 * full[0]:8.1f} ms CPU | Poisson "
                  f"({int(pos[1].sum())} rows): {1e3 * poisson[1]:7.1f} ms wall", flush=True)


def plans(tmp: Path, budget: float | None) -> None:
    """``make_plan`` from scratch per workload and mechanism (module docstring)."""
    settings = SearchSettings(time_budget_s=budget) if budget else None
    for name, source, _, kernel in workloads(tmp):
        for mechanism in (Mechanism.LAPLACE, Mechanism.GAUSSIAN):
            laplace = mechanism is Mechanism.LAPLACE
            if name == "heart":
                eps, clip, q = 4.0, (5.0 if laplace else 1.0), (1.0 if laplace else None)
            else:
                eps, clip, q = (10.0 if laplace else 1.0), (300.0 if laplace else 10.0), (
                    1.0 if laplace else 0.01)
            sc = Scenario(data=source, mechanism=mechanism, eps=(eps,), clip=clip,
                          sample_rate=q, kernel=kernel)
            with tempfile.TemporaryDirectory() as cache:
                os.environ["FEDQR_CACHE"] = cache
                c, w = time.process_time(), time.perf_counter()
                plan = make_plan(sc, settings=settings)
                cpu, wall = time.process_time() - c, time.perf_counter() - w
            r, sim = plan.recommended, plan.settings["simulated"]
            print(f"{name:6s} {mechanism.value:8s} wall {wall:6.1f} s  CPU {cpu:6.1f} s  "
                  f"(twin {sim['sim_time_s']:.1f} s, estimated {sim['estimated_s']:.1f} s of "
                  f"{sim['time_budget_s']:.0f} s)\n"
                  f"       T={r.rounds} b={r.clients_per_round} q={r.sample_rate:g} predicted "
                  f"{r.mean:.4f} +- {r.stderr:.4f} (untrained {plan.untrained_loss:.4f}); "
                  f"{sim['rounds']} rounds, {sim['column_rounds']} column-rounds, "
                  f"{sim['columns']} columns, {sim['row_gradients']} row gradients, "
                  f"{sim['proxy_rows']} proxy rows, {plan.data_used['test_rows']} test rows, "
                  f"{plan.settings['repeats']} repeats; skipped: "
                  f"{len(sim['skipped_for_budget'])} batches; {plan.message}", flush=True)


_SHAPES = (([0, 1, 2, 4, 8, 16], 3), ([32], 3), ([0, 2, 8], 8), ([200], 3),
           ([0, 1, 2, 4, 8, 16, 32, 64], 6), ([0, 1, 2, 4, 8, 16, 32, 64], 12))
"""(horizons, repeats) of the calibration batches."""


def _calibration_sets(tmp: Path) -> Iterator[tuple[str, ClientData, Kernel, str, list[Any]]]:
    """(name, data, kernel, engine, batch shapes): both MLPs on both engines, and the paper's
    CNN on a 5% FEMNIST (column by column: its only engine)."""
    for name, _, data, kernel in workloads(tmp):
        for engine in ("stacked", "loop"):
            shapes = [(hs, k) for hs, k in _SHAPES if name == "heart" or (
                engine == "stacked" and k <= 8)]
            yield name, data, kernel, engine, shapes
    heart, mnist = heart_source(tmp).build(), mnist_source().build()
    adult = deployment("adult").build()  # 20 clients, 30,162 rows: 104-24-gn-2 at q = 0.05
    for engine in ("stacked-norm", "loop-norm", "loop-vmap"):
        vmap = engine == "loop-vmap"
        yield "heart-groupnorm", heart, groupnorm_mlp(heart, 32, vmap=vmap), engine, [
            (hs, k) for hs, k in _SHAPES if k <= 6 or engine == "stacked-norm"]
        if engine == "stacked-norm":
            yield "adult-groupnorm", adult, groupnorm_mlp(adult, 24), engine, [
                (hs, k) for hs, k in _SHAPES if k <= 6]
        # 50,890 parameters against heart's 482: rows x params
        yield "mnist-groupnorm", mnist, groupnorm_mlp(mnist, 64, vmap=vmap), engine, (
            [(hs, k) for hs, k in _SHAPES if k <= 8] if engine == "stacked-norm"
            else [([0, 1, 2, 4, 8], 3), ([16], 2)])
    femnist = DataSpec(dataset=DatasetName.FEMNIST, fraction=0.05, num_clients=10,
                       data_dir=_data_dir() / "femnist").build()
    ds = femnist.dataset
    cnn = make_kernel("cnn", input_shape=ds.image_shape or (ds.num_features,),
                      num_classes=ds.num_classes)
    yield "femnist", femnist, cnn, "loop", [([0, 1, 2, 4], 3), ([8], 2), ([0, 2], 6)]


def _batches(tmp: Path, only: str | None) -> Iterator[tuple[str, dict[str, float], float]]:
    """(engine, cost-model counts, CPU seconds) of timed batches (of the engine ``only``)."""
    for name, data, kernel, engine, shapes in _calibration_sets(tmp):
        if only is not None and engine != only:
            continue
        n = data.partition.num_clients
        proxy = _proxy(data, kernel, engine)
        cost = CostModel(engine=engine.split("-")[0], num_params=proxy.num_params, num_clients=n,
                         proxy_rows=int(proxy.proxy_sizes.sum()),
                         real_rows=int(data.partition.sizes.sum()), test_rows=proxy.num_test,
                         features=data.dataset.num_features, flops=forward_flops(kernel))
        for q in (0.01, 1.0):
            for b in sorted({1, n // 2, n}):
                for hs, k in shapes:
                    if name.startswith("adult") and q == 1.0:
                        continue  # its plans are Gaussian at q = 0.05
                    if not name.startswith("heart") and q == 1.0 and (
                            max(hs) > 100 or b == n or engine in ("loop-vmap", "loop-norm")):
                        continue  # minutes each
                    run = TwinRun(mechanism=Mechanism.GAUSSIAN, clients_per_round=b,
                                  sample_rate=q, clip=1.0, lr=LearningRate(eta0=0.1),
                                  weight_decay=0.01, aggregation=Aggregation.PAPER, repeats=k)
                    init = proxy.initial(repeats=k, seed=0)
                    c = time.process_time()
                    simulate_columns_kernel(proxy, run, horizons=np.array(hs),
                                            std=np.full((len(hs), n), 0.01),
                                            generator=torch.Generator(), init=init)
                    yield engine, cost.counts(b=b, q=q, horizons=hs, repeats=k), (
                        time.process_time() - c)


def calibrate(tmp: Path, only: str | None = None) -> None:
    """Fit :data:`fedqr.planner.budget.CONSTANTS` to measured batches (module docstring)."""
    from scipy.optimize import nnls

    recs = list(_batches(tmp, only))
    for engine in dict.fromkeys(e for e, _, _ in recs):
        xa = np.asarray([[c[t] for t in TERMS] for e, c, _ in recs if e == engine], dtype=float)
        ya = np.asarray([s for e, _, s in recs if e == engine])
        w = 1 / np.maximum(ya, 1e-3)
        coef, _ = nnls(xa * w[:, None], ya * w)
        now = np.asarray([CONSTANTS[engine.split("-")[0]][t] for t in TERMS])
        for label, c in (("fitted", coef), ("in use", now)):
            ratio = xa @ c / ya
            print(f"{engine} {label}: " + ", ".join(f"{t} {v:.3g}" for t, v in zip(
                TERMS, c, strict=True)) + f"; estimate / measured {ratio.min():.2f}.."
                f"{ratio.max():.2f} (median {np.median(ratio):.2f}, {len(ya)} batches)")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--part", default="engines,plans")
    ap.add_argument("--engine", default=None,
                    help="calibrate: only this engine's batches (stacked, loop, stacked-norm, "
                         "loop-norm, loop-vmap)")
    ap.add_argument("--budget", type=float, default=None,
                    help="time_budget_s of the plans (default: the planner's)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, load "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for part in args.part.split(","):
            {"engines": lambda: engines(Path(tmp)), "plans": lambda: plans(Path(tmp), args.budget),
             "calibrate": lambda: calibrate(Path(tmp), args.engine)}[part]()


if __name__ == "__main__":
    main()
