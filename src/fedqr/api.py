"""The public Python API: :func:`simulate` and :func:`plan` on a :class:`FederatedData`.

Both take keyword arguments only; the CLI's ``fedqr run`` and ``fedqr plan`` are option
parsing over them. Results hold what ``result.json`` and ``plan --json`` hold.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedqr.data import DataSpec, FederatedData
from fedqr.data.presets import default_clip, default_eval_every
from fedqr.data.source import DataSource, OwnData
from fedqr.models.losses import LossFn
from fedqr.models.workload import Model, Workload
from fedqr.planner import DataUse, Plan, ProxyChoice, Scenario, SearchSettings, make_plan
from fedqr.privacy import Accountant, Mechanism, mechanism_for
from fedqr.sim.config import (
    Aggregation,
    LearningRate,
    LrSchedule,
    PrivacyConfig,
    Selection,
    SimConfig,
    parse_train_eval,
)
from fedqr.sim.loop import run_rounds
from fedqr.sim.provenance import provenance
from fedqr.sim.result import write_json_atomic

__all__ = ["PlanResult", "SimulationResult", "plan", "simulate"]



@dataclass(frozen=True)
class PlanResult:
    """The planner's answer: the recommended (T, b, q) and what ``plan --json`` holds."""

    plan: Plan
    document: dict[str, Any]

    @property
    def rounds(self) -> int:
        """T."""
        return self.plan.recommended.rounds

    @property
    def clients_per_round(self) -> int:
        """b."""
        return self.plan.recommended.clients_per_round

    @property
    def sample_rate(self) -> float:
        """q (1 for full-batch mechanisms)."""
        return self.plan.recommended.sample_rate

    @property
    def predicted_test_loss(self) -> float:
        """The twin's mean prediction for the recommended schedule."""
        return self.plan.recommended.mean

    @property
    def useful(self) -> bool:
        """Whether the plan beats the untrained model (else nothing should run)."""
        return self.plan.useful


@dataclass(frozen=True)
class SimulationResult:
    """A finished simulation: ``document`` is the ``result.json`` document."""

    document: dict[str, Any]

    @property
    def final_test_accuracy(self) -> float:
        """Mean over the repeats of the last evaluation's test accuracy."""
        return float(self.document["summary"]["final_test_accuracy_mean"])

    @property
    def final_test_loss(self) -> float:
        """Mean over the repeats of the last evaluation's test loss."""
        return float(self.document["summary"]["final_test_loss_mean"])

    def save(self, path: str | Path) -> None:
        """Write ``result.json`` atomically."""
        write_json_atomic(Path(path), self.document)


def _source(data: FederatedData | DataSpec | DataSource, seed: int) -> DataSource:
    if isinstance(data, FederatedData):
        return OwnData(data=data, seed=seed)
    if isinstance(data, DataSpec | OwnData):
        return data
    raise TypeError(f"data must be a FederatedData or a DataSpec, got {type(data).__name__}")


