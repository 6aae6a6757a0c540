"""The one round loop of FedSGD-DPC (paper Algorithm 1), for every model kernel.

One round t, for every repeat r (a leading repeat axis R and a client axis b):

1. The server sends theta_t to the clients P_t of the round (schedule, fixed in advance).
2. Each selected client draws its batch B_t^i (all d_i rows, or a Poisson sample of rate q)
   and the kernel sums its per-sample-clipped gradients (:mod:`fedqr.models.kernel`).
3. It forms g = sum / d_i (or / (q d_i)) plus the weight-decay gradient w theta_t.
4. It adds its noise (scale fixed by its budget and exact reply count) and replies
   theta^i = theta_t - eta_t (g + noise); its ledger is charged first
   (:func:`fedqr.sim.reply.client_replies`).
5. The server aggregates theta_{t+1} = sum_{i in P_t} c_i theta^i.

Where the mechanism is closed under sums (Gaussian, none) and the replies share a run's
generators, the noise of step 4 is drawn once for the aggregate: ``sum_i c_i eta_t n_i`` has
exactly the law of ``eta_t N(0, sum_i c_i^2 s_i^2)``, so theta_{t+1} has the same
distribution at a b-th of the draws (:meth:`Streams.noise_sum`; each reply's own noise is
drawn with ``noise_seeding="per-reply"``, the path a Flower client shares).

Randomness (:class:`Streams`): a batched kernel (logistic regression) draws every repeat's
Poisson batches and noise from one generator seeded by ``seed``; a sequential kernel (torch
models) gives repeat r its own generator seeded from ``(seed, r)``, so a repeat does not depend
on how many there are; ``noise_seeding="per-reply"`` draws each reply from its own generator
(:func:`fedqr.sim.streams.reply_generator`), whatever the kernel.

Evaluation: test metrics every ``eval_every`` rounds and after the last; the training
objective as ``train_eval`` says (:mod:`fedqr.sim.train_eval`: its sampled rows come from a
generator of their own, so no setting changes a reply).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from fedqr.data import Dataset, Partition
from fedqr.models.kernel import GradSums, Kernel, KernelData
from fedqr.models.logreg_coded import code_rows
from fedqr.privacy import noise_tensor
from fedqr.sim.budget import ClientPrivacy, plan_client_privacy
from fedqr.sim.config import Aggregation, Arithmetic, SimConfig
from fedqr.sim.reply import client_replies
from fedqr.sim.result import RoundMetrics, SimResult
from fedqr.sim.schedule import make_schedule
from fedqr.sim.setup_memo import sorted_tensors
from fedqr.sim.streams import Streams
from fedqr.sim.train_eval import TrainEvaluator

__all__ = ["RoundCallback", "aggregation_weights", "kernel_data", "run_rounds",
           "why_not_mixed"]

RoundCallback = Callable[[int], None]

_SELECTIONS_KEPT = 4096  # distinct selections whose tensors a run keeps (random: the first)


def aggregation_weights(config: SimConfig, sizes: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """Server weights of the selected clients, shape ``(R, b)``."""
    d_sel = sizes[sel].astype(np.float64)
    if config.aggregation is Aggregation.PAPER:
        weights: np.ndarray = config.num_clients / config.clients_per_round * d_sel / sizes.sum()
    else:
        weights = d_sel / d_sel.sum(axis=1, keepdims=True)
    return weights


def why_not_mixed(x_train: np.ndarray, *, kernel: Kernel, device: torch.device) -> str | None:
    """Why ``arithmetic='mixed'`` would run in float32 for this model, device and training
    rows (``None``: it runs mixed); ``auto`` then takes float32 without a word."""
    if not kernel.uses_coding:
        return f"it is for softmax regression (logreg), not {kernel.name}"
    if device.type != "cpu":
        return "its integer products are for the CPU"
    if code_rows(x_train) is None:  # cached: a sweep codes an array once
        return ("the training rows are not integer-coded (some column has more than 256 "
                "levels, or levels off one grid)")
    return None


def kernel_data(dataset: Dataset, partition: Partition, config: SimConfig,
                device: torch.device, *, kernel: Kernel) -> KernelData:
    """Training rows sorted by client (checked against ``config``) and the test set; with
    ``config.arithmetic`` mixed, the rows' integer coding where ``kernel`` uses it. The tensors
    (and their CSR copies) are an earlier run's on the same data (:mod:`fedqr.sim.setup_memo`)."""
    if partition.num_clients != config.num_clients:
        raise ValueError(f"partition has {partition.num_clients} clients but "
                         f"num_clients={config.num_clients}")
    order = np.concatenate(partition.indices)
    if len(order) != dataset.num_train or len(np.unique(order)) != len(order):
        raise ValueError("partition must assign every training sample to exactly one client")
    coding = None
    if config.arithmetic is Arithmetic.MIXED:
        why = why_not_mixed(dataset.x_train, kernel=kernel, device=device)
        whole = code_rows(dataset.x_train) if why is None else None
        if whole is not None:
            coding = whole.rows(order)
        else:
            warnings.warn(f"arithmetic='mixed' runs in float32 here: {why}", RuntimeWarning,
                          stacklevel=2)
    sizes = np.asarray(partition.sizes, dtype=np.int64)
    (x, y, x_test, y_test), caches = sorted_tensors(dataset, order, sizes, device)
    return KernelData(x=x, y=y, offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                      x_test=x_test, y_test=y_test, norm=config.privacy.spec.norm,
                      chunk_rows=config.chunk_rows, coding=coding, sparse_caches=caches)


