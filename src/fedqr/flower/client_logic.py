"""One client's side of FedSGD-DPC, without Flower: its noise, its ledger, its reply.

Its data and model come from :mod:`fedqr.flower.client_data`.
The reply is computed with the round loop's own parts (the run's model kernel, the same
per-reply generators, the same reply function and noise sampler, the same float32
arithmetic), so a Flower client's reply equals the simulator's reply of that client in that
round, for any model.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dp_accounting
import numpy as np
import torch

from fedqr.flower.client_data import ClientData, load_client_data
from fedqr.flower.client_state import Budget, ReplayRefused, locked_state
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.own_data import BudgetRefused
from fedqr.models.kernel import GradSums
from fedqr.privacy import PrivacyLedger, noise_tensor
from fedqr.sim.budget import client_noise  # the engine's calibration
from fedqr.sim.config import SimConfig
from fedqr.sim.reply import client_replies
from fedqr.sim.schedule import make_schedule, reply_counts
from fedqr.sim.streams import (
    NOISE_STREAM,
    SAMPLE_STREAM,
    draw_noise,
    reply_generator,
    reply_positions,
)


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


@dataclass(frozen=True, kw_only=True)
class ClientPlan:
    """A client's noise, fixed before round 0 from its budget and exact reply count R_i."""

    replies: int
    noise_std: float
    event: dp_accounting.DpEvent | None
    noise_param: float = 0.0
    budget: Budget | None


def client_plan(sim: SimConfig, *, client: int, size: int,
                calibration: dict[str, list[float]], num_params: int | None = None) -> ClientPlan:
    """Calibrate (or reuse the calibration in ``calibration``) exactly as the engine does."""
    replies = int(reply_counts(_schedule(sim), sim.num_clients)[0, client])
    budget = client_budget(sim, client=client)
    p = sim.privacy
    if budget is None or replies == 0:
        return ClientPlan(replies=replies, noise_std=0.0, event=None, budget=budget)
    key = repr((p.mechanism.value, replies, p.clip, size, budget.eps, budget.delta,
                p.sample_rate, budget.accountant, num_params))
    if key in calibration:
        param, std = calibration[key]
    else:
        param, std, _ = client_noise(sim, replies=replies, size=size, eps=budget.eps,
                                     delta=budget.delta, num_params=num_params)
        calibration[key] = [param, std]
    event = p.spec.event(param=param, clip=p.clip, sample_rate=p.sample_rate, size=size,
                         num_params=num_params)
    return ClientPlan(replies=replies, noise_std=std, noise_param=param, event=event,
                      budget=budget)


def client_budget(sim: SimConfig, *, client: int) -> Budget | None:
    """Client ``client``'s budget and accountant (``None`` without a mechanism)."""
    p = sim.privacy
    kind = p.spec.accountant(p.accountant)
    if kind is None:
        return None
    return Budget(client_id=client, eps=p.client_eps(sim.num_clients)[client],
                  delta=p.client_delta(sim.num_clients)[client], accountant=kind.value)


def _schedule(sim: SimConfig) -> np.ndarray:
    return make_schedule(num_clients=sim.num_clients, clients_per_round=sim.clients_per_round,
                         rounds=sim.rounds, selection=sim.selection, repeats=1,
                         rng=np.random.default_rng(sim.seed))


def compute_reply(data: ClientData, theta: np.ndarray, *, sim: SimConfig, client: int,
                  round: int, noise_std: float, noise_param: float = 0.0,
                  charge: Callable[[], None] | None = None,
                  ) -> tuple[np.ndarray, GradSums, float]:
    """``theta_t - eta_t (g + w)`` of one client: the round loop's step for a batch of one reply.

    The clipped sums come from the run's kernel attached to the client's rows
    (:meth:`~fedqr.models.kernel.Attached.full_sums`, or
    :meth:`~fedqr.models.kernel.Attached.sample_sums` over the reply's Poisson batch), as in
    :func:`fedqr.sim.loop.run_rounds`; the reply itself from
    :func:`fedqr.sim.reply.client_replies`. ``charge`` is called before the noise is drawn.
    Returns the new parameters (``theta``'s shape), the clipped-gradient sums and ``||g||_2``.
    """
    spec = sim.privacy.spec
    dev = torch.device("cpu")
    q = spec.batch_rate(sim.privacy.sample_rate)
    model = data.attached(norm=spec.norm, chunk_rows=sim.chunk_rows)
    th = torch.as_tensor(np.ascontiguousarray(theta, dtype=np.float32)).reshape(1, -1)
    sel = np.zeros((1, 1), dtype=np.int64)
    size = data.x.shape[0]
    if q < 1:
        gen = reply_generator(seed=sim.seed, repeat=0, round=round, client=client,
                              stream=SAMPLE_STREAM, device=dev)
        pos, valid = reply_positions(size, sample_rate=q, generator=gen, device=dev)
        sums = model.sample_sums(th, sel, clip=sim.privacy.clip,
                                 positions=(pos.unsqueeze(0), valid.unsqueeze(0)))
    else:
        sums = model.full_sums(th, sel, clip=sim.privacy.clip, with_train_loss=False)
    noise_gen = reply_generator(seed=sim.seed, repeat=0, round=round, client=client,
                                stream=NOISE_STREAM, device=dev)
    out = client_replies(
        sums.grad, sizes=np.array([[size]]), theta=th.unsqueeze(1), config=sim, round=round,
        std=noise_tensor([[noise_std]]),  # float32, rounded up as the engine's
        param=torch.full((1, 1), noise_param, dtype=torch.float64),
        noise=lambda s, p, n: draw_noise(spec, s, n, noise_gen, param=p), charge=charge)
    return (out.theta.view(theta.shape).numpy(), sums,
            float(out.g_data.double().norm()))