def simulate(
    *, data: FederatedData | DataSpec | DataSource, model: Model | None = None,
    mechanism: Mechanism | str = Mechanism.GAUSSIAN, eps: float | Sequence[float] = 1.0,
    delta: float | Sequence[float] = 1e-5, clip: float | None = None,
    sample_rate: float | None = None, rounds: int | None = None,
    clients_per_round: int | None = None, schedule: PlanResult | None = None,
    lr: float = 0.05, lr_decay: float = 0.01, lr_schedule: LrSchedule = LrSchedule.INVERSE_TIME,
    mu: float | None = None, gamma: float | None = None,
    weight_decay: float = 0.01, accountant: Accountant | str = Accountant.RDP,
    selection: Selection = Selection.ROUND_ROBIN, aggregation: Aggregation = Aggregation.PAPER,
    repeats: int = 1, seed: int = 0, eval_every: int | None = None, eval_train: str = "end",
    hidden: Sequence[int] = (64,), loss_fn: LossFn | None = None,
    device: str | torch.device = "cpu", on_round: Callable[[int], None] | None = None,
) -> SimulationResult:
    """Simulate FedSGD-DPC on ``data`` with ``model`` and return the ``result.json`` document.

    Parameters
    ----------
    data:
        The clients' data (:class:`FederatedData`, or a built-in :class:`DataSpec`).
    model:
        See :data:`Model` (default: the data set's paper model; ``logreg`` for own data).
    mechanism, eps, delta, clip, sample_rate, accountant:
        Client-side privacy: one budget for all clients or one per client; ``clip`` and
        ``sample_rate`` default to the paper's.
    rounds, clients_per_round, schedule:
        T and b, or a :class:`PlanResult` whose recommended T, b and q are run.
    lr, lr_decay, lr_schedule, mu, gamma, weight_decay, selection, aggregation:
        Training rule (the paper's defaults; ``mu`` and ``gamma`` for the theory schedule).
    repeats, seed, eval_every:
        Independent repeats, the seed of everything drawn, evaluation cadence.
    eval_train:
        When the training objective is evaluated: ``"every"`` evaluation, at the ``"end"``
        only (default), ``"none"``, or ``"sample:N"`` (estimated from N rows, with its
        standard error).
    hidden, loss_fn:
        Hidden widths of ``mlp``; per-sample loss of a torch model (default cross-entropy).
    device, on_round:
        Torch device; progress callback with the number of finished rounds.
    """
    mech = Mechanism(mechanism)
    if schedule is not None:
        rounds, clients_per_round = schedule.rounds, schedule.clients_per_round
        sample_rate = schedule.sample_rate
    if rounds is None or clients_per_round is None:
        raise ValueError("give rounds and clients_per_round, or schedule=a PlanResult, got "
                         f"rounds={rounds}, clients_per_round={clients_per_round}")
    source = _source(data, seed)
    work = Workload.of(source, model, hidden=hidden, loss_fn=loss_fn)
    client_data, kernel = work.build(), work.kernel
    q = sample_rate if sample_rate is not None else mechanism_for(mech).default_sample_rate
    train_eval, train_eval_rows = parse_train_eval(eval_train)
    config = SimConfig(
        num_clients=source.num_clients, clients_per_round=clients_per_round, rounds=rounds,
        selection=selection, aggregation=aggregation,
        lr=LearningRate(schedule=lr_schedule, eta0=lr, decay=lr_decay, mu=mu, gamma=gamma),
        weight_decay=weight_decay,
        privacy=PrivacyConfig(mechanism=mech, eps=_tuple(eps), delta=_tuple(delta),
                              clip=clip if clip is not None else default_clip(source.dataset,
                                                                              mech),
                              sample_rate=q, accountant=Accountant(accountant)),
        repeats=repeats, seed=seed,
        eval_every=eval_every if eval_every is not None
        else default_eval_every(source.dataset, rounds),
        train_eval=train_eval, train_eval_rows=train_eval_rows)
    started = time.perf_counter()
    result = run_rounds(client_data.dataset, client_data.partition, config, kernel,
                        device=device, on_round=on_round)
    doc = result.to_json()
    doc["wall_time_s"] = time.perf_counter() - started
    doc["data"] = source.identity()
    doc["provenance"] = provenance(model=kernel.describe(), device=device)
    if schedule is not None:
        doc["plan"] = {**schedule.document["recommended"],
                       "achieved_test_loss": doc["summary"]["final_test_loss_mean"]}
    return SimulationResult(document=doc)