def _aggregate(c: Tensor, replies: Tensor, *, batched: bool) -> Tensor:
    """``sum_i c_i theta^i`` per repeat: one batched product, or one product per repeat."""
    if batched:
        return torch.bmm(c.unsqueeze(1), replies).squeeze(1)
    return torch.stack([c[r] @ replies[r] for r in range(c.shape[0])])


def run_rounds(
    dataset: Dataset, partition: Partition, config: SimConfig, kernel: Kernel, *,
    device: str | torch.device = "cpu", on_round: RoundCallback | None = None,
) -> SimResult:
    """Run FedSGD-DPC ``config.repeats`` times with ``kernel`` and return every metric.

    Raises
    ------
    fedqr.privacy.PrivacyBudgetExceeded
        Before any reply that would take a client over its budget.
    """
    dev = torch.device(device)
    data = kernel_data(dataset, partition, config, dev, kernel=kernel)
    model = kernel.attach(data)
    sizes, r = data.sizes, config.repeats
    schedule = make_schedule(num_clients=config.num_clients,
                             clients_per_round=config.clients_per_round, rounds=config.rounds,
                             selection=config.selection, repeats=r,
                             rng=np.random.default_rng(config.seed))
    privacy = plan_client_privacy(config, sizes=sizes, schedule=schedule,
                                  num_params=kernel.num_params)
    theta = kernel.init(repeats=r, generator=torch.Generator().manual_seed(config.seed)).to(dev)
    streams = Streams(config=config, device=dev, batched=kernel.batched)
    q = config.privacy.spec.batch_rate(config.privacy.sample_rate)
    groups = privacy.group_of(r)
    history: list[RoundMetrics] = []
    tallies = torch.zeros(5, r, config.num_clients, dtype=torch.float64, device=dev)
    stats, rows = tallies[:3], tallies[3:]  # views: one indexed add a round fills both
    fixed = _Fixed.of(config, privacy, sizes=sizes, groups=groups, streams=streams,
                      tallies=tallies, batched=kernel.batched)
    train_eval = TrainEvaluator(config=config, model=model, num_train=len(data.y), device=dev)

    def record(t: int, fused: GradSums | None, sel: np.ndarray | None) -> None:
        loss, acc = model.test_metrics(theta)
        train, stderr = train_eval(theta, fused, sel=sel, final=t == config.rounds)
        history.append(RoundMetrics(round=t, test_loss=loss, test_accuracy=acc,
                                    train_loss=train, epsilon_spent=privacy.ledgers.spent_eps(),
                                    train_loss_stderr=stderr))

    for t in range(config.rounds):
        sel = np.ascontiguousarray(schedule[groups, t])  # (R, b)
        evaluate_now = t % config.eval_every == 0
        if q < 1:
            sums = model.sample_sums(theta, sel, clip=config.privacy.clip,
                                     positions=streams.positions(sizes, sel, q=q, round=t))
        else:
            sums = model.full_sums(theta, sel, clip=config.privacy.clip,
                                   with_train_loss=train_eval.fused(evaluate_now=evaluate_now))
        if evaluate_now:
            record(t, sums, sel)
        theta = _round(theta, sums, sel, t, fixed)
        if on_round is not None:
            on_round(t + 1)
    record(config.rounds, None, None)
    return SimResult.build(config=config, dataset=dataset, sizes=sizes, setup_privacy=privacy,
                           history=history, stats=stats.cpu().numpy(),
                           theta=theta.cpu().numpy(), rows=rows.cpu().numpy())


