"""The public Python API: :func:`simulate` and :func:`plan` on a :class:`FederatedData`.

Both take keyword arguments only; the CLI's ``fedqr run`` and ``fedqr plan`` are option
parsing over them. Results hold what ``result.json`` and ``plan --json`` hold.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from fedqr._device import resolve_device
from fedqr._precision import Arithmetic, arithmetic_of
from fedqr._validate import check_int_range, check_positive
from fedqr._warned import is_own
from fedqr.api_budget import DEFAULT_DELTA, DEFAULT_EPS, budget_values
from fedqr.api_results import PlanResult, PrivateDataWarning, SimulationResult
from fedqr.api_schedule import (
    check_schedule,
    model_identity,
    model_parts,
    same_data,
    same_scenario,
)
from fedqr.data import DataSpec, FederatedData
from fedqr.data._validate import parse_enum
from fedqr.data.presets import default_clip, default_eval_every
from fedqr.data.source import DataSource, OwnData
from fedqr.models.losses import LossFn
from fedqr.models.workload import Model, Workload
from fedqr.planner import DataUse, Plan, ProxyChoice, Scenario, SearchSettings, make_plan
from fedqr.privacy import Accountant, Mechanism, mechanism_for
from fedqr.privacy.spec import check_accountant_applies
from fedqr.sim.config import (
    Aggregation,
    LearningRate,
    LrSchedule,
    PrivacyConfig,
    Selection,
    SimConfig,
    parse_train_eval,
)
from fedqr.sim.loop import run_rounds, why_not_mixed
from fedqr.sim.provenance import model_record, provenance
from fedqr.sim.result import name_clients

__all__ = ["PlanResult", "SimulationResult", "plan", "simulate"]

_PLAN_SAMPLE_RATE = 0.01
""":func:`plan`'s default sampling rate (Gaussian; a full-batch mechanism ignores it)."""


def _source(data: object, seed: int, *, name: str = "data") -> DataSource:
    if isinstance(data, FederatedData):
        return OwnData(data=data, seed=seed)
    if isinstance(data, DataSpec | OwnData):
        return data
    hint = (f" (a file: {name}=fedqr.FederatedData.from_file({str(data)!r}, ...))"
            if isinstance(data, str | os.PathLike) else "")
    raise ValueError(f"{name} must be a FederatedData or a DataSpec, got "
                     f"{type(data).__name__}{hint}")


def _public(proxy: object, classes: object, seed: int, *, deployment: DataSource) -> DataSource:
    """``plan``'s public proxy: a file read as ``--proxy-data`` reads it (prepared as the
    ``deployment``'s rows are: per channel for images, per feature for rows, as given where
    they were read with ``standardize=False``), or a data set,
    its classes selected by ``classes`` as ``--proxy-classes`` selects them."""
    from fedqr.data.proxy_prep import Preparation, prepared_built_in, prepared_like
    from fedqr.data.public import load_proxy, select_proxy_classes

    if classes is not None and not isinstance(classes, str):
        raise ValueError(f"proxy_classes must be a string such as '0-9', '0,1,5' or a .json "
                         f"label map, got {type(classes).__name__}")
    if isinstance(proxy, str | os.PathLike):
        return load_proxy(Path(proxy), classes=classes, client_column="client",
                          label_column="label", seed=seed, name="proxy",
                          like=Preparation.of(deployment))
    source = _source(proxy, seed, name="proxy")
    # a built-in set for a data file is prepared as --proxy-dataset is (per feature for rows)
    like = (Preparation.of(deployment) if isinstance(source, DataSpec)
            and isinstance(deployment, OwnData) else None)
    if classes is None:
        return (prepared_built_in(source, like, seed=seed)
                if like is not None and isinstance(source, DataSpec) else source)
    pool = (source.data if isinstance(source, OwnData)
            else FederatedData.from_client_data(source.build()))
    pool = select_proxy_classes(pool, classes)
    return OwnData(data=pool if like is None else prepared_like(pool, like), seed=seed)


