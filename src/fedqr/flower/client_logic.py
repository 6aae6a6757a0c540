"""One client's side of FedSGD-DPC, without Flower: its data, its noise, its reply.

The reply is computed with the engine's own functions (the same clipped-gradient pass, the
same per-reply generators, the same noise sampler, the same float32 arithmetic), so a Flower
client's reply equals the engine's reply of that client in that round.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import dp_accounting
import numpy as np
import torch

from fedqr._atomic import write_file_atomic
from fedqr.flower.client_state import Budget, ReplayRefused, locked_state
from fedqr.flower.config import FlowerRunConfig
from fedqr.models.logreg import Norm
from fedqr.privacy import Accountant, Mechanism, gaussian_event, laplace_event
from fedqr.sim.budget import client_noise  # the engine's calibration
from fedqr.sim.config import SimConfig
from fedqr.sim.engine import (
    NOISE_STREAM,
    SAMPLE_STREAM,
    draw_noise,
    reply_generator,
    reply_positions,
)
from fedqr.sim.passes import GradSums, client_layout, full_batch_sums, poisson_sums
from fedqr.sim.schedule import make_schedule, reply_counts

# Flower's simulation keeps one worker process alive across messages: data stay here.
_DATA: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, int]] = {}


@dataclass(frozen=True, kw_only=True)
class ClientData:
    """A client's own training rows."""

    x: np.ndarray  # (d_i, p) float32
    y: np.ndarray  # (d_i,) int64
    num_classes: int


@dataclass(frozen=True, kw_only=True)
class Reply:
    """What a client sends back: theta_t - eta_t (g + w) and its diagnostics."""

    theta: np.ndarray  # (k, p) float32
    num_samples: int  # d_i
    rows: int
    clipped_fraction: float
    grad_norm: float  # ||g||_2 of the clipped mean gradient, without weight decay
    noise_std: float
    epsilon_spent: float  # after this reply (0 without a mechanism)
    replies_charged: int


def load_client_data(cfg: FlowerRunConfig, *, client: int,
                     cache_dir: Path | None) -> ClientData:
    """Client ``client``'s rows of the partition, cached in memory and in ``cache_dir``."""
    if not 0 <= client < cfg.num_clients:
        raise ValueError(f"partition-id must be in [0, num_clients - 1={cfg.num_clients - 1}], "
                         f"got partition-id={client}")
    key = (cfg.dataset.value, cfg.data_dir, cfg.fraction, cfg.seed, cfg.partition.value,
           cfg.alpha, cfg.num_clients, client)
    if key not in _DATA:
        name = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        path = cache_dir / f"data-{name}.npz" if cache_dir is not None else None
        if path is not None and path.is_file():
            with np.load(path) as f:
                _DATA[key] = (f["x"], f["y"], int(f["k"]))
        else:
            ds, part = cfg.load_data()
            idx = part.indices[client]
            _DATA[key] = (ds.x_train[idx], ds.y_train[idx], ds.num_classes)
            if path is not None:
                _save_npz(path, x=_DATA[key][0], y=_DATA[key][1], k=np.array(ds.num_classes))
    x, y, k = _DATA[key]
    return ClientData(x=x, y=y, num_classes=k)


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    write_file_atomic(path, lambda p: np.savez(p, **arrays))  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class ClientPlan:
    """A client's noise, fixed before round 0 from its budget and exact reply count R_i."""

    replies: int
    noise_std: float
    event: dp_accounting.DpEvent | None
    budget: Budget | None


def client_plan(sim: SimConfig, *, client: int, size: int,
                calibration: dict[str, list[float]]) -> ClientPlan:
    """Calibrate (or reuse the calibration in ``calibration``) exactly as the engine does."""
    replies = int(reply_counts(_schedule(sim), sim.num_clients)[0, client])
    budget = client_budget(sim, client=client)
    p = sim.privacy
    if budget is None or replies == 0:
        return ClientPlan(replies=replies, noise_std=0.0, event=None, budget=budget)
    key = repr((p.mechanism.value, replies, p.clip, size, budget.eps, budget.delta,
                p.sample_rate, budget.accountant))
    if key in calibration:
        param, std = calibration[key]
    else:
        param, std, _ = client_noise(sim, replies=replies, size=size, eps=budget.eps,
                                     delta=budget.delta)
        calibration[key] = [param, std]
    if p.mechanism is Mechanism.LAPLACE:
        event = laplace_event(scale=param, clip=p.clip, num_samples=size)
    else:
        event = gaussian_event(noise_multiplier=param, sample_rate=p.sample_rate)
    return ClientPlan(replies=replies, noise_std=std, event=event, budget=budget)


def client_budget(sim: SimConfig, *, client: int) -> Budget | None:
    """Client ``client``'s budget and accountant (``None`` without a mechanism)."""
    p = sim.privacy
    if p.mechanism is Mechanism.NONE:
        return None
    kind = Accountant.PURE if p.mechanism is Mechanism.LAPLACE else p.accountant
    return Budget(client_id=client, eps=p.client_eps(sim.num_clients)[client],
                  delta=p.client_delta(sim.num_clients)[client], accountant=kind.value)


def _schedule(sim: SimConfig) -> np.ndarray:
    return make_schedule(num_clients=sim.num_clients, clients_per_round=sim.clients_per_round,
                         rounds=sim.rounds, selection=sim.selection, repeats=1,
                         rng=np.random.default_rng(sim.seed))


