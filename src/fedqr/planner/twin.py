"""The digital twin: many schedules of one deployment simulated as one batch on a proxy.

The twin trains on a *proxy* of each client's data (a share of it, or a public data set
split the same way) but adds the noise of the *real* deployment: each client's noise std
comes from its real size ``d_i``, budget and exact reply count (:mod:`fedqr.planner.noise`),
the server weighs replies by the real ``d_i``, and a Gaussian client's Poisson rate is raised
to ``q d_i / m_i`` on its ``m_i`` proxy rows, so the expected batch (and so the sampling
noise) is the real one. The noise-to-signal ratio of every reply is then the deployment's.

For one b, all horizons T of a grid and K repeats run as ``C K`` columns of one batch:
round t is computed once for the columns still running (those with ``T > t``), and a
column's test loss is recorded when it reaches its T. Columns of the same repeat share
their noise draws and Poisson batches (common random numbers, scaled by each column's own
std), so the loss differences between horizons are not blurred by independent noise. The
Gaussian noise of a round's b replies is drawn as its sum (one normal vector of the summed
variance per repeat: the same law, b times fewer draws), the Laplace noise as one sum per
group of replies of equal weights (:mod:`fedqr.planner.noise_sums`). Poisson batches are
drawn and packed for a block of rounds at once (:func:`fedqr.planner.gradients.poisson_rounds`,
before the block's noise), so a round's own work is its products and its softmax.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from fedqr.models.logreg import Norm
from fedqr.models.logreg_eval import evaluate
from fedqr.planner.gradients import (
    PoissonRound,
    RowBlock,
    StackedRows,
    block_rounds,
    full_batch_gradient,
    poisson_gradient,
    poisson_rounds,
    row_blocks,
    stack_rows,
)
from fedqr.planner.noise_sums import laplace_groups, laplace_sum
from fedqr.planner.twin_data import MIN_PROXY_ROWS, Proxy, make_proxy, proxy_rows
from fedqr.privacy import Mechanism, mechanism_for
from fedqr.sim.config import Aggregation, LearningRate, Selection
from fedqr.sim.engine import draw_noise
from fedqr.sim.schedule import make_schedule

__all__ = ["MIN_PROXY_ROWS", "Proxy", "TwinRun", "make_proxy", "proxy_rows", "simulate_columns",
           "simulate_stacked", "stackable"]


@dataclass(frozen=True)
class TwinRun:
    """What the columns of one batch share: the schedule's b and q, and the training rule."""

    mechanism: Mechanism
    clients_per_round: int
    sample_rate: float  # the real q (1 for full batches)
    clip: float
    lr: LearningRate
    weight_decay: float
    aggregation: Aggregation
    repeats: int
    chunk_rows: int = 2048


def _continuous(mechanism: Mechanism) -> Mechanism:
    """The additive noise the twin draws (unit std, scaled per column): the Laplace or the
    Gaussian of the mechanism's clipping norm. For Laplace and Gaussian that is the
    mechanism's own noise; a quantising mechanism (discrete Laplace) is approximated by it
    with the same std (at the scales of private FL the two are close)."""
    return mechanism_for(mechanism).continuous


def _weights(run: TwinRun, real: NDArray[np.int64], sel: NDArray[np.int64]) -> NDArray[Any]:
    d_sel = real[sel].astype(np.float64)
    if run.aggregation is Aggregation.PAPER:
        scale = len(real) / run.clients_per_round / float(real.sum())
    else:
        scale = 1.0 / float(d_sel.sum())
    return np.asarray(d_sel * scale, dtype=np.float64)


@dataclass(frozen=True)
class _Round:
    """What a round's selection fixes for every column (computed once per selection: round
    robin repeats a few selections): the clients, the sum of their weights ``c_i``, each
    client's gradient weight, its first proxy row and row count, and the noise scales of
    every column (``(C, b)``: ``c_i`` times client i's std; ``(C,)``: the std of their sum)."""

    sel: NDArray[np.int64]
    c_sum: float
    weight: Tensor
    starts: Tensor
    sizes: Tensor
    blocks: list[RowBlock]  # full batches: the rows and their weights
    noise_w: Tensor  # (C, b)
    noise_sd: Tensor

    @cached_property
    def laplace_groups(self) -> tuple[Tensor, Tensor]:
        """The replies grouped by equal scales (:func:`fedqr.planner.noise_sums.laplace_groups`),
        formed on first use (only the Laplace noise asks) and kept for the selection."""
        return laplace_groups(self.noise_w)


