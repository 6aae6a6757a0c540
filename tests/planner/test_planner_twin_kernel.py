"""The kernel twin: the engine's run without noise, the logistic twin's draws with noise."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from fedqr.data import ClientData, DatasetName, DataSpec, PartitionKind
from fedqr.models.kernel import Kernel, KernelData
from fedqr.models.logreg import Norm
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.models.zoo import make_kernel
from fedqr.planner import Scenario
from fedqr.planner.columns import LoopColumns, StackedColumns, column_engine
from fedqr.planner.noise import NoiseBook
from fedqr.planner.twin import TwinRun, make_proxy, simulate_columns
from fedqr.planner.twin_kernel import KernelProxy, make_kernel_proxy, simulate_columns_kernel
from fedqr.privacy import Mechanism
from fedqr.sim.config import Aggregation, LearningRate, PrivacyConfig, SimConfig
from fedqr.sim.loop import run_rounds

DATA = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.DIRICHLET, alpha=0.5,
                num_clients=4, seed=2)
CPU = torch.device("cpu")


class _TwoLayer(nn.Module):  # Linear layers only, but not an nn.Sequential: the vmap path
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(64, 12), nn.Linear(12, 10, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.b(torch.tanh(self.a(x)))
        return out


class _NormTwoLayer(nn.Module):  # a GroupNorm between, not an nn.Sequential: the vmap path
    def __init__(self) -> None:
        super().__init__()
        self.a, self.n = nn.Linear(64, 12), nn.GroupNorm(3, 12)
        self.b = nn.Linear(12, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.b(torch.tanh(self.n(self.a(x))))
        return out


def _mlp() -> Kernel:
    return make_kernel("mlp", input_shape=(64,), num_classes=10, hidden=(16,))


def _norm_mlp(norm: str) -> Kernel:
    """An nn.Sequential MLP with a norm layer on its features (RMSNorm before the first
    Linear layer, on the shared input rows)."""
    def build(shape: tuple[int, ...], k: int) -> nn.Module:
        if norm == "rmsnorm-first":
            return nn.Sequential(nn.RMSNorm(64), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, k))
        layer = {"groupnorm": nn.GroupNorm(4, 16), "layernorm": nn.LayerNorm(16),
                 "groupnorm-fixed": nn.GroupNorm(4, 16, affine=False)}[norm]
        return nn.Sequential(nn.Linear(64, 16), layer, nn.Tanh(), nn.Linear(16, k))
    return make_kernel(build, input_shape=(64,), num_classes=10)


def _proxy(kernel: Kernel, norm: Norm, *, loop: bool = False, half: bool = False
           ) -> tuple[ClientData, KernelProxy]:
    data = DATA.build()
    rows = tuple(np.asarray(i)[: len(i) // 2 if half else None] for i in data.partition.indices)
    proxy = make_kernel_proxy(kernel, data, rows=rows, test=data.dataset,
                              real_sizes=data.partition.sizes, norm=norm, device=CPU)
    if loop:
        proxy = dataclasses.replace(proxy, engine=LoopColumns(kernel.attach(proxy.data)))
    return data, proxy


@pytest.mark.parametrize(("aggregation", "loop", "repeats"),
                         [(Aggregation.PAPER, False, 2), (Aggregation.NORMALIZED, False, 1),
                          (Aggregation.PAPER, True, 1)])
def test_without_noise_the_kernel_twin_is_run_rounds(aggregation: Aggregation, loop: bool,
                                                     repeats: int) -> None:
    """Each column's test loss is the round loop's with the same kernel, data and seed."""
    kernel = _mlp()
    data, proxy = _proxy(kernel, Norm.L2, loop=loop)
    assert proxy.engine.name == ("loop" if loop else "stacked")
    lr = LearningRate(eta0=0.3)
    run = TwinRun(mechanism=Mechanism.NONE, clients_per_round=3, sample_rate=1.0, clip=2.0,
                  lr=lr, weight_decay=0.01, aggregation=aggregation, repeats=repeats)
    horizons = np.array([0, 5, 2, 9]) if repeats > 1 else np.array([7])
    losses = simulate_columns_kernel(proxy, run, horizons=horizons,
                                     std=np.zeros((len(horizons), 4)),
                                     generator=torch.Generator().manual_seed(0),
                                     init=proxy.initial(repeats=repeats, seed=3))
    for t, row in zip(horizons, losses, strict=True):
        cfg = SimConfig(num_clients=4, clients_per_round=3, rounds=int(t), lr=lr,
                        aggregation=aggregation, eval_every=max(1, int(t)), repeats=repeats,
                        seed=3, privacy=PrivacyConfig(mechanism=Mechanism.NONE, clip=2.0,
                                                      sample_rate=1))
        result = run_rounds(data.dataset, data.partition, cfg, kernel)
        want = [r["rounds"][-1]["test_loss"] for r in result.runs]
        np.testing.assert_allclose(row, want, rtol=2e-5)
    assert len(set(losses[0])) == repeats  # repeats start from different models


@pytest.mark.parametrize("mechanism", [Mechanism.GAUSSIAN, Mechanism.LAPLACE])
def test_with_logreg_the_kernel_twin_draws_the_logistic_twins_numbers(
        mechanism: Mechanism) -> None:
    """The kernel twin run with the logistic kernel reproduces the fused logistic twin with
    noise and Poisson batches: the same draws, in the same order, scaled the same way."""
    norm = Norm.L1 if mechanism is Mechanism.LAPLACE else Norm.L2
    q, clip = (1.0, 20.0) if mechanism is Mechanism.LAPLACE else (0.3, 3.0)
    kernel = LogRegKernel(num_features=64, num_classes=10)
    data, proxy = _proxy(kernel, norm, half=True)
    fused = make_proxy(data, rows=tuple(np.asarray(i)[: len(i) // 2]
                                        for i in data.partition.indices),
                       test=data.dataset, real_sizes=proxy.real_sizes, norm=norm, device=CPU,
                       products="float32")  # the kernel twin multiplies in float32
    sc = Scenario(data=DATA, mechanism=mechanism, eps=(3.0,), clip=clip, sample_rate=q,
                  lr=LearningRate(eta0=0.3))
    hs = np.array([0, 6, 2, 9])
    std = NoiseBook(scenario=sc, sizes=proxy.real_sizes).std(b=2, rounds=hs, sample_rate=q)
    run = TwinRun(mechanism=mechanism, clients_per_round=2, sample_rate=q, clip=clip,
                  lr=sc.lr, weight_decay=0.01, aggregation=Aggregation.PAPER, repeats=3)
    want = simulate_columns(fused, run, horizons=hs, std=std,
                            generator=torch.Generator().manual_seed(4))
    got = simulate_columns_kernel(proxy, run, horizons=hs, std=std,
                                  generator=torch.Generator().manual_seed(4),
                                  init=proxy.initial(repeats=3, seed=0))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert np.ptp(want[1]) > 1e-3  # the noise is there


@pytest.mark.parametrize(("kernel_of", "mechanism"), [
    (_mlp, Mechanism.GAUSSIAN),
    (lambda: make_kernel(lambda shape, k: _TwoLayer(), input_shape=(64,), num_classes=10),
     Mechanism.GAUSSIAN),
    (lambda: make_kernel(lambda shape, k: _NormTwoLayer(), input_shape=(64,),
                         num_classes=10), Mechanism.GAUSSIAN),
    (lambda: _norm_mlp("groupnorm"), Mechanism.GAUSSIAN),
    (lambda: _norm_mlp("layernorm"), Mechanism.LAPLACE),
    (lambda: _norm_mlp("rmsnorm-first"), Mechanism.LAPLACE),
    (lambda: _norm_mlp("groupnorm-fixed"), Mechanism.LAPLACE)])
def test_the_stacked_engine_is_the_loop_with_noise(kernel_of: object,
                                                   mechanism: Mechanism) -> None:
    """All columns in one pass (nn.Sequential, or vmap for any other model of Linear and
    norm layers) give the column-by-column results, Poisson batches and noise included."""
    kernel = kernel_of()  # type: ignore[operator]
    norm = Norm.L1 if mechanism is Mechanism.LAPLACE else Norm.L2
    _, stacked = _proxy(kernel, norm)
    _, loop = _proxy(kernel, norm, loop=True)
    assert isinstance(stacked.engine, StackedColumns)
    sequence = isinstance(kernel.build(torch.Generator()), nn.Sequential)
    assert (stacked.engine.sequence is not None) == sequence
    run = TwinRun(mechanism=mechanism, clients_per_round=2, sample_rate=0.2,
                  clip=1.0 if norm is Norm.L2 else 5.0,  # l1 norms are larger
                  lr=LearningRate(eta0=0.5), weight_decay=0.01,
                  aggregation=Aggregation.PAPER, repeats=3)
    hs = np.array([4, 0, 8])
    std = np.full((3, 4), 0.02)
    out = [simulate_columns_kernel(p, run, horizons=hs, std=std,
                                   generator=torch.Generator().manual_seed(9),
                                   init=p.initial(repeats=3, seed=1)) for p in (stacked, loop)]
    np.testing.assert_allclose(out[0], out[1], rtol=1e-5)
    assert np.all(out[0][2] < out[0][1])  # it learns


def test_column_engine_falls_back_to_the_loop() -> None:
    """A model with a parameter outside Linear and norm layers (PReLU) runs column by
    column."""
    kernel = make_kernel(lambda shape, k: nn.Sequential(nn.Linear(64, 8), nn.PReLU(),
                                                        nn.Linear(8, 10)),
                         input_shape=(64,), num_classes=10)
    data = DATA.build()
    x = torch.as_tensor(data.dataset.x_train[:40])
    kd = KernelData(x=x, y=torch.as_tensor(data.dataset.y_train[:40]),
                    offsets=np.array([0, 20, 40]), x_test=x, y_test=torch.zeros(40).long(),
                    norm=Norm.L2, chunk_rows=64)
    assert column_engine(kernel, kernel.attach(kd), kd).name == "loop"
    assert column_engine(_mlp(), _mlp().attach(kd), kd).name == "stacked"


@pytest.mark.parametrize("mechanism", [Mechanism.LAPLACE, Mechanism.GAUSSIAN])
def test_with_noise_the_kernel_twin_has_the_round_loops_loss_distribution(
        mechanism: Mechanism) -> None:
    """An MLP on the clients' full data: the twin's final loss and the round loop's have one
    distribution (Welch t-test and two-sample Kolmogorov-Smirnov over 16 repeats each). The
    noise dominates here: half of it moves the twin's mean loss by 5-9 standard errors."""
    from scipy import stats

    norm = Norm.L1 if mechanism is Mechanism.LAPLACE else Norm.L2
    kernel = make_kernel("mlp", input_shape=(64,), num_classes=10, hidden=(8,))
    data, proxy = _proxy(kernel, norm)
    q = 1.0 if mechanism is Mechanism.LAPLACE else 0.3
    clip = 20.0 if mechanism is Mechanism.LAPLACE else 30.0
    sc = Scenario(data=DATA, mechanism=mechanism, eps=(1.0,), clip=clip, sample_rate=q,
                  lr=LearningRate(eta0=0.3))
    t, b, reps = 8, 2, 16
    std = NoiseBook(scenario=sc, sizes=data.partition.sizes).std(b=b, rounds=[t], sample_rate=q)
    run = TwinRun(mechanism=mechanism, clients_per_round=b, sample_rate=q, clip=clip,
                  lr=sc.lr, weight_decay=0.01, aggregation=Aggregation.PAPER, repeats=reps)
    twin = simulate_columns_kernel(proxy, run, horizons=np.array([t]), std=std,
                                   generator=torch.Generator().manual_seed(11),
                                   init=proxy.initial(repeats=reps, seed=1))[0]
    cfg = sc.sim_config(rounds=t, clients_per_round=b, sample_rate=q, repeats=reps, seed=5,
                        eval_every=t)
    loop = [r["rounds"][-1]["test_loss"]
            for r in run_rounds(data.dataset, data.partition, cfg, kernel).runs]
    assert np.ptp(twin) > 1e-3 and np.ptp(loop) > 1e-3  # noisy
    assert stats.ttest_ind(twin, loop, equal_var=False).pvalue > 1e-3
    assert stats.ks_2samp(twin, loop).pvalue > 1e-3
