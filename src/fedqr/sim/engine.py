"""The vectorised FedSGD-DPC engine (paper Algorithm 1), all repeats in one batch.

One round t, for every repeat r at once (tensors carry a leading repeat axis R and a client
axis b; there is no Python loop over clients or repeats):

1. The server sends theta_t to the clients P_t of the round (schedule, fixed in advance).
2. Each selected client i draws its batch B_t^i (all d_i rows for Laplace, a Poisson sample
   of rate q for Gaussian) and computes the sum of per-sample-clipped gradients.
3. It forms g = sum / d_i (or / (q d_i)) plus the weight-decay gradient w theta_t, which is
   data independent and so needs no clipping.
4. It adds its noise w_i (Laplace or Gaussian, scale fixed by its budget and exact reply
   count) and replies theta^i = theta_t - eta_t (g + w_i); its ledger is charged first.
5. The server aggregates theta_{t+1} = (N/b) sum_{i in P_t} (d_i/d) theta^i.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fedqr.data import Dataset, Partition
from fedqr.models.logreg import Norm
from fedqr.privacy import Mechanism, NoiseMechanism, mechanism_for
from fedqr.sim.budget import ClientPrivacy, plan_client_privacy
from fedqr.sim.config import Aggregation, NoiseSeeding, SimConfig
from fedqr.sim.passes import (
    ClientLayout,
    GradSums,
    client_layout,
    evaluate,
    full_batch_sums,
    poisson_positions,
    poisson_sums,
)
from fedqr.sim.reply import client_replies
from fedqr.sim.result import RoundMetrics, SimResult
from fedqr.sim.schedule import make_schedule

RoundCallback = Callable[[int], None]
SAMPLE_STREAM, NOISE_STREAM = 0, 1  # the two per-reply random streams: Poisson batch, noise


@dataclass(frozen=True)
class _Setup:
    layout: ClientLayout
    x_test: Tensor
    y_test: Tensor
    schedule: np.ndarray  # (S, T, b)
    privacy: ClientPrivacy
    norm: Norm


def prepare(
    dataset: Dataset, partition: Partition, config: SimConfig, device: torch.device
) -> _Setup:
    """Sort the data by client, fix the schedule and calibrate every client's noise."""
    if partition.num_clients != config.num_clients:
        raise ValueError(
            f"partition has {partition.num_clients} clients but num_clients={config.num_clients}"
        )
    order = np.concatenate(partition.indices)
    if len(order) != dataset.x_train.shape[0] or len(np.unique(order)) != len(order):
        raise ValueError("partition must assign every training sample to exactly one client")
    norm = config.privacy.spec.norm
    x = torch.as_tensor(dataset.x_train[order], dtype=torch.float32, device=device)
    layout = client_layout(
        x, torch.as_tensor(dataset.y_train[order], dtype=torch.int64, device=device),
        offsets=np.concatenate([[0], np.cumsum(partition.sizes)]).astype(np.int64),
        num_classes=dataset.num_classes, norm=norm)
    schedule = make_schedule(
        num_clients=config.num_clients,
        clients_per_round=config.clients_per_round,
        rounds=config.rounds,
        selection=config.selection,
        repeats=config.repeats,
        rng=np.random.default_rng(config.seed),
    )
    privacy = plan_client_privacy(config, sizes=layout.sizes, schedule=schedule,
                                  num_params=dataset.num_classes * dataset.x_train.shape[1])
    return _Setup(
        layout=layout,
        x_test=torch.as_tensor(dataset.x_test, dtype=torch.float32, device=device),
        y_test=torch.as_tensor(dataset.y_test, dtype=torch.int64, device=device),
        schedule=schedule,
        privacy=privacy,
        norm=norm,
    )


