"""The digital twin for any model kernel: the column scheme of :mod:`fedqr.planner.twin`.

Softmax regression keeps its own fused twin (:func:`fedqr.planner.twin.simulate_columns`);
every other :class:`~fedqr.models.kernel.Kernel` (an MLP, the paper's CNN, a user's torch
model) is simulated here with the same scheme: proxy rows, the real deployment's noise std
per client and horizon, weights by the real ``d_i``, the Poisson rate raised to
``q sum(d) / sum(m)`` on the proxy, ``C K`` columns for the horizons and repeats of one b,
common random numbers (the Poisson batches and unit noise of a repeat are shared by its
columns, scaled by each column's std) and the Gaussian noise of a round's replies drawn as its
sum. The random draws come in the logistic twin's order, so the two twins agree on the same
generator (tests/planner/test_planner_twin_kernel.py).

Columns of repeat r start from the kernel's r-th initial model (:meth:`KernelProxy.initial`,
drawn from the plan's seed), so columns of one repeat differ only by their horizon. The
per-round work is a :class:`~fedqr.planner.columns.ColumnEngine`: all columns of an MLP in
one stacked pass, any other model one column after another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from fedqr.data import ClientData, Dataset
from fedqr.models.kernel import Kernel, KernelData
from fedqr.models.logreg import Norm
from fedqr.planner.columns import ColumnEngine, column_engine
from fedqr.planner.gradients import block_positions, block_rounds
from fedqr.planner.noise_sums import laplace_groups, laplace_sum
from fedqr.planner.twin import TwinRun, _continuous, _weights
from fedqr.privacy import Mechanism
from fedqr.sim.config import Selection
from fedqr.sim.schedule import make_schedule
from fedqr.sim.streams import draw_noise

__all__ = ["KernelProxy", "TwinWork", "make_kernel_proxy", "simulate_columns_kernel"]


@dataclass
class TwinWork:
    """What the kernel twin computed: per-sample gradients (rows times columns)."""

    row_gradients: int = 0


@dataclass(frozen=True)
class KernelProxy:
    """The twin's data bound to a model kernel, and the deployment's real client sizes."""

    kernel: Kernel
    data: KernelData
    engine: ColumnEngine
    proxy_sizes: NDArray[np.int64]  # m_i
    real_sizes: NDArray[np.int64]  # d_i
    norm: Norm

    @property
    def num_params(self) -> int:
        """P of the model."""
        return int(self.kernel.num_params)

    @property
    def num_test(self) -> int:
        """Rows of the evaluation set."""
        return int(self.data.y_test.shape[0])

    def initial(self, *, repeats: int, seed: int) -> Tensor:
        """The initial models of the twin's repeats, ``(K, P)`` on the proxy's device, drawn by
        the kernel from a CPU generator seeded by ``seed`` (repeat r: the r-th draw)."""
        gen = torch.Generator().manual_seed(seed)
        return self.kernel.init(repeats=repeats, generator=gen).to(self.data.x.device)


def make_kernel_proxy(kernel: Kernel, train: ClientData, *, rows: tuple[NDArray[np.int64], ...],
                      test: Dataset, real_sizes: NDArray[np.int64], norm: Norm,
                      device: torch.device, test_rows: NDArray[np.int64] | None = None,
                      chunk_rows: int = 2048) -> KernelProxy:
    """The twin's data for ``kernel``: client i trains on ``train`` rows ``rows[i]``; evaluation
    on ``test`` (its rows ``test_rows``, default all)."""
    ds = train.dataset
    order = np.concatenate(rows)
    sizes = np.array([len(r) for r in rows], dtype=np.int64)
    keep = np.arange(len(test.y_test)) if test_rows is None else np.asarray(test_rows)
    data = KernelData(
        x=torch.as_tensor(ds.x_train[order], dtype=torch.float32, device=device),
        y=torch.as_tensor(ds.y_train[order], dtype=torch.int64, device=device),
        offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        x_test=torch.as_tensor(test.x_test[keep], dtype=torch.float32, device=device),
        y_test=torch.as_tensor(test.y_test[keep], dtype=torch.int64, device=device),
        norm=norm, chunk_rows=chunk_rows)
    attached = kernel.attach(data)
    return KernelProxy(kernel=kernel, data=data, engine=column_engine(kernel, attached, data),
                       proxy_sizes=sizes, real_sizes=np.asarray(real_sizes, dtype=np.int64),
                       norm=norm)


def simulate_columns_kernel(proxy: KernelProxy, run: TwinRun, *, horizons: NDArray[np.int64],
                            std: NDArray[np.float64], generator: torch.Generator, init: Tensor,
                            on_round: Callable[[int], None] | None = None,
                            work: TwinWork | None = None) -> NDArray[np.float64]:
    """Final test loss of every horizon and repeat, shape ``(len(horizons), repeats)``.

    Parameters
    ----------
    proxy:
        The twin's data and model.
    run:
        b, q, clip, learning rate and aggregation shared by every column.
    horizons:
        T of each column (``>= 0``).
    std:
        Per-coordinate noise std of each client for each horizon, shape ``(C, N)``.
    generator:
        Source of the noise and the Poisson batches (on the proxy's device).
    init:
        Initial parameters of each repeat, ``(K, P)`` (:meth:`KernelProxy.initial`).
    on_round:
        Called with the number of finished rounds.
    work:
        Adds the per-sample gradients computed.

    Returns
    -------
    numpy.ndarray
        Mean test loss; ``inf`` where a run diverged.
    """
    k_rep, b = run.repeats, run.clients_per_round
    dev = proxy.data.x.device
    if tuple(init.shape) != (k_rep, proxy.num_params):
        raise ValueError(f"init must have shape ({k_rep}, {proxy.num_params}), "
                         f"got {tuple(init.shape)}")
    order = np.argsort(-np.asarray(horizons), kind="stable")  # running columns form a prefix
    hs = np.asarray(horizons)[order]
    std_sorted = torch.as_tensor(std[order], dtype=torch.float32, device=dev)  # (C, N)
    n = len(proxy.real_sizes)
    q_twin = 1.0 if not run.sample_rate < 1 else min(
        1.0, run.sample_rate * float(proxy.real_sizes.sum()) / float(proxy.proxy_sizes.sum()))
    t_max = int(hs.max()) if len(hs) else 0
    sched = make_schedule(num_clients=n, clients_per_round=b, rounds=t_max,
                          selection=Selection.ROUND_ROBIN, repeats=1,
                          rng=np.random.default_rng(0))[0]
    theta = init.to(device=dev, dtype=torch.float32).repeat(len(hs), 1)  # column c K + r
    losses = np.full((len(hs), k_rep), np.nan)

    def record(cols: slice) -> None:
        th = theta[cols.start * k_rep:cols.stop * k_rep]
        values = proxy.engine.test_loss(th).cpu().numpy().reshape(-1, k_rep)
        finite = torch.isfinite(th).all(dim=1).cpu().numpy().reshape(-1, k_rep)
        losses[cols] = np.where(finite & np.isfinite(values), values, np.inf)

    noise_kind = _continuous(run.mechanism)
    n_done = int((hs == 0).sum())
    if n_done:
        record(slice(len(hs) - n_done, len(hs)))
    block = block_rounds(repeats=k_rep, sizes=proxy.proxy_sizes, sample_rate=q_twin)
    drawn: tuple[Tensor, Tensor] | None = None
    for t in range(t_max):
        c_act = int((hs > t).sum())
        a = c_act * k_rep
        sel = sched[t]
        th = theta[:a]
        c = torch.as_tensor(_weights(run, proxy.real_sizes, sel), dtype=torch.float32,
                            device=dev)
        if q_twin < 1 and t % block == 0:  # the block's batches, as the logistic twin draws
            sizes = torch.as_tensor(np.stack([proxy.proxy_sizes[s] for s in
                                              sched[t:t + block]]), device=dev)
            drawn = block_positions(sizes, repeats=k_rep, sample_rate=q_twin,
                                    generator=generator)
        step = _gradient_term(proxy, run, th, sel, c, q_twin=q_twin, work=work,
                              drawn=None if drawn is None else (drawn[0][t % block],
                                                                drawn[1][t % block]))
        w = c[None, :] * std_sorted[:, sel]  # (C, b): each reply's weighted std
        _add_noise(step, noise_kind, w, c_act, k_rep=k_rep, generator=generator)
        th.mul_(float(c.sum())).sub_(step, alpha=run.lr.at(t))  # the running columns, in place
        stop = int((hs > t + 1).sum())
        if stop < c_act:
            record(slice(stop, c_act))
        if on_round is not None:
            on_round(t + 1)
    return losses[np.argsort(order, kind="stable")]


def _add_noise(step: Tensor, kind: Mechanism, w: Tensor, c_act: int, *, k_rep: int,
               generator: torch.Generator) -> None:
    """Add ``sum_i w_i z_i`` to the ``c_act`` running columns of ``step`` (``(c_act K, P)``;
    ``w`` is ``(C, b)`` for every column); the unit draws of a repeat are shared by its
    columns (the logistic twin's draws, in its order: Laplace per group of equal replies,
    :mod:`fedqr.planner.noise_sums`)."""
    p = step.shape[1]
    out = step.view(c_act, k_rep, p)
    if kind is Mechanism.GAUSSIAN:  # sum_i w_i z_i is N(0, sum_i w_i^2): one draw per repeat
        unit = draw_noise(kind, torch.ones(k_rep, device=w.device), p, generator)
        out.addcmul_(w[:c_act].square().sum(dim=1).sqrt()[:, None, None], unit[None])
    else:
        groups, counts = laplace_groups(w)
        out.add_(laplace_sum(groups[:c_act], counts, repeats=k_rep, num_params=p,
                             generator=generator))


def _gradient_term(proxy: KernelProxy, run: TwinRun, theta: Tensor, sel: NDArray[np.int64],
                   c: Tensor, *, q_twin: float, work: TwinWork | None,
                   drawn: tuple[Tensor, Tensor] | None) -> Tensor:
    """``sum_i c_i (clipped mean gradient_i + w theta)`` of every running column; ``drawn``:
    the round's Poisson positions and their validity ``(K, b, m)`` (:func:`fedqr.planner.
    gradients.block_positions`), cut here to its largest batch."""
    m = torch.as_tensor(proxy.proxy_sizes[sel], dtype=theta.dtype, device=theta.device)
    if q_twin >= 1:  # every client uses all its proxy rows
        g = proxy.engine.full(theta, sel, c / m, clip=run.clip)
        rows = int(proxy.proxy_sizes[sel].sum()) * theta.shape[0]
    else:  # Poisson batches, one per repeat and shared by that repeat's columns
        if drawn is None:
            raise ValueError("Poisson batches need their drawn positions")
        pos, valid = drawn
        m_top = int(valid.sum(dim=-1).max()) if valid.numel() else 0
        positions = (pos[..., :m_top], valid[..., :m_top])  # valid rows come first
        g = proxy.engine.sampled(theta, sel, c / (q_twin * m), clip=run.clip,
                                 positions=positions, repeats=run.repeats)
        rows = int(positions[1].sum()) * (theta.shape[0] // run.repeats)
    if work is not None:
        work.row_gradients += rows
    return g.add_(theta, alpha=float(c.sum()) * run.weight_decay)