def compute_reply(data: ClientData, theta: np.ndarray, *, sim: SimConfig, client: int,
                  round: int, noise_std: float) -> tuple[np.ndarray, GradSums, float]:
    """``theta_t - eta_t (g + w)`` of one client: the engine's step for a batch of one reply.

    Returns the new parameters ``(k, p)``, the clipped-gradient sums and ``||g||_2``.
    """
    mech = sim.privacy.mechanism
    norm = Norm.L1 if mech is Mechanism.LAPLACE else Norm.L2
    dev = torch.device("cpu")
    x = torch.as_tensor(data.x, dtype=torch.float32)
    d = x.shape[0]
    layout = client_layout(x, torch.as_tensor(data.y, dtype=torch.int64),
                           offsets=np.array([0, d], dtype=np.int64),
                           num_classes=data.num_classes, norm=norm)
    th = torch.as_tensor(np.ascontiguousarray(theta, dtype=np.float32)).unsqueeze(0)
    sel = np.zeros((1, 1), dtype=np.int64)
    q = sim.privacy.sample_rate if mech is not Mechanism.LAPLACE else 1.0
    clip = sim.privacy.clip
    if q < 1:
        gen = reply_generator(seed=sim.seed, repeat=0, round=round, client=client,
                              stream=SAMPLE_STREAM, device=dev)
        pos, valid = reply_positions(d, sample_rate=q, generator=gen, device=dev)
        sums = poisson_sums(layout, th, sel, sample_rate=q, clip=clip, norm=norm,
                            generator=gen, positions=(pos.unsqueeze(0), valid.unsqueeze(0)))
    else:
        sums = full_batch_sums(layout, th, sel, clip=clip, norm=norm,
                               chunk_rows=sim.chunk_rows, with_train_loss=False)
    denom = torch.as_tensor(np.array([[d]]) * (1.0 if mech is Mechanism.LAPLACE else q),
                            dtype=torch.float32)
    g_data = sums.grad / denom.unsqueeze(-1)  # (1, 1, k p)
    flat = th.view(1, 1, -1)
    g = g_data + sim.weight_decay * flat
    std = torch.as_tensor(noise_std, dtype=torch.float32)
    noise = draw_noise(mech, std, g.shape[-1], reply_generator(
        seed=sim.seed, repeat=0, round=round, client=client, stream=NOISE_STREAM, device=dev))
    reply = flat - sim.lr.at(round) * (g + noise)
    return reply.view(theta.shape).numpy(), sums, float(g_data.double().norm())


def model_digest(theta: np.ndarray, *, round: int) -> str:
    """Identifies the request (model and round) a reply answers."""
    h = hashlib.sha256(np.ascontiguousarray(theta, dtype=np.float32).tobytes())
    h.update(str(round).encode())
    return h.hexdigest()


def answer_round(cfg: FlowerRunConfig, *, client: int, round: int, theta: np.ndarray,
                 run_key: str, state_dir: Path) -> Reply:
    """Compute, charge (persisted) and return one reply.

    Raises
    ------
    fedqr.privacy.PrivacyBudgetExceeded
        If the reply would exceed the client's budget (nothing is charged or released).
    ReplayRefused
        If the round was already answered for a different model.
    ValueError
        If the round does not select this client, or the request does not fit its data.
    """
    sim = cfg.sim_config()
    if not 0 <= round < sim.rounds or client not in _schedule(sim)[0, round]:
        raise ValueError(f"round {round} does not select client {client} in the round-robin "
                         f"schedule of N={sim.num_clients}, b={sim.clients_per_round}, "
                         f"T={sim.rounds}: refused")
    data = load_client_data(cfg, client=client, cache_dir=state_dir)
    shape = (data.num_classes, data.x.shape[1])
    if theta.shape != shape:
        raise ValueError(f"theta must have shape {shape}, got theta.shape={theta.shape}")
    budget = client_budget(sim, client=client)
    if budget is None:  # no mechanism: nothing to account
        new, sums, gnorm = compute_reply(data, theta, sim=sim, client=client, round=round,
                                         noise_std=0.0)
        return _reply(new, sums, gnorm, size=data.x.shape[0], noise_std=0.0, eps=0.0,
                      charged=0)
    digest = model_digest(theta, round=round)
    with locked_state(state_dir, budget=budget) as (state, save):
        plan = client_plan(sim, client=client, size=data.x.shape[0],
                           calibration=state.calibration)
        if plan.event is None:  # unreachable: a scheduled client of a private run
            raise RuntimeError(f"client {client} has no DP event for round {round}")
        answered = state.answered.setdefault(run_key, {})
        prior = answered.get(str(round))
        if prior is not None and prior != digest:
            raise ReplayRefused(f"client {client}: round {round} of run {run_key} was already "
                                "answered for another model; a second answer would spend "
                                "budget twice: refused")
        new, sums, gnorm = compute_reply(data, theta, sim=sim, client=client, round=round,
                                         noise_std=plan.noise_std)
        if prior is None:  # charge and persist before the reply leaves
            state.ledger.charge(plan.event)
            answered[str(round)] = digest
            save()
        return _reply(new, sums, gnorm, size=data.x.shape[0], noise_std=plan.noise_std,
                      eps=state.ledger.spent()[0], charged=state.ledger.replies)


def _reply(theta: np.ndarray, sums: GradSums, gnorm: float, *, size: int, noise_std: float,
           eps: float, charged: int) -> Reply:
    rows = int(sums.rows.sum())
    clipped = float(sums.clipped.sum())
    return Reply(theta=theta, num_samples=size, rows=rows, clipped_fraction=clipped / max(rows, 1),
                 grad_norm=gnorm, noise_std=noise_std,
                 epsilon_spent=eps if math.isfinite(eps) else -1.0, replies_charged=charged)