@dataclass(frozen=True)
class _Fixed:
    """What every round of a run reads: the run's settings, its clients' noise as tensors
    (converted once, not every round) and the statistics it adds to."""

    config: SimConfig
    privacy: ClientPrivacy
    sizes: np.ndarray
    streams: Streams
    tallies: Tensor  # (5, R, N) float64: clipped share, gradient-to-noise, replies (the
    # run's stats), then clipped rows and sampled rows (the pooled clipped fraction)
    batched: bool
    group: Tensor  # (R, 1): each repeat's schedule group
    reps: Tensor  # (R, 1): 0 .. R-1
    noise_std: Tensor  # (S, N) float32
    noise_param: Tensor  # (S, N) float64
    _selected: dict[bytes, tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]] = field(
        default_factory=dict, compare=False, repr=False)

    def selected(self, sel: np.ndarray) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
        """The selection ``(R, b)`` as a tensor, its replies' noise std and parameter, the
        server's weights ``c`` (float32) and, where the aggregate's noise is drawn at once,
        its std ``(R,)``: computed once per distinct selection (round robin repeats N / b of
        them), a few small operations less a round."""
        key = sel.tobytes()
        hit = self._selected.get(key)
        if hit is not None:
            return hit
        dev = self.tallies.device
        sel_t = torch.as_tensor(sel, device=dev)
        std = self.noise_std[self.group, sel_t]
        c = torch.as_tensor(aggregation_weights(self.config, self.sizes, sel),
                            dtype=torch.float32, device=dev)
        total = (self.config.privacy.spec.sum_std(weights=c, std=std)
                 if self.streams.draws_sums else None)
        out = (sel_t, std, self.noise_param[self.group, sel_t], c, total)
        if len(self._selected) < _SELECTIONS_KEPT:
            self._selected[key] = out
        return out

    @classmethod
    def of(cls, config: SimConfig, privacy: ClientPrivacy, *, sizes: np.ndarray,
           groups: np.ndarray, streams: Streams, tallies: Tensor, batched: bool) -> _Fixed:
        dev = tallies.device
        return cls(config=config, privacy=privacy, sizes=sizes, streams=streams,
                   tallies=tallies, batched=batched,
                   group=torch.as_tensor(groups, device=dev)[:, None],
                   reps=torch.arange(len(groups), device=dev)[:, None],
                   noise_std=noise_tensor(privacy.noise_std, device=dev),  # rounded up
                   noise_param=torch.as_tensor(privacy.noise_param, dtype=torch.float64,
                                               device=dev))


def _round(theta: Tensor, sums: GradSums, sel: np.ndarray, t: int, fixed: _Fixed) -> Tensor:
    """Steps 3-5 of round t: replies (charged, noised) and their aggregate theta_{t+1}."""
    config, privacy = fixed.config, fixed.privacy
    sel_t, std, param, c, total_std = fixed.selected(sel)
    # total_std: the aggregate's noise is drawn at once, after the charge
    out = client_replies(sums.grad, sizes=fixed.sizes[sel], theta=theta.unsqueeze(1),
                         config=config, round=t, std=std, param=param,
                         noise=None if total_std is not None else functools.partial(
                             fixed.streams.noise, sel=sel, round=t),
                         charge=functools.partial(privacy.ledgers.charge_round, sel))
    fixed.tallies[:, fixed.reps, sel_t] += torch.stack([  # float32 terms, float64 sums
        sums.clipped / sums.rows.clamp_min(1),
        out.g_data.norm(dim=-1) / (std * out.g_data.shape[-1] ** 0.5),
        torch.ones_like(std), sums.clipped, sums.rows]).double()
    nxt = _aggregate(c, out.theta, batched=fixed.batched)
    if total_std is not None:  # sum_i c_i (theta^i - eta n_i) = sum_i c_i theta^i - eta sum c_i n_i
        nxt -= config.lr.at(t) * fixed.streams.noise_sum(total_std, out.theta.shape[-1])
    return nxt