def plan(
    *, data: FederatedData | DataSpec | DataSource, model: Model | None = None,
    mechanism: Mechanism | str = Mechanism.GAUSSIAN, eps: float | Sequence[float] = 1.0,
    delta: float | Sequence[float] = 1e-5, clip: float | None = None,
    sample_rate: float | None = 0.01, rounds: int | None = None,
    clients_per_round: int | None = None, lr: float = 0.05, lr_decay: float = 0.01,
    lr_schedule: LrSchedule = LrSchedule.INVERSE_TIME, weight_decay: float = 0.01,
    accountant: Accountant | str = Accountant.RDP, aggregation: Aggregation = Aggregation.PAPER,
    data_use: DataUse | str = DataUse.CLEAR_PROXY, proxy: FederatedData | DataSpec | None = None,
    proxy_share: float | None = None, twin_repeats: int | None = None, seed: int = 0,
    hidden: Sequence[int] = (64,), device: str | torch.device = "cpu",
    use_cache: bool = True, progress: Callable[[str, int], None] | None = None,
) -> PlanResult:
    """Plan T, b (and q with ``sample_rate=None``) for ``data`` with the twin.

    ``data_use="clear-proxy"`` (default) reads a share of the clients' data WITHOUT privacy
    (the plan says so); ``"public-proxy"`` trains the twin on ``proxy`` (public data with the
    clients' features and classes) and reads only the clients' sizes. Other parameters as
    :func:`simulate`.
    """
    mech = Mechanism(mechanism)
    source = _source(data, seed)
    use = DataUse(data_use)
    scenario = Scenario(
        data=source, mechanism=mech, eps=_tuple(eps), delta=_tuple(delta),
        clip=clip if clip is not None else default_clip(source.dataset, mech),
        sample_rate=sample_rate if mechanism_for(mech).batch_rate(0.5) < 1 else 1.0,
        accountant=Accountant(accountant), rounds=rounds, clients_per_round=clients_per_round,
        lr=LearningRate(schedule=lr_schedule, eta0=lr, decay=lr_decay),
        weight_decay=weight_decay, aggregation=aggregation,
        kernel=None if model is None else Workload.of(source, model,
                                                  hidden=hidden).kernel)
    if use is DataUse.CLEAR_PROXY:
        if proxy is not None:
            raise ValueError("proxy needs data_use='public-proxy', got data_use='clear-proxy'")
        choice = ProxyChoice(use=use, share=proxy_share)
    elif proxy is None:
        raise ValueError(f"data_use={use.value!r} needs proxy= (public data with the "
                         "clients' features and classes), got none")
    else:
        public = _source(proxy, seed + 1)
        choice = ProxyChoice(use=DataUse.PUBLIC_PROXY, share=proxy_share, public=public,
                             public_label=getattr(public.dataset, "value", None) or "own")
    settings = SearchSettings(repeats=twin_repeats, seed=seed)
    result = make_plan(scenario, proxy=choice, settings=settings, device=device,
                       use_cache=use_cache, progress=progress)
    return PlanResult(plan=result, document=plan_document(result, scenario))


def plan_document(plan: Plan, scenario: Scenario) -> dict[str, Any]:
    """``fedqr plan --json``: the recommended schedule and every prediction."""
    from fedqr.sim.result import jsonable

    s = scenario
    model = (s.kernel.describe() if s.kernel is not None
             else None if s.model is None else {"name": s.model.value})
    return {"recommended": plan.recommended_dict(mechanism=s.mechanism),
            "untrained_test_loss": plan.untrained_loss,
            "scenario": {"data": s.data.identity(), "mechanism": s.mechanism.value,
                         "eps": list(s.eps), "delta": list(s.delta), "clip": s.clip,
                         "accountant": s.accountant.value, "model": model,
                         "sample_rate": s.sample_rate if s.poisson else None,
                         "rounds": s.rounds, "clients_per_round": s.clients_per_round,
                         "lr": jsonable(s.lr), "weight_decay": s.weight_decay,
                         "aggregation": s.aggregation.value},
            "simulated_rounds": plan.simulated_rounds, "wall_time_s": plan.wall_time_s,
            "from_cache": plan.from_cache, "simulated": plan.settings.get("simulated"),
            "predictions": [p.as_dict() for p in plan.predictions if math.isfinite(p.mean)]}


def _tuple(v: float | Sequence[float]) -> tuple[float, ...]:
    return (float(v),) if isinstance(v, int | float) else tuple(float(e) for e in v)