def _round_of(proxy: Proxy, run: TwinRun, sel: NDArray[np.int64], std_sorted: Tensor, *,
              q_twin: float) -> _Round:
    dev = std_sorted.device
    c = torch.as_tensor(_weights(run, proxy.real_sizes, sel), dtype=torch.float32, device=dev)
    m = torch.as_tensor(proxy.proxy_sizes[sel], dtype=torch.float32, device=dev)
    weight = c / m if q_twin >= 1 else c / (q_twin * m)  # c_i / n_i of the batch n_i
    w = c[None, :] * std_sorted[:, sel]  # (C, b): each reply's weighted std
    lay = proxy.layout
    return _Round(sel=sel, c_sum=float(c.sum()), weight=weight,
                  starts=torch.as_tensor(lay.offsets[:-1][sel], device=dev),
                  sizes=torch.as_tensor(lay.sizes[sel], device=dev),
                  blocks=row_blocks(lay, sel, weight) if q_twin >= 1 else [],
                  noise_w=w, noise_sd=w.square().sum(dim=1).sqrt())


def simulate_columns(proxy: Proxy, run: TwinRun, *, horizons: NDArray[np.int64],
                     std: NDArray[np.float64], generator: torch.Generator,
                     on_round: Callable[[int], None] | None = None) -> NDArray[np.float64]:
    """Final test loss of every horizon and repeat, shape ``(len(horizons), repeats)``.

    Parameters
    ----------
    proxy:
        The twin's data.
    run:
        b, q, clip, learning rate and aggregation shared by every column.
    horizons:
        T of each column (``>= 0``).
    std:
        Per-coordinate noise std of each client for each horizon, shape ``(C, N)``.
    generator:
        Source of all draws (noise and Poisson batches).
    on_round:
        Called with the number of finished rounds.

    Returns
    -------
    numpy.ndarray
        Test cross-entropy; ``inf`` where a run diverged.
    """
    return simulate_stacked([proxy], run, horizons=horizons, std=std, generator=generator,
                            on_round=on_round)[0]


def stackable(proxies: Sequence[Proxy]) -> bool:
    """Whether :func:`simulate_stacked` can run these proxies as one batch: the same clients'
    proxy and real sizes, features and product format (their rows may differ)."""
    first = proxies[0]
    return all(np.array_equal(p.proxy_sizes, first.proxy_sizes)
               and np.array_equal(p.real_sizes, first.real_sizes)
               and p.layout.x.shape == first.layout.x.shape
               and p.layout.num_classes == first.layout.num_classes
               and p.products == first.products and p.norm is first.norm for p in proxies)


def simulate_stacked(proxies: Sequence[Proxy], run: TwinRun, *, horizons: NDArray[np.int64],
                     std: NDArray[np.float64], generator: torch.Generator,
                     on_round: Callable[[int], None] | None = None
                     ) -> list[NDArray[np.float64]]:
    """:func:`simulate_columns` of several :func:`stackable` proxies as one batch, with the
    draws each would take alone from ``generator`` in its present state: the R proxies'
    columns share every Poisson batch (the same positions in each proxy's rows of a client)
    and noise draw, so their losses differ only by their rows (common random numbers), and
    each equals its own :func:`simulate_columns` up to float rounding. One loss array per
    proxy."""
    first, n_prox = proxies[0], len(proxies)
    k_rep, b = run.repeats, run.clients_per_round
    dev = first.layout.x.device
    order = np.argsort(-np.asarray(horizons), kind="stable")  # running columns form a prefix
    hs = np.asarray(horizons)[order]
    std_sorted = torch.as_tensor(std[order], dtype=torch.float32, device=dev)  # (C, N)
    n_cls, p = first.layout.num_classes, first.layout.x.shape[1]
    n = len(first.real_sizes)
    q_twin = 1.0 if not run.sample_rate < 1 else min(
        1.0, run.sample_rate * float(first.real_sizes.sum()) / float(first.proxy_sizes.sum()))
    t_max = int(hs.max()) if len(hs) else 0
    sched = make_schedule(num_clients=n, clients_per_round=b, rounds=t_max,
                          selection=Selection.ROUND_ROBIN, repeats=1,
                          rng=np.random.default_rng(0))[0]
    # Poisson batches: theta[g K + r, c] (proxy- then repeat-major), so a repeat's running
    # columns are one matrix for the batched products; full batches: theta[g, c K + r]
    poisson = q_twin < 1
    rows = stack_rows([p.layout for p in proxies], [p.x_products for p in proxies]) \
        if poisson else None
    theta = torch.zeros(*((n_prox * k_rep, len(hs)) if poisson else (n_prox, len(hs) * k_rep)),
                        n_cls, p, dtype=torch.float32, device=dev)
    losses = np.full((n_prox, len(hs), k_rep), np.nan)

    def record(cols: slice) -> None:
        for g, proxy in enumerate(proxies):
            th = (theta[g * k_rep:(g + 1) * k_rep, cols].transpose(0, 1).reshape(-1, n_cls, p)
                  if poisson else theta[g, cols.start * k_rep:cols.stop * k_rep])  # c K + r
            loss, _ = evaluate(proxy.x_test, proxy.y_test, th, chunk_rows=run.chunk_rows,
                               sparse=proxy.test_sparse)
            values = (loss / len(proxy.y_test)).double().cpu().numpy().reshape(-1, k_rep)
            finite = torch.isfinite(th).flatten(1).all(dim=1).cpu().numpy().reshape(-1, k_rep)
            losses[g, cols] = np.where(finite & np.isfinite(values), values, np.inf)

    n_done = int((hs == 0).sum())
    if n_done:
        record(slice(len(hs) - n_done, len(hs)))
    running = [int((hs > t).sum()) for t in range(t_max + 1)]
    rounds: dict[int, _Round] = {}

    def round_at(t: int) -> _Round:
        key = t * b % n  # round robin: the selection depends on the first slot alone
        if key not in rounds:
            rounds[key] = _round_of(first, run, sched[t], std_sorted, q_twin=q_twin)
        return rounds[key]

    block = block_rounds(repeats=k_rep, sizes=first.proxy_sizes, sample_rate=q_twin)
    batches: list[PoissonRound] = []
    for t in range(t_max):
        if rows is not None:
            if t % block == 0:  # the next block's batches, drawn before its rounds' noise
                nxt = [round_at(u) for u in range(t, min(t_max, t + block))]
                batches = poisson_rounds(rows, [(r.starts, r.sizes, r.weight) for r in nxt],
                                         repeats=k_rep, sample_rate=q_twin, clip=run.clip,
                                         generator=generator)
            _poisson_step(rows, run, theta, round_at(t), batches[t % block], running[t],
                          norm=first.norm, lr=run.lr.at(t), generator=generator)
        else:
            _full_step(proxies, run, theta, round_at(t), running[t], lr=run.lr.at(t),
                       generator=generator)
        if running[t + 1] < running[t]:
            record(slice(running[t + 1], running[t]))
        if on_round is not None:
            on_round(t + 1)
    back = np.argsort(order, kind="stable")
    return [losses[g][back] for g in range(n_prox)]


