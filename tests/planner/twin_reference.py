"""The logistic twin's round loop written plainly (its implementation before it was made
faster): every round recomputes its weights, gathers the columns' parameters and rebuilds
them, and packs its own Poisson batches (drawn, as in the twin, for a block of rounds at
once). The fast :func:`fedqr.planner.twin.simulate_columns` must give the same losses, bit for
bit: the same draws from the generator in the same order and the same float operations.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from fedqr.models.logreg import column_logits, weighted_residual
from fedqr.models.logreg_eval import evaluate
from fedqr.models.sampling import poisson_positions
from fedqr.planner.gradients import ROW_QUANTUM, block_rounds, full_batch_gradient, row_blocks
from fedqr.planner.noise_sums import laplace_groups, laplace_sum
from fedqr.planner.twin import Proxy, TwinRun, _continuous, _weights
from fedqr.privacy import Mechanism
from fedqr.sim.config import Selection
from fedqr.sim.engine import draw_noise
from fedqr.sim.schedule import make_schedule


def _poisson(proxy: Proxy, theta: Tensor, sel: NDArray[np.int64], weight: Tensor,
             drawn: tuple[Tensor, Tensor], *, run: TwinRun) -> Tensor:
    """Poisson batches of columns ``c K + r`` (repeat r's batch, ``drawn``: its positions
    and their validity, ``(K, b, m)``), one batched product."""
    lay, k_rep = proxy.layout, run.repeats
    a, k, p = theta.shape
    n_col, b = a // k_rep, len(sel)
    pos, valid = drawn
    m = pos.shape[-1]
    rows = (torch.as_tensor(lay.offsets[:-1][sel])[None, :, None] + pos).reshape(k_rep, b * m)
    w = (weight[None, :, None] * valid).reshape(k_rep, b * m)
    flat = valid.reshape(k_rep, b * m)
    count = int(flat.sum(dim=1).max())
    if count == 0:
        return torch.zeros_like(theta)
    count = min(b * m, -(-count // ROW_QUANTUM) * ROW_QUANTUM)  # padded with weight 0
    order = torch.argsort((~flat).to(torch.int8), dim=1, stable=True)[:, :count]
    rows, w = rows.gather(1, order).reshape(-1), w.gather(1, order)
    x = lay.x.index_select(0, rows).view(k_rep, count, p)
    th = theta.view(n_col, k_rep, k, p).transpose(0, 1).reshape(k_rep, n_col * k, p)
    logits = column_logits(x, th).view(k_rep, count, n_col, k)
    bound = (run.clip / lay.x_norm.index_select(0, rows).view(k_rep, count)).mul_(w)
    res = weighted_residual(logits, lay.y.index_select(0, rows).view(k_rep, count, 1, 1),
                            bound=bound[..., None], weight=w[..., None], norm=proxy.norm)
    g = torch.bmm(res.view(k_rep, count, n_col * k).transpose(1, 2), x)
    return g.view(k_rep, n_col, k, p).transpose(0, 1).reshape(a, k, p)


def _positions(proxy: Proxy, sched: list[NDArray[np.int64]], t: int, *, run: TwinRun, q: float,
               generator: torch.Generator) -> list[tuple[Tensor, Tensor]]:
    """The positions of the rounds ``t, t + 1, ...`` of a block, drawn in one call (clients
    ``(rounds, K, b)``), one ``(K, b, m)`` slice per round (m: the block's widest)."""
    block = block_rounds(repeats=run.repeats, sizes=proxy.proxy_sizes, sample_rate=q)
    sizes = torch.stack([torch.as_tensor(proxy.layout.sizes[sel])
                         for sel in sched[t:t + block]])
    pos, valid = poisson_positions(sizes[:, None, :].expand(-1, run.repeats, -1),
                                   sample_rate=q, generator=generator)
    return list(zip(pos, valid, strict=True))


def reference_columns(proxy: Proxy, run: TwinRun, *, horizons: NDArray[np.int64],
                      std: NDArray[np.float64], generator: torch.Generator
                      ) -> NDArray[np.float64]:
    """Final test loss of every horizon and repeat, as ``simulate_columns`` returns it."""
    k_rep, b, lay = run.repeats, run.clients_per_round, proxy.layout
    order = np.argsort(-horizons, kind="stable")
    hs = horizons[order]
    std_sorted = torch.as_tensor(std[order], dtype=torch.float32)
    n_cls, p = lay.num_classes, lay.x.shape[1]
    q = 1.0 if not run.sample_rate < 1 else min(
        1.0, run.sample_rate * float(proxy.real_sizes.sum()) / float(proxy.proxy_sizes.sum()))
    sched = make_schedule(num_clients=len(proxy.real_sizes), clients_per_round=b,
                          rounds=int(hs.max()), selection=Selection.ROUND_ROBIN, repeats=1,
                          rng=np.random.default_rng(0))[0]
    theta = torch.zeros(len(hs) * k_rep, n_cls, p)
    losses = np.full((len(hs), k_rep), np.nan)

    def record(lo: int, hi: int) -> None:
        th = theta[lo * k_rep:hi * k_rep]
        loss, _ = evaluate(proxy.x_test, proxy.y_test, th, chunk_rows=run.chunk_rows)
        values = (loss / len(proxy.y_test)).double().numpy().reshape(-1, k_rep)
        finite = torch.isfinite(th).flatten(1).all(dim=1).numpy().reshape(-1, k_rep)
        losses[lo:hi] = np.where(finite & np.isfinite(values), values, np.inf)

    kind = _continuous(run.mechanism)
    block = block_rounds(repeats=k_rep, sizes=proxy.proxy_sizes, sample_rate=q)
    drawn: list[tuple[Tensor, Tensor]] = []
    if (hs == 0).any():
        record(int((hs > 0).sum()), len(hs))
    for t in range(int(hs.max())):
        c_act = int((hs > t).sum())
        a, sel = c_act * k_rep, sched[t]
        th = theta[:a]
        c = torch.as_tensor(_weights(run, proxy.real_sizes, sel), dtype=torch.float32)
        m = torch.as_tensor(proxy.proxy_sizes[sel], dtype=torch.float32)
        if q >= 1:
            g = full_batch_gradient(lay, th, row_blocks(lay, sel, c / m), clip=run.clip,
                                    norm=proxy.norm, chunk_rows=run.chunk_rows)
        else:
            if t % block == 0:
                drawn = _positions(proxy, sched, t, run=run, q=q, generator=generator)
            g = _poisson(proxy, th, sel, c / (q * m), drawn[t % block], run=run)
        g_sum = g + float(c.sum()) * run.weight_decay * th
        w = c[None, :] * std_sorted[:c_act][:, sel]
        if kind is Mechanism.GAUSSIAN:
            unit = draw_noise(kind, torch.ones(k_rep), n_cls * p, generator)
            noise = (w.square().sum(dim=1).sqrt()[:, None, None] * unit).reshape(a, n_cls, p)
        else:
            groups, counts = laplace_groups(c[None, :] * std_sorted[:, sel])
            noise = laplace_sum(groups[:c_act], counts, repeats=k_rep, num_params=n_cls * p,
                                generator=generator).reshape(a, n_cls, p)
        theta = torch.cat([float(c.sum()) * th - run.lr.at(t) * (g_sum + noise), theta[a:]])
        stop = int((hs > t + 1).sum())
        if stop < c_act:
            record(stop, c_act)
    return losses[np.argsort(order, kind="stable")]