def aggregation_weights(config: SimConfig, sizes: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """Server weights of the selected clients, shape ``(R, b)``."""
    d_sel = sizes[sel].astype(np.float64)
    if config.aggregation is Aggregation.PAPER:
        weights: np.ndarray = config.num_clients / config.clients_per_round * d_sel / sizes.sum()
    else:
        weights = d_sel / d_sel.sum(axis=1, keepdims=True)
    return weights


def draw_noise(
    mechanism: Mechanism | NoiseMechanism, std: Tensor, num_params: int,
    generator: torch.Generator, *, param: Tensor | None = None,
) -> Tensor:
    """Per-coordinate noise of every reply, shape ``std.shape + (p,)``; ``std`` (and the
    noise parameter ``param``, default zeros: only quantising mechanisms read it) per reply."""
    spec = mechanism_for(mechanism) if isinstance(mechanism, Mechanism) else mechanism
    return spec.draw(std=std, param=param if param is not None else torch.zeros_like(std),
                     shape=(*std.shape, num_params), generator=generator)


def reply_generator(
    *, seed: int, repeat: int, round: int, client: int, stream: int,
    device: torch.device | str = "cpu",
) -> torch.Generator:
    """The generator of one reply's ``stream`` (``SAMPLE_STREAM`` or ``NOISE_STREAM``).

    Seeded from ``(seed, repeat, round, client, stream)`` through ``numpy.random.SeedSequence``,
    so any process (the engine, a Flower client) draws the same numbers for the same reply.
    """
    words = np.random.SeedSequence([seed, repeat, round, client, stream]).generate_state(
        2, dtype=np.uint32)
    value = ((int(words[1]) << 32) | int(words[0])) & (2**63 - 1)
    return torch.Generator(device=device).manual_seed(value)


def reply_positions(
    size: int, *, sample_rate: float, generator: torch.Generator, device: torch.device
) -> tuple[Tensor, Tensor]:
    """Poisson batch of one reply of a client with ``size`` rows, both of shape ``(1, m)``."""
    sizes = torch.as_tensor(np.array([size], dtype=np.int64), device=device)
    return poisson_positions(sizes, sample_rate=sample_rate, generator=generator)


def per_reply_gradients(
    setup: _Setup, config: SimConfig, theta: Tensor, sel: np.ndarray, t: int, *,
    with_train_loss: bool,
) -> GradSums:
    """Step 2 with ``noise_seeding="per-reply"``: each Poisson batch from its own generator."""
    q = config.privacy.spec.batch_rate(config.privacy.sample_rate)
    if q == 1:
        return full_batch_sums(setup.layout, theta, sel, clip=config.privacy.clip,
                               norm=setup.norm, chunk_rows=config.chunk_rows,
                               with_train_loss=with_train_loss)
    dev = theta.device
    sizes = setup.layout.sizes
    draws = [[reply_positions(int(sizes[c]), sample_rate=q, device=dev, generator=reply_generator(
        seed=config.seed, repeat=r, round=t, client=int(c), stream=SAMPLE_STREAM, device=dev))
        for c in row] for r, row in enumerate(sel)]
    m = max(pos.shape[-1] for row in draws for pos, _ in row)
    pos = torch.zeros(*sel.shape, m, dtype=torch.int64, device=dev)
    valid = torch.zeros(*sel.shape, m, dtype=torch.bool, device=dev)
    for r, row in enumerate(draws):
        for j, (p_rj, v_rj) in enumerate(row):
            pos[r, j, : p_rj.shape[-1]] = p_rj[0]
            valid[r, j, : v_rj.shape[-1]] = v_rj[0]
    return poisson_sums(setup.layout, theta, sel, sample_rate=q, clip=config.privacy.clip,
                        norm=setup.norm, generator=torch.Generator(device=dev),
                        positions=(pos, valid))


def per_reply_noise(
    config: SimConfig, std: Tensor, sel: np.ndarray, t: int, num_params: int,
    param: Tensor | None = None,
) -> Tensor:
    """Step 4 with ``noise_seeding="per-reply"``: each reply's noise from its own generator."""
    dev = std.device
    par = param if param is not None else torch.zeros_like(std)
    return torch.stack([torch.stack([draw_noise(
        config.privacy.spec, std[r, j], num_params, reply_generator(
            seed=config.seed, repeat=r, round=t, client=int(c), stream=NOISE_STREAM, device=dev),
        param=par[r, j])
        for j, c in enumerate(row)]) for r, row in enumerate(sel)])


def client_gradients(
    setup: _Setup, config: SimConfig, theta: Tensor, sel: np.ndarray, *,
    generator: torch.Generator, with_train_loss: bool,
) -> GradSums:
    """Step 2: clipped gradient sums of the selected clients (batch of all repeats)."""
    q = config.privacy.spec.batch_rate(config.privacy.sample_rate)
    clip = config.privacy.clip
    if q < 1:
        return poisson_sums(setup.layout, theta, sel, sample_rate=q, clip=clip,
                            norm=setup.norm, generator=generator)
    return full_batch_sums(setup.layout, theta, sel, clip=clip, norm=setup.norm,
                           chunk_rows=config.chunk_rows, with_train_loss=with_train_loss)


def simulate(
    dataset: Dataset,
    partition: Partition,
    config: SimConfig,
    *,
    device: str | torch.device = "cpu",
    on_round: RoundCallback | None = None,
) -> SimResult:
    """Run FedSGD-DPC ``config.repeats`` times in one batch and return every metric.

    Parameters
    ----------
    dataset:
        Training and test arrays.
    partition:
        Which training rows each client owns.
    config:
        N, b, T, privacy, learning rate, repeats and seed.
    device:
        Torch device for all tensors (``"cuda"`` when available).
    on_round:
        Called with the number of finished rounds after every round (progress bars).

    Raises
    ------
    fedqr.privacy.PrivacyBudgetExceeded
        Before any reply that would take a client over its budget.
    """
    dev = torch.device(device)
    setup = prepare(dataset, partition, config, dev)
    r, n_cls, p_feat = config.repeats, dataset.num_classes, dataset.x_train.shape[1]
    gen = torch.Generator(device=dev).manual_seed(config.seed)
    theta = torch.zeros(r, n_cls, p_feat, dtype=torch.float32, device=dev)
    sizes = setup.layout.sizes
    spec = config.privacy.spec
    std_all = torch.as_tensor(setup.privacy.noise_std, dtype=torch.float32, device=dev)  # (S, N)
    param_all = torch.as_tensor(setup.privacy.noise_param, dtype=torch.float64, device=dev)
    history: list[RoundMetrics] = []
    # per client and repeat: summed clipped fraction, summed SNR, number of replies
    stats = torch.zeros(3, r, config.num_clients, dtype=torch.float64, device=dev)
    reps = torch.arange(r, device=dev)[:, None]
    per_reply = config.noise_seeding is NoiseSeeding.PER_REPLY

    def record(t: int, train_loss_sum: Tensor | None) -> None:
        """Metrics of theta_t; the training loss comes fused from round t's pass if it had one."""
        if train_loss_sum is None:
            train_loss_sum, _ = evaluate(setup.layout.x, setup.layout.y, theta,
                                         chunk_rows=config.chunk_rows)
        loss, correct = evaluate(setup.x_test, setup.y_test, theta, chunk_rows=config.chunk_rows)
        reg = 0.5 * config.weight_decay * theta.pow(2).sum(dim=(1, 2))
        history.append(RoundMetrics(
            round=t,
            test_loss=(loss / len(setup.y_test)).tolist(),
            test_accuracy=(correct.double() / len(setup.y_test)).tolist(),
            train_loss=(train_loss_sum / len(setup.layout.y) + reg).tolist(),
            epsilon_spent=setup.privacy.ledgers.spent_eps(),
        ))

    groups = torch.as_tensor(setup.privacy.group_of(r), device=dev)[:, None]
    for t in range(config.rounds):
        sel = setup.schedule[:, t] if setup.schedule.shape[0] == r else np.broadcast_to(
            setup.schedule[0, t], (r, config.clients_per_round))
        sel_t = torch.as_tensor(np.ascontiguousarray(sel), device=dev)
        evaluate_now = t % config.eval_every == 0
        # 1-2. the selected clients receive theta_t and compute clipped gradient sums
        if per_reply:
            sums = per_reply_gradients(setup, config, theta, sel, t,
                                       with_train_loss=evaluate_now)
        else:
            sums = client_gradients(setup, config, theta, sel, generator=gen,
                                    with_train_loss=evaluate_now)
        if evaluate_now:
            record(t, sums.loss_sum)
        # 3-4. mean gradient plus weight decay; each client charges its ledger, adds its noise
        # and replies theta_t - eta_t (g + w): the one reply function of every path
        flat = theta.view(r, 1, -1)
        std, param = std_all[groups, sel_t], param_all[groups, sel_t]  # (R, b)

        def noise(std: Tensor, param: Tensor, p: int, sel: np.ndarray = sel, t: int = t) -> Tensor:
            if per_reply:
                return per_reply_noise(config, std, sel, t, p, param)
            return draw_noise(spec, std, p, gen, param=param)

        out = client_replies(sums.grad, sizes=sizes[sel], theta=flat, config=config, round=t,
                             std=std, param=param, noise=noise,
                             charge=functools.partial(setup.privacy.ledgers.charge_round, sel))
        replies, g_data = out.theta, out.g_data
        # 5. the server aggregates theta_{t+1} = sum_i c_i theta^i, c_i = (N/b) d_i / d
        c = torch.as_tensor(aggregation_weights(config, sizes, sel), dtype=torch.float32,
                            device=dev)
        theta = torch.bmm(c.unsqueeze(1), replies).view(r, n_cls, p_feat)
        stats[0, reps, sel_t] += sums.clipped.double() / sums.rows.double().clamp_min(1)
        stats[1, reps, sel_t] += g_data.double().norm(dim=-1) / (std.double()
                                                                 * g_data.shape[-1]**0.5)
        stats[2, reps, sel_t] += 1
        if on_round is not None:
            on_round(t + 1)
    record(config.rounds, None)
    return SimResult.build(config=config, dataset=dataset, sizes=sizes, setup_privacy=setup.privacy,
                           history=history, stats=stats.cpu().numpy(), theta=theta.cpu().numpy())