def model_digest(theta: np.ndarray, *, round: int) -> str:
    """Identifies the request (model and round) a reply answers."""
    h = hashlib.sha256(np.ascontiguousarray(theta, dtype=np.float32).tobytes())
    h.update(str(round).encode())
    return h.hexdigest()


def answer_round(cfg: FlowerRunConfig, *, client: int, round: int, theta: np.ndarray,
                 run_key: str, state_dir: Path, data: ClientData | None = None,
                 ledger_budget: Budget | None = None) -> Reply:
    """Compute, charge (persisted) and return one reply.

    ``data``: the client's own data (default: its shard of the run's partition);
    ``ledger_budget``: the budget of the client's ledger (default: the run's, for client
    ``client``), at least the run's.

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
    if data is None:
        data = load_client_data(cfg, client=client, cache_dir=state_dir)
    shape = data.theta_shape
    if theta.shape != shape:
        raise ValueError(f"theta must have shape {shape}, got theta.shape={theta.shape}")
    budget = client_budget(sim, client=client)
    if budget is None:  # no mechanism: nothing to account
        new, sums, gnorm = compute_reply(data, theta, sim=sim, client=client, round=round,
                                         noise_std=0.0)
        return _reply(new, sums, gnorm, size=data.x.shape[0], noise_std=0.0, eps=0.0,
                      charged=0)
    digest = model_digest(theta, round=round)
    with locked_state(state_dir, budget=ledger_budget or budget) as (state, save):
        plan = client_plan(sim, client=client, size=data.x.shape[0],
                           calibration=state.calibration, num_params=math.prod(shape))
        if plan.event is None:  # unreachable: a scheduled client of a private run
            raise RuntimeError(f"client {client} has no DP event for round {round}")
        answered = state.answered.setdefault(run_key, {})
        prior = answered.get(str(round))
        if prior is not None and prior != digest:
            raise ReplayRefused(f"client {client}: round {round} of run {run_key} was already "
                                "answered for another model; a second answer would spend "
                                "budget twice: refused")
        event = plan.event
        if not answered:
            _check_fits(state.ledger, plan, client=client)

        def charge() -> None:  # charge and persist before the noise is drawn
            if prior is None:
                state.ledger.charge(event)
                answered[str(round)] = digest
                save()

        new, sums, gnorm = compute_reply(data, theta, sim=sim, client=client, round=round,
                                         noise_std=plan.noise_std, noise_param=plan.noise_param,
                                         charge=charge)
        return _reply(new, sums, gnorm, size=data.x.shape[0], noise_std=plan.noise_std,
                      eps=state.ledger.spent()[0], charged=state.ledger.replies)


def check_run(cfg: FlowerRunConfig, *, client: int, run_key: str, state_dir: Path,
              data: ClientData | None = None, ledger_budget: Budget | None = None
              ) -> tuple[int, float]:
    """The server's check before round 0: does this run's whole schedule fit what the
    client's ledger has left? Charges nothing (it keeps the noise calibration, which the
    first reply would compute anyway). Arguments as :func:`answer_round`'s.

    Returns
    -------
    tuple of int and float
        The replies the run asks of this client, and the eps its ledger spent so far (0
        without a mechanism).

    Raises
    ------
    BudgetRefused
        If the run's replies do not fit beside what earlier runs spent.
    """
    sim = cfg.sim_config()
    budget = client_budget(sim, client=client)
    if budget is None:  # no mechanism: nothing to account
        return int(reply_counts(_schedule(sim), sim.num_clients)[0, client]), 0.0
    if data is None:
        data = load_client_data(cfg, client=client, cache_dir=state_dir)
    with locked_state(state_dir, budget=ledger_budget or budget) as (state, save):
        known = len(state.calibration)
        plan = client_plan(sim, client=client, size=data.x.shape[0],
                           calibration=state.calibration, num_params=math.prod(data.theta_shape))
        if not state.answered.get(run_key):  # a run already begun was checked then
            _check_fits(state.ledger, plan, client=client)
        if len(state.calibration) != known:
            save()
        spent = state.ledger.spent()[0]
        return plan.replies, spent if math.isfinite(spent) else -1.0


def _check_fits(ledger: PrivacyLedger, plan: ClientPlan, *, client: int) -> None:
    """Refuse a run whose whole schedule does not fit what the client's ledger has left
    after earlier runs (nothing of this run is charged)."""
    if plan.event is None or not ledger.would_exceed(plan.event, plan.replies):
        return
    spent, _ = ledger.spent()
    raise BudgetRefused(
        f"client {client}: this run's {plan.replies} replies do not fit its budget eps="
        f"{ledger.eps_budget:g} (delta={ledger.delta_budget:g}) beside the eps={spent:.6g} "
        f"its ledger spent in earlier runs: refused before its first reply (nothing "
        f"charged); run with a smaller --eps, fewer rounds, or a node with budget left")


def _reply(theta: np.ndarray, sums: GradSums, gnorm: float, *, size: int, noise_std: float,
           eps: float, charged: int) -> Reply:
    rows = int(sums.rows.sum())
    clipped = float(sums.clipped.sum())
    return Reply(theta=theta, num_samples=size, rows=rows, clipped_fraction=clipped / max(rows, 1),
                 grad_norm=gnorm, noise_std=noise_std,
                 epsilon_spent=eps if math.isfinite(eps) else -1.0, replies_charged=charged)


__all__ = ["ClientData", "ClientPlan", "Reply", "answer_round", "check_run", "client_budget",
           "client_plan", "compute_reply", "load_client_data", "model_digest"]