def simulate(
    *, data: FederatedData | DataSpec | DataSource, model: Model | None = None,
    mechanism: Mechanism | str = Mechanism.GAUSSIAN, eps: float | Sequence[float] = DEFAULT_EPS,
    delta: float | Sequence[float] = DEFAULT_DELTA, clip: float | None = None,
    sample_rate: float | None = None, rounds: int | None = None,
    clients_per_round: int | None = None, schedule: PlanResult | None = None,
    lr: float = 0.05, lr_decay: float = 0.01, lr_schedule: LrSchedule = LrSchedule.INVERSE_TIME,
    mu: float | None = None, gamma: float | None = None,
    weight_decay: float = 0.01, accountant: Accountant | str | None = None,
    selection: Selection = Selection.ROUND_ROBIN, aggregation: Aggregation = Aggregation.PAPER,
    repeats: int = 1, seed: int = 0, eval_every: int | None = None, eval_train: str = "end",
    hidden: Sequence[int] | None = None, loss_fn: LossFn | None = None,
    device: str | torch.device = "cpu", on_round: Callable[[int], None] | None = None,
    arithmetic: Arithmetic | str = Arithmetic.FLOAT32,
) -> SimulationResult:
    """Simulate FedSGD-DPC on ``data`` with ``model`` and return the ``result.json`` document.

    Parameters
    ----------
    data:
        The clients' data (:class:`FederatedData`, or a built-in :class:`DataSpec`).
    model:
        See :data:`Model` (default: the data set's paper model; ``linear`` for own data).
    mechanism, eps, delta, clip, sample_rate, accountant:
        Client-side privacy: one budget for all clients or one per client; ``clip`` and
        ``sample_rate`` default to the paper's. ``accountant``: ``"rdp"`` (``None``, the
        default) or ``"pld"`` for the Gaussian mechanism; Laplace is accounted by ``"pure"``
        composition, and another accountant given for it (any for ``none``) is refused.
    rounds, clients_per_round, schedule:
        T and b: required (there is no default T or b) unless ``schedule`` is given, a
        :class:`PlanResult` whose recommended T, b and q are run (then leave ``rounds``,
        ``clients_per_round`` and ``sample_rate`` out).
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
    arithmetic:
        ``"float32"`` (default), ``"mixed"`` (softmax regression's full-batch passes with
        bfloat16 logits and exact integer gradient sums of integer-coded rows, on the CPU:
        :mod:`fedqr.models.logreg_coded`; the same clipping, budgets and noise) or ``"auto"``
        (mixed where the CPU multiplies bfloat16 and int8 natively and the run can use it:
        softmax regression on the CPU with integer-coded rows; float32, without a warning,
        elsewhere).
    """
    mech = parse_enum(Mechanism, "mechanism", mechanism)
    budget = budget_values(mech, eps, delta)
    arith = arithmetic_of(arithmetic)
    if on_round is not None and not callable(on_round):
        raise ValueError(f"on_round must be a callable (rounds done) -> None, got {on_round!r}")
    dev = resolve_device(device)
    if schedule is not None:
        check_schedule(schedule, rounds=rounds, clients_per_round=clients_per_round,
                       sample_rate=sample_rate)
        rounds, clients_per_round = schedule.rounds, schedule.clients_per_round
        sample_rate = schedule.sample_rate
    if rounds is None or clients_per_round is None:
        raise ValueError("give rounds and clients_per_round, or schedule=a PlanResult, got "
                         f"rounds={rounds}, clients_per_round={clients_per_round}")
    hidden = _hidden(model, hidden)
    source = _source(data, seed)
    if schedule is not None:
        same_data(schedule, source)  # before b is checked against this data's N
    work = Workload.of(source, model, hidden=hidden, loss_fn=loss_fn)
    client_data, kernel = work.build(), work.kernel
    if arith is Arithmetic.MIXED and _auto(arithmetic) and why_not_mixed(
            client_data.dataset.x_train, kernel=kernel, device=dev) is not None:
        arith = Arithmetic.FLOAT32  # auto: mixed where it applies, else float32 unsaid
    q = sample_rate if sample_rate is not None else mechanism_for(mech).default_sample_rate
    train_eval, train_eval_rows = parse_train_eval(eval_train)
    config = SimConfig(
        num_clients=source.num_clients, clients_per_round=clients_per_round, rounds=rounds,
        selection=selection, aggregation=aggregation,
        lr=LearningRate(schedule=lr_schedule, eta0=lr, decay=lr_decay, mu=mu, gamma=gamma),
        weight_decay=weight_decay,
        privacy=PrivacyConfig(mechanism=mech, eps=budget[0], delta=budget[1],
                              clip=clip if clip is not None else default_clip(source.dataset,
                                                                              mech),
                              sample_rate=q,
                              accountant=_accountant(mech, accountant)),
        repeats=repeats, seed=seed,
        eval_every=eval_every if eval_every is not None
        else default_eval_every(source.dataset, rounds),
        train_eval=train_eval, train_eval_rows=train_eval_rows, arithmetic=arith)
    if schedule is not None:
        same_scenario(schedule, config, kernel=kernel,
                      planned_default=lambda: Workload.of(source, None, hidden=hidden).kernel)
    started = time.perf_counter()
    result = run_rounds(client_data.dataset, client_data.partition, config, kernel,
                        device=dev, on_round=on_round)
    doc = result.to_json()
    doc["wall_time_s"] = time.perf_counter() - started
    doc["data"] = source.identity()
    name_clients(doc, source.data.client_names if isinstance(source, OwnData) else None)
    doc["provenance"] = provenance(model=model_record(kernel), device=dev)
    if schedule is not None:
        doc["plan"] = {**schedule.document["recommended"],
                       "achieved_test_loss": doc["summary"]["final_test_loss_mean"]}
    if doc.get("diverged"):
        warnings.warn(f"the run diverged (parameters left the floats at round "
                      f"{doc.get('diverged_round')}): its final test metrics are NaN; lower "
                      "lr or clip", RuntimeWarning, stacklevel=2)
    return SimulationResult(document=doc, theta=result.final_theta.reshape(
        config.repeats, *kernel.param_shape))


