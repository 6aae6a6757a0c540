"""FedSGD-DPC (paper Algorithm 1) for any torch model, e.g. the paper's FEMNIST CNN.

The same algorithm, schedule (:mod:`fedqr.sim.schedule`), per-client noise calibration and
ledgers (:func:`fedqr.sim.budget.plan_client_privacy`), noise samplers and aggregation
(:mod:`fedqr.sim.engine`), learning rates and results (:class:`~fedqr.sim.result.SimResult`)
as the logistic-regression engine; the parameters ``theta`` are the model's flattened
parameters (``model.parameters()`` order) and the per-sample clipping is
:func:`fedqr.models.per_sample.clipped_grad_sums`. One round t:

1. The server sends theta_t to the round's clients P_t.
2. Each selected client sums its per-sample-clipped gradients over all its d_i rows
   (Laplace; chunked, one call per client) or over a Poisson sample of rate q (Gaussian; the
   samples of all selected clients are gathered and processed together, as segments).
3. g = sum / d_i (or / (q d_i)) + weight_decay * theta_t.
4. Every reply is charged to its client's ledger, then theta^i = theta_t - eta_t (g + w_i).
5. theta_{t+1} = sum_i c_i theta^i (``paper`` or ``normalized`` aggregation).

Repeats run one after another inside each round (each model is a separate network; batching
repeats would need a vmap over parameters and R times the activation memory). The initial
models come from one CPU generator seeded by ``seed`` (repeat r gets the r-th draw). With
``noise_seeding="batch"`` repeat r draws its Poisson batches and noise from its own
generator seeded from ``(seed, r)``, so a repeat's run does not depend on how many repeats
there are; with ``"per-reply"`` each reply's batch and noise come from
:func:`fedqr.sim.engine.reply_generator`, as in the logistic-regression engine.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from fedqr.data import Dataset, Partition
from fedqr.models.per_sample import ClippedSums, clipped_grad_sums
from fedqr.sim.budget import plan_client_privacy
from fedqr.sim.config import NoiseSeeding, SimConfig
from fedqr.sim.engine import (
    NOISE_STREAM,
    SAMPLE_STREAM,
    aggregation_weights,
    draw_noise,
    reply_generator,
    reply_positions,
)
from fedqr.sim.network_parts import (
    ModelFactory,
    NetworkOptions,
    evaluate_model,
    load_flat,
    paper_cnn_factory,
    place_model,
    repeat_seeds,
)
from fedqr.sim.passes import poisson_positions
from fedqr.sim.reply import client_replies
from fedqr.sim.result import RoundMetrics, SimResult
from fedqr.sim.schedule import make_schedule

__all__ = ["ModelFactory", "NetworkOptions", "evaluate_model", "paper_cnn_factory",
           "simulate_network"]

RoundCallback = Callable[[int], None]


def _draw(noise: Callable[[np.ndarray, Tensor, Tensor, int, int], Tensor], sel: np.ndarray,
          std: Tensor, param: Tensor, _num_params: int, *, r: int, t: int) -> Tensor:
    return noise(sel, std, param, r, t)


def simulate_network(
    dataset: Dataset,
    partition: Partition,
    config: SimConfig,
    *,
    model_factory: ModelFactory | None = None,
    device: str | torch.device = "cpu",
    on_round: RoundCallback | None = None,
    options: NetworkOptions | None = None,
) -> SimResult:
    """Run FedSGD-DPC with a torch model ``config.repeats`` times and return every metric.

    Parameters
    ----------
    dataset:
        Training and test arrays; rows are reshaped to ``dataset.image_shape`` when set.
    partition:
        Which training rows each client owns (e.g. ``make_partition("by-writer", ...)``).
    config:
        N, b, T, privacy, learning rate, weight decay, repeats, seed, ``eval_every``.
    model_factory:
        Builds an initialised model from a CPU ``torch.Generator``; default: the paper's CNN
        (:func:`paper_cnn_factory`).
    device:
        Torch device for all tensors (``"cuda"`` when available).
    on_round:
        Called with the number of finished rounds after every round.
    options:
        Chunk sizes, per-sample method, memory format, training-loss evaluation.

    Returns
    -------
    SimResult
        As :func:`fedqr.sim.engine.simulate`; ``final_theta`` has shape ``(R, P)``.

    Raises
    ------
    fedqr.privacy.PrivacyBudgetExceeded
        Before any reply that would take a client over its budget.
    """
    opts = options if options is not None else NetworkOptions()
    dev = torch.device(device)
    if partition.num_clients != config.num_clients:
        raise ValueError(f"partition has {partition.num_clients} clients but "
                         f"num_clients={config.num_clients}")
    order = np.concatenate(partition.indices)
    if len(order) != dataset.num_train or len(np.unique(order)) != len(order):
        raise ValueError("partition must assign every training sample to exactly one client")
    shape = dataset.image_shape or (dataset.num_features,)
    x = torch.as_tensor(dataset.x_train[order], device=dev).view(-1, *shape)
    y = torch.as_tensor(dataset.y_train[order], device=dev)
    x_test = torch.as_tensor(dataset.x_test, device=dev).view(-1, *shape)
    y_test = torch.as_tensor(dataset.y_test, device=dev)
    sizes = partition.sizes
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    schedule = make_schedule(num_clients=config.num_clients,
                             clients_per_round=config.clients_per_round, rounds=config.rounds,
                             selection=config.selection, repeats=config.repeats,
                             rng=np.random.default_rng(config.seed))
    spec = config.privacy.spec
    norm = spec.norm
    q = spec.batch_rate(config.privacy.sample_rate)
    clip = config.privacy.clip

    factory = model_factory if model_factory is not None else paper_cnn_factory(dataset)
    init_gen = torch.Generator().manual_seed(config.seed)
    thetas = []
    for _ in range(config.repeats):
        m = factory(init_gen)
        thetas.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    privacy = plan_client_privacy(config, sizes=sizes, schedule=schedule,
                                  num_params=int(thetas[0].numel()))
    groups = privacy.group_of(config.repeats)
    model = place_model(m, dev, channels_last=opts.channels_last)
    theta = torch.stack(thetas).to(dev, torch.float32)  # (R, P)
    num_p = theta.shape[1]
    gens = [torch.Generator(device=dev).manual_seed(s)
            for s in repeat_seeds(config.seed, config.repeats)]
    history: list[RoundMetrics] = []
    stats = np.zeros((3, config.repeats, config.num_clients))  # clipped, snr, replies
    n_train = int(offsets[-1])

    per_reply = config.noise_seeding is NoiseSeeding.PER_REPLY

    def stream(r: int, t: int, client: int, kind: int) -> torch.Generator:
        return reply_generator(seed=config.seed, repeat=r, round=t, client=client, stream=kind,
                               device=dev)

    def positions(sel: np.ndarray, r: int, t: int) -> tuple[Tensor, Tensor]:
        """Poisson batches of the selected clients, ``(b, m)`` positions and validity."""
        if not per_reply:
            return poisson_positions(torch.as_tensor(sizes[sel], device=dev), sample_rate=q,
                                     generator=gens[r])
        draws = [reply_positions(int(sizes[c]), sample_rate=q, device=dev,
                                 generator=stream(r, t, int(c), SAMPLE_STREAM)) for c in sel]
        m = max(p.shape[-1] for p, _ in draws)
        pos = torch.zeros(len(sel), m, dtype=torch.int64, device=dev)
        valid = torch.zeros(len(sel), m, dtype=torch.bool, device=dev)
        for j, (p_j, v_j) in enumerate(draws):
            pos[j, :p_j.shape[-1]], valid[j, :v_j.shape[-1]] = p_j[0], v_j[0]
        return pos, valid

    def noise(sel: np.ndarray, std: Tensor, param: Tensor, r: int, t: int) -> Tensor:
        if not per_reply:
            return draw_noise(spec, std, num_p, gens[r], param=param)
        return torch.stack([draw_noise(spec, std[j], num_p, stream(r, t, int(c), NOISE_STREAM),
                                       param=param[j]) for j, c in enumerate(sel)])

    def client_sums(sel: np.ndarray, r: int, t: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(grad (b, P), rows (b,), clipped (b,), loss sums (b,)) of the selected clients."""
        def run(xs: Tensor, ys: Tensor, off: np.ndarray | None) -> ClippedSums:
            return clipped_grad_sums(model, xs, ys, clip=clip, norm=norm, offsets=off,
                                     chunk_rows=opts.chunk_rows, method=opts.method)

        if q < 1:
            pos, valid = positions(sel, r, t)
            rows = (torch.as_tensor(offsets[sel], device=dev)[:, None] + pos)[valid]
            counts = valid.sum(dim=1).cpu().numpy()
            seg_off = np.concatenate([[0], np.cumsum(counts)])
            out = run(x[rows], y[rows], seg_off)
            return out.grad, out.rows, out.clipped, out.loss_sum
        parts = [run(x[offsets[i]:offsets[i + 1]], y[offsets[i]:offsets[i + 1]], None)
                 for i in sel]
        return (torch.cat([p.grad for p in parts]), torch.cat([p.rows for p in parts]),
                torch.cat([p.clipped for p in parts]), torch.cat([p.loss_sum for p in parts]))

    def train_loss(fused: dict[int, float], r: int) -> float:
        if not opts.train_loss:
            return math.nan
        total = sum(fused.values())
        for i in range(config.num_clients):
            if i not in fused:
                lo, hi = int(offsets[i]), int(offsets[i + 1])
                total += evaluate_model(model, x[lo:hi], y[lo:hi], chunk_rows=opts.eval_rows,
                                        channels_last=opts.channels_last)[0]
        reg = 0.5 * config.weight_decay * float(theta[r].double().pow(2).sum())
        return total / n_train + reg

    def record(t: int, fused: list[dict[int, float]]) -> None:
        test_loss, test_acc, train = [], [], []
        for r in range(config.repeats):
            load_flat(model, theta[r])
            loss, correct = evaluate_model(model, x_test, y_test, chunk_rows=opts.eval_rows,
                                           channels_last=opts.channels_last)
            test_loss.append(loss / len(y_test))
            test_acc.append(correct / len(y_test))
            train.append(train_loss(fused[r], r))
        history.append(RoundMetrics(round=t, test_loss=test_loss, test_accuracy=test_acc,
                                    train_loss=train, epsilon_spent=privacy.ledgers.spent_eps()))

    std_all = torch.as_tensor(privacy.noise_std, dtype=torch.float32, device=dev)  # (S, N)
    param_all = torch.as_tensor(privacy.noise_param, dtype=torch.float64, device=dev)
    for t in range(config.rounds):
        sel_all = schedule[groups, t]  # (R, b)
        evaluate_now = t % config.eval_every == 0
        fused: list[dict[int, float]] = []
        grads = []
        for r in range(config.repeats):
            load_flat(model, theta[r])
            sel = sel_all[r]
            grad, rows, clipped, loss_sum = client_sums(sel, r, t)
            grads.append(grad)
            fused.append(dict(zip(sel.tolist(), loss_sum.tolist(), strict=True))
                         if q == 1 else {})
            stats[0, r, sel] += (clipped.double() / rows.double().clamp_min(1)).cpu().numpy()
            stats[2, r, sel] += 1
        if evaluate_now:
            record(t, fused)
        for r in range(config.repeats):
            sel = sel_all[r]
            sel_t = torch.as_tensor(sel, device=dev)
            out = client_replies(  # the one reply function; every repeat's round charged once
                grads[r], sizes=sizes[sel], theta=theta[r], config=config, round=t,
                std=std_all[groups[r], sel_t], param=param_all[groups[r], sel_t],
                noise=functools.partial(_draw, noise, sel, r=r, t=t),
                charge=functools.partial(privacy.ledgers.charge_round, sel_all) if r == 0
                else None)
            replies = out.theta  # (b, P)
            with np.errstate(divide="ignore", invalid="ignore"):  # no noise: inf, as engine
                stats[1, r, sel] += (out.g_data.double().norm(dim=1).cpu().numpy()
                                     / (privacy.noise_std[groups[r], sel] * math.sqrt(num_p)))
            c = torch.as_tensor(aggregation_weights(config, sizes, sel[None])[0],
                                dtype=torch.float32, device=dev)
            theta[r] = c @ replies
        if on_round is not None:
            on_round(t + 1)
    record(config.rounds, [{} for _ in range(config.repeats)])
    return SimResult.build(config=config, dataset=dataset, sizes=sizes, setup_privacy=privacy,
                           history=history, stats=stats, theta=theta.cpu().numpy())