def _poisson_step(rows: StackedRows, run: TwinRun, theta: Tensor, rnd: _Round,
                  batch: PoissonRound, c_act: int, *, norm: Norm, lr: float,
                  generator: torch.Generator) -> None:
    """One round of the first ``c_act`` columns with the Poisson batches ``batch`` (shared
    by the columns of a repeat and by the stacked proxies), in place on ``theta`` ``(R K, C,
    k, p)``: ``theta <- (sum_i c_i) theta - lr (g + noise)`` with ``g = sum_i c_i (clipped
    mean gradient_i + w theta)``."""
    th = theta[:, :c_act]
    g = poisson_gradient(rows, th, batch, norm=norm)
    g.add_(th * (rnd.c_sum * run.weight_decay))
    num_params = theta.shape[-2] * theta.shape[-1]
    noise = _noise(run, rnd, c_act, num_params, generator)  # (C, K, P)
    # the stacked proxies (groups) share the draws: a broadcast view, not a copy
    g.view(rows.groups, run.repeats, c_act, num_params).add_(noise.transpose(0, 1))
    g.mul_(lr)
    th.mul_(rnd.c_sum).sub_(g)


def _full_step(proxies: Sequence[Proxy], run: TwinRun, theta: Tensor, rnd: _Round, c_act: int,
               *, lr: float, generator: torch.Generator) -> None:
    """One round of the first ``c_act`` columns with full batches, in place on ``theta``
    ``(R, C K, k, p)`` (the update of :func:`_poisson_step`; one noise draw for every
    proxy)."""
    noise = _noise(run, rnd, c_act, theta.shape[-2] * theta.shape[-1], generator)
    for g, proxy in enumerate(proxies):
        th = theta[g, :c_act * run.repeats]
        grad = full_batch_gradient(proxy.layout, th, rnd.blocks, clip=run.clip,
                                   norm=proxy.norm, chunk_rows=run.chunk_rows,
                                   x_products=proxy.x_products)
        grad.add_(th * (rnd.c_sum * run.weight_decay))
        grad.add_(noise.view(th.shape)).mul_(lr)
        th.mul_(rnd.c_sum).sub_(grad)


def _noise(run: TwinRun, rnd: _Round, c_act: int, num_params: int,
           generator: torch.Generator) -> Tensor:
    """The summed noise of the round's b replies for every running column and repeat,
    ``(c_act, K, P)``: Gaussian as one normal vector per repeat of the summed variance
    (``sum_i w_i z_i`` is ``N(0, sum_i w_i^2)``: the same law, b times fewer draws),
    Laplace as the weighted sum of the replies' draws (shared by the columns of a repeat,
    scaled by each column's std), one gamma and one normal draw per group of equal replies
    (:mod:`fedqr.planner.noise_sums`)."""
    noise_kind = _continuous(run.mechanism)
    dev = rnd.noise_sd.device
    if noise_kind is Mechanism.GAUSSIAN:
        unit = draw_noise(noise_kind, torch.ones(run.repeats, device=dev), num_params,
                          generator)
        return rnd.noise_sd[:c_act, None, None] * unit
    groups, counts = rnd.laplace_groups
    return laplace_sum(groups[:c_act], counts, repeats=run.repeats,
                       num_params=num_params, generator=generator)