def _auto(arithmetic: object) -> bool:
    """Whether ``arithmetic`` was given as ``"auto"`` (resolved on the CPU alone)."""
    return isinstance(arithmetic, str) and arithmetic.strip().lower() == "auto"


def _hidden(model: object, hidden: Sequence[int] | None) -> Sequence[int]:
    """The hidden widths of ``mlp`` (default ``(64,)``); refused for any other model, which
    has none to set, rather than ignored."""
    if hidden is None:
        return (64,)
    if model != "mlp":
        name = model if isinstance(model, str | None) else getattr(
            model, "__name__", type(model).__name__)
        raise ValueError(f"hidden sets the widths of model='mlp'; leave it out for model="
                         f"{name!r}, got hidden={hidden!r}")
    return hidden


def _accountant(mechanism: Mechanism, accountant: Accountant | str | None) -> Accountant:
    """The accountant asked for, refused where the mechanism accounts its budgets otherwise;
    ``None``: the mechanism's own (RDP for the Gaussian mechanism, pure composition for
    Laplace, PLD for discrete Laplace; RDP, unused, without a mechanism), so that a run's
    ``config`` records the accountant that accounted it."""
    if accountant is None:
        return mechanism_for(mechanism).accountant(Accountant.RDP) or Accountant.RDP
    asked = parse_enum(Accountant, "accountant", accountant)
    check_accountant_applies(mechanism, asked)
    return asked


def plan(
    *, data: FederatedData | DataSpec | DataSource, model: Model | None = None,
    mechanism: Mechanism | str = Mechanism.GAUSSIAN, eps: float | Sequence[float] = DEFAULT_EPS,
    delta: float | Sequence[float] = DEFAULT_DELTA, clip: float | None = None,
    sample_rate: float | None = _PLAN_SAMPLE_RATE, rounds: int | None = None,
    clients_per_round: int | None = None, lr: float = 0.05, lr_decay: float = 0.01,
    lr_schedule: LrSchedule = LrSchedule.INVERSE_TIME, weight_decay: float = 0.01,
    accountant: Accountant | str | None = None, aggregation: Aggregation = Aggregation.PAPER,
    data_use: DataUse | str = DataUse.CLEAR_PROXY,
    proxy: FederatedData | DataSpec | str | os.PathLike[str] | None = None,
    proxy_classes: str | None = None,
    proxy_share: float | None = None, twin_repeats: int | None = None,
    twin_budget: float | None = None, seed: int = 0,
    hidden: Sequence[int] | None = None, device: str | torch.device = "cpu",
    use_cache: bool = True, progress: Callable[[str, int], None] | None = None,
) -> PlanResult:
    """Plan T, b (and q with ``sample_rate=None``) for ``data`` with the twin.

    ``data_use="clear-proxy"`` (default) reads a share of the clients' data WITHOUT privacy
    (the plan says so); ``"public-proxy"`` trains the twin on ``proxy`` (public data with the
    clients' features and classes: a :class:`FederatedData`, a :class:`DataSpec`, or a file
    read as ``fedqr plan --proxy-data FILE`` reads it, a ``.csv`` or ``.parquet`` without a
    client column included) and reads only the clients' sizes; ``proxy_classes`` keeps and
    relabels the proxy's classes as ``--proxy-classes`` does (``"0-9"``, ``"0,1,5"`` or a
    ``.json`` label map). ``twin_repeats`` and ``twin_budget`` (estimated seconds the twin
    of a model other than softmax regression may simulate; ``None``: the default) are
    ``fedqr plan``'s ``--twin-repeats`` and ``--twin-budget``. The warnings given while
    planning are also kept in ``document["warnings"]``, as ``fedqr plan --json`` keeps them.
    Other parameters as :func:`simulate`.
    """
    mech = parse_enum(Mechanism, "mechanism", mechanism)
    budget = budget_values(mech, eps, delta)
    try:
        use = parse_enum(DataUse, "data_use", data_use)
    except ValueError:  # the API's two (private-pilot is the command line's, refused below)
        raise ValueError(f"data_use must be 'clear-proxy' or 'public-proxy', got "
                         f"data_use={data_use!r}") from None
    if not isinstance(use_cache, bool):
        raise ValueError(f"use_cache must be True or False, got use_cache={use_cache!r}")
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be a callable (label, rounds) -> None, got "
                         f"progress={progress!r}")
    if use is DataUse.PRIVATE_PILOT:
        raise ValueError("data_use='private-pilot' runs pilot rounds charged to the clients' "
                         "ledgers: it is the command line's (`fedqr plan --data-use "
                         "private-pilot --pilot-share S`); the Python API plans with "
                         "'clear-proxy' or 'public-proxy'")
    spec = mechanism_for(mech)
    if spec.batch_rate(0.5) >= 1 and sample_rate not in (None, _PLAN_SAMPLE_RATE):
        spec.check(clip=1.0, sample_rate=sample_rate)  # a rate a full-batch mechanism refuses
    if twin_repeats is not None:
        twin_repeats = check_int_range("twin_repeats", twin_repeats, 2)
    if twin_budget is not None:
        twin_budget = check_positive("twin_budget", twin_budget)
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:  # loading's and planning's
            warnings.simplefilter("always")
            dev = resolve_device(device)
            widths = _hidden(model, hidden)
            source = _source(data, seed)
            scenario = Scenario(
                data=source, mechanism=mech, eps=budget[0], delta=budget[1],
                clip=clip if clip is not None else default_clip(source.dataset, mech),
                sample_rate=sample_rate if mechanism_for(mech).batch_rate(0.5) < 1 else 1.0,
                accountant=_accountant(mech, accountant), rounds=rounds,
                clients_per_round=clients_per_round,
                lr=LearningRate(schedule=lr_schedule, eta0=lr, decay=lr_decay),
                weight_decay=weight_decay, aggregation=aggregation,
                kernel=None if model is None else Workload.of(source, model, hidden=widths).kernel)
            choice = _proxy_choice(use, proxy, proxy_classes, share=proxy_share, seed=seed,
                                   deployment=source)
            settings = SearchSettings(repeats=twin_repeats, seed=seed, time_budget_s=twin_budget)
            result = make_plan(scenario, proxy=choice, settings=settings, device=dev,
                               use_cache=use_cache, progress=progress)
    finally:  # said again, to the caller's filters, in the API's words
        said = _say_again(caught)
    document = plan_document(result, scenario)
    document["warnings"] = said  # as `fedqr plan --json` keeps what loading and planning said
    used = document["recommended"].get("data_used") or {}
    if used.get("reads_private_data"):
        warnings.warn(f"fedqr.plan: {used.get('warning')}; the recommended run still spends "
                      f"exactly each client's budget (data_use='public-proxy' reads none)",
                      PrivateDataWarning, stacklevel=2)
    return PlanResult(plan=result, document=document)


def _proxy_choice(use: DataUse, proxy: FederatedData | DataSpec | str | os.PathLike[str] | None,
                  classes: str | None, *, share: float | None, seed: int,
                  deployment: DataSource) -> ProxyChoice:
    """What the twin trains on: a share of the clients' data, or the public ``proxy``."""
    if use is DataUse.CLEAR_PROXY:
        if proxy is not None or classes is not None:
            raise ValueError(f"{'proxy' if proxy is not None else 'proxy_classes'} needs "
                             f"data_use='public-proxy', got data_use='clear-proxy'")
        return ProxyChoice(use=use, share=share)
    if proxy is None:
        raise ValueError(f"data_use={use.value!r} needs proxy= (public data with the "
                         "clients' features and classes), got none")
    public = _public(proxy, classes, seed + 1, deployment=deployment)
    label = getattr(public.dataset, "value", None) or str(public.identity().get("name") or "own")
    return ProxyChoice(use=DataUse.PUBLIC_PROXY, share=share, public=public,
                       public_label=label if classes is None
                       else f"{label}, classes {classes}")  # as the CLI says


def _say_again(caught: list[warnings.WarningMessage]) -> list[str]:
    """Warn each distinct warning recorded while planning once more, outside the recording
    (so the caller's filters apply), fedqr's own in :func:`plan`'s words; their texts."""
    texts: list[str] = []
    seen: set[tuple[type[Warning], str]] = set()
    for w in caught:
        own = is_own(w)
        text = _api_words(str(w.message)) if own else str(w.message)
        if (w.category, text) in seen:
            continue
        seen.add((w.category, text))
        if own:
            texts.append(text)
        warnings.warn_explicit(text if own else w.message, w.category, w.filename, w.lineno,
                               source=w.source)
    return texts


def _api_words(text: str) -> str:
    """A planner warning in :func:`plan`'s words: its setting ``time_budget_s`` is this
    function's ``twin_budget``, the command line's ``proxy_data`` its ``proxy``."""
    text = text.replace("time_budget_s", "twin_budget")
    return "proxy:" + text[len("proxy_data:"):] if text.startswith("proxy_data:") else text


def plan_document(plan: Plan, scenario: Scenario) -> dict[str, Any]:
    """``fedqr plan --json``: the recommended schedule and every prediction."""
    from fedqr.sim.result import jsonable

    s = scenario
    used = s.spec.accountant(s.accountant)  # Laplace: pure, whatever was asked
    model = (s.kernel.describe() if s.kernel is not None
             else None if s.model is None else {"name": s.model.value})
    return {"recommended": plan.recommended_dict(mechanism=s.mechanism),
            "untrained_test_loss": plan.untrained_loss,
            "label_prior_test_loss": (plan.prior_loss if math.isfinite(plan.prior_loss)
                                      else None),
            "scenario": {"data": s.data.identity(), "mechanism": s.mechanism.value,
                         "eps": list(s.eps),
                         "delta": list(s.delta) if s.spec.needs_delta else None,
                         "clip": s.clip, "accountant": used.value if used else None,
                         "model": model,
                         "model_identity": (model_identity(s.kernel) if s.kernel is not None
                                            else None),
                         "model_parts": (model_parts(s.kernel) if s.kernel is not None
                                         else None),
                         "sample_rate": s.sample_rate if s.poisson else None,
                         "rounds": s.rounds, "clients_per_round": s.clients_per_round,
                         "lr": jsonable(s.lr), "weight_decay": s.weight_decay,
                         "aggregation": s.aggregation.value},
            "simulated_rounds": plan.simulated_rounds, "wall_time_s": plan.wall_time_s,
            "from_cache": plan.from_cache, "simulated": plan.settings.get("simulated"),
            "predictions": [p.as_dict(sampled=s.poisson) for p in plan.predictions
                            if math.isfinite(p.mean)]}

