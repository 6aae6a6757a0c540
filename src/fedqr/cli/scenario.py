"""The scenario options shared by ``fedqr run`` and ``fedqr plan``, and the planner's CLI."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedqr._cli_checks import (
    check_alpha_applies,
    check_budget_applies,
    check_hidden_applies,
    check_left_out,
    check_theory_options_apply,
)
from fedqr._validate import MAX_REPEATS
from fedqr.cli._common import floats, progress, show_warnings
from fedqr.cli.data_options import (
    check_own_data_options,
    data_warnings,
    load_own,
    parse_hidden,
)
from fedqr.data import DatasetName, DataSpec, PartitionKind
from fedqr.data.presets import PRESETS, default_partition
from fedqr.data.public import ProxyColumnsWarning
from fedqr.data.source import DataSource, OwnData
from fedqr.models.factory import ModelName
from fedqr.models.kernel import Kernel
from fedqr.models.workload import Workload
from fedqr.planner import DataUse, Plan, ProxyChoice, Scenario, SearchSettings, make_plan
from fedqr.privacy import Accountant, Mechanism, mechanism_for
from fedqr.sim.config import Aggregation, LearningRate, LrSchedule


def scenario_from_options(
    *, dataset: DatasetName = DatasetName.MNIST, partition: PartitionKind | None = None,
    alpha: float = 0.5, fraction: float = 1.0, num_clients: int, mechanism: Mechanism,
    eps: str, delta: str, clip: float | None,
    sample_rate: float | None, accountant: Accountant, lr: float, lr_decay: float,
    lr_schedule: LrSchedule, weight_decay: float, aggregation: Aggregation, seed: int,
    data_dir: Path | None = None, rounds: int | None, clients_per_round: int | None,
    model: ModelName | None = None, source: DataSource | None = None,
    kernel: Kernel | None = None,
) -> Scenario:
    """The :class:`~fedqr.planner.Scenario` of ``fedqr run``/``fedqr plan`` options
    (``source``: a user's data instead of the built-in recipe)."""
    from fedqr.data.presets import default_clip

    if lr_schedule is LrSchedule.THEORY:
        raise ValueError("lr_schedule must be inverse-time or constant for planning, "
                         "got lr_schedule='theory'")
    check_theory_options_apply(lr_schedule, lr_decay=lr_decay)
    if data_dir is not None and not data_dir.is_dir():
        raise ValueError(f"data_dir must be an existing folder, got data_dir={str(data_dir)!r}")
    spec: DataSource = source if source is not None else DataSpec(
        dataset=dataset, fraction=fraction, partition=partition, alpha=alpha,
        num_clients=num_clients, seed=seed, data_dir=data_dir)
    return Scenario(
        data=spec, mechanism=mechanism, eps=floats("eps", eps), delta=floats("delta", delta),
        clip=clip if clip is not None else default_clip(spec.dataset, mechanism),
        sample_rate=sample_rate if mechanism_for(mechanism).batch_rate(0.5) < 1 else 1.0,
        accountant=accountant, rounds=rounds, clients_per_round=clients_per_round,
        lr=LearningRate(schedule=lr_schedule, eta0=lr, decay=lr_decay),
        weight_decay=weight_decay, aggregation=aggregation, model=model, kernel=kernel)


def proxy_choice(*, data_use: DataUse, proxy_share: float | None,
                 proxy_dataset: DatasetName | None, scenario: Scenario,
                 pilot_share: float | None, proxy_data: Path | DataSource | None = None,
                 proxy_classes: str | None = None, client_column: str = "client",
                 label_column: str = "label") -> ProxyChoice:
    """The twin's data from the CLI options (checked before any work).

    ``proxy_data``: a public data file (or its source, already loaded); ``proxy_classes``
    selects or maps its classes (or those of ``proxy_dataset``). The proxy must fit the
    scenario's model (its features and classes): a clear error naming the option otherwise.
    """
    if pilot_share is not None and data_use is not DataUse.PRIVATE_PILOT:
        raise ValueError("pilot_share needs --data-use private-pilot, got "
                         f"data_use={data_use.value}")
    if data_use is DataUse.PRIVATE_PILOT:
        if pilot_share is None:
            raise ValueError("pilot_share is required with --data-use private-pilot: the share "
                             "of every client's budget the pilot spends, in (0, 1), got none")
        if not 0 < pilot_share < 1:
            raise ValueError(f"pilot_share must be in (0, 1) for private-pilot, "
                             f"got pilot_share={pilot_share}")
    if proxy_data is not None and proxy_dataset is not None:
        raise ValueError("give --proxy-data FILE or --proxy-dataset NAME, not both")
    if data_use is DataUse.CLEAR_PROXY:
        for name, given in (("proxy_data", proxy_data), ("proxy_dataset", proxy_dataset),
                            ("proxy_classes", proxy_classes)):
            if given is not None:
                raise ValueError(f"{name} needs --data-use public-proxy or private-pilot, "
                                 "got data_use=clear-proxy")
        return ProxyChoice(use=data_use, share=proxy_share)
    if proxy_data is None and proxy_dataset is None:
        raise ValueError(f"data use {data_use.value} needs --proxy-dataset NAME or --proxy-data "
                         "FILE (public data with the deployment's features), got none")
    public, label, option = _public_source(
        proxy_data=proxy_data, proxy_dataset=proxy_dataset, proxy_classes=proxy_classes,
        scenario=scenario, client_column=client_column, label_column=label_column)
    _check_proxy_fits(public, scenario, option=option, classes=proxy_classes)
    return ProxyChoice(use=DataUse.PUBLIC_PROXY, share=proxy_share, public=public,
                       public_label=label)


def _public_source(*, proxy_data: Path | DataSource | None, proxy_dataset: DatasetName | None,
                   proxy_classes: str | None, scenario: Scenario, client_column: str,
                   label_column: str) -> tuple[DataSource, str, str]:
    """The public data as a source, its label in the plan, and the option that named it."""
    from fedqr.data import FederatedData
    from fedqr.data.proxy_prep import Preparation, prepared_like
    from fedqr.data.public import load_proxy, select_proxy_classes

    suffix = "" if proxy_classes is None else f", classes {proxy_classes}"
    seed = scenario.data.seed + 1
    d = scenario.data  # a data file's rows are standardised unless --no-standardize

    def like() -> Preparation:  # a built-in deployment's shape is known once it is built
        return Preparation.of(d)

    if isinstance(proxy_data, Path):
        with data_warnings(proxy_data):
            src = load_proxy(proxy_data, classes=proxy_classes, client_column=client_column,
                             label_column=label_column, seed=seed, like=like())
        return src, f"{src.data.name}{suffix}", "proxy_data"
    if proxy_data is not None:
        if proxy_classes is not None and isinstance(proxy_data, OwnData):
            with data_warnings(proxy_data.data.name):
                proxy_data = OwnData(data=select_proxy_classes(proxy_data.data, proxy_classes),
                                     seed=proxy_data.seed)
        name = proxy_data.data.name if isinstance(proxy_data, OwnData) else "file"
        return proxy_data, f"{name}{suffix}", "proxy_data"
    assert proxy_dataset is not None  # checked by proxy_choice
    if isinstance(d, DataSpec) and proxy_classes is None:  # split by the deployment's recipe
        by_writer = PartitionKind.BY_WRITER  # only a data set with writers splits by writer
        return DataSpec(dataset=proxy_dataset, partition=d.partition_kind
                        if d.partition_kind is not by_writer
                        or default_partition(proxy_dataset) is by_writer else PartitionKind.IID,
                        alpha=d.alpha, num_clients=d.num_clients, seed=seed,
                        data_dir=d.data_dir), proxy_dataset.value, "proxy_dataset"
    pool = FederatedData.from_client_data(DataSpec(
        dataset=proxy_dataset, partition=PartitionKind.IID, num_clients=1, seed=seed,
        data_dir=d.data_dir if isinstance(d, DataSpec) else None).build())
    with data_warnings(proxy_dataset.value):
        if proxy_classes is not None:
            pool = select_proxy_classes(pool, proxy_classes)
        if isinstance(d, OwnData):  # a built-in deployment is standardised as the pool is
            pool = prepared_like(pool, like())  # as the file's rows: per feature or channel
    return OwnData(data=pool, seed=seed), f"{proxy_dataset.value}{suffix}", "proxy_dataset"


def _check_proxy_fits(public: DataSource, scenario: Scenario, *, option: str,
                      classes: str | None) -> None:
    """The proxy must have the features and classes of the scenario's model."""
    from fedqr.planner.public import check_fits, kernel_io

    io = kernel_io(scenario.kernel)
    if io is None:
        return  # checked by the planner against the clients' data
    if isinstance(public, OwnData):
        features, k = public.data.num_features, public.data.num_classes
    else:
        preset = PRESETS[public.dataset]
        features, k = preset.num_features, preset.num_classes
    try:
        check_fits(_Shape(num_features=features, num_classes=k), features=io[0],
                   classes=io[1], option=option)
    except ValueError as e:
        if classes is not None and features == io[0]:
            raise ValueError(f"proxy_classes={classes!r} gives the proxy {k} classes, the "
                             f"model has {io[1]}: {e}") from None
        raise


@dataclass(frozen=True)
class _Shape:
    num_features: int
    num_classes: int


def run_planner(scenario: Scenario, choice: ProxyChoice, *, twin_repeats: int | None,
                device: torch.device, use_cache: bool, pilot_share: float | None,
                twin_budget: float | None = None) -> Plan:
    """Plan with a progress bar; a private pilot plans for the budget left after it."""
    if twin_repeats is not None and not 2 <= twin_repeats <= MAX_REPEATS:
        raise ValueError(f"twin_repeats must be in [2, {MAX_REPEATS}], got "
                         f"twin_repeats={twin_repeats}")
    if twin_budget is not None and not 0 < twin_budget < float("inf"):
        raise ValueError(f"twin_budget must be > 0 seconds and finite, got "
                         f"twin_budget={twin_budget}")
    settings = SearchSettings(repeats=twin_repeats, seed=scenario.data.seed,
                              time_budget_s=twin_budget)
    with progress("planning") as bar, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ProxyColumnsWarning)  # every plan says it
        task = bar.add_task("twin", total=None)

        def tick(label: str, rounds: int) -> None:
            bar.update(task, description=label, completed=rounds)

        if pilot_share is None:
            plan = make_plan(scenario, proxy=choice, settings=settings, device=device,
                             use_cache=use_cache, progress=tick)
        else:
            from fedqr.planner.pilot import plan_with_pilot

            plan = plan_with_pilot(scenario, proxy=choice, settings=settings, device=device,
                                   use_cache=use_cache, progress=tick, pilot_share=pilot_share)
    # after the progress bar (on an error, only the error is shown); the planner's setting
    # named as the option that gave it
    show_warnings(caught, rewrite=lambda text: text.replace("time_budget_s", "twin_budget"))
    return plan


def plan_document(plan: Plan, scenario: Scenario) -> dict[str, Any]:
    """``fedqr plan --json``: the recommended schedule and every prediction, through JSON (a
    fresh plan is shown, by ``plan`` and ``run``, from exactly what a cached one is)."""
    import json

    from fedqr.api import plan_document as document

    doc: dict[str, Any] = json.loads(json.dumps(document(plan, scenario)))
    return doc


def workload(*, dataset: DatasetName | None, partition: PartitionKind | None, alpha: float,
              fraction: float, num_clients: int | None, seed: int, data_dir: Path | None,
              data: Path | None, test_data: Path | None, test_share: float | None,
              client_column: str, label_column: str, standardize: bool, model: str | None,
              hidden: str) -> Workload:
    """The run's workload: its data (a built-in recipe, default MNIST, or ``--data``) and
    model kernel; a built-in recipe's options given with ``--data`` are refused."""

    if data is None:
        for name, given in (("test_data", test_data), ("test_share", test_share)):
            if given is not None:
                raise ValueError(f"{name} needs --data FILE, got {name}={given}")
        check_alpha_applies((partition or default_partition(dataset or DatasetName.MNIST)).value,
                            alpha)
        check_left_out(("client_column", "label_column", "standardize"),
                       why="is an option of --data FILE (its columns and scaling), not of the "
                           "built-in data sets")
        source: DataSource = DataSpec(
            dataset=dataset or DatasetName.MNIST, fraction=fraction, partition=partition,
            alpha=alpha,
            num_clients=10 if num_clients is None else num_clients, seed=seed,
            data_dir=data_dir)
    else:
        check_own_data_options(dataset=dataset, partition=partition, fraction=fraction,
                                data_dir=data_dir, client_column=client_column,
                                label_column=label_column)
        check_alpha_applies(None, alpha)
        for name, path in (("data", data), ("test_data", test_data)):
            if path is not None and not path.is_file():
                what = "a folder, not a file" if path.is_dir() else "no such file"
                raise ValueError(f"{name} must be an existing .npz, .csv or .parquet file, "
                                 f"got {name}={str(path)!r} ({what})")
        source = load_own(data, test_data=test_data, test_share=test_share,
                          client_column=client_column, label_column=label_column,
                          standardize=standardize, seed=seed)
        if num_clients is not None and num_clients != source.num_clients:
            raise ValueError(f"num_clients must match the clients of --data "
                             f"({source.num_clients}), got num_clients={num_clients}")
    with warnings.catch_warnings(record=True) as caught:
        work = Workload.of(source, model, hidden=parse_hidden(hidden))
    show_warnings(caught)  # what loading the data and the model said
    # a model file (FILE.py:NAME) is named as given: its factory may be called mlp
    check_hidden_applies(model if model is not None and ":" in model else work.kernel.name,
                         hidden)
    return work


def check_full_batch_rate(mechanism: Mechanism, sample_rate: str | None) -> None:
    """A sampling rate given for a mechanism that reads every row is refused, as ``fedqr
    run`` refuses it (the plan would be made for a run that cannot happen)."""
    spec = mechanism_for(mechanism)
    if sample_rate is None or spec.batch_rate(0.5) < 1:
        return
    if sample_rate.strip().lower() == "auto":
        raise ValueError(f"sample_rate 'auto' plans the Poisson rate of a sampled mechanism; "
                         f"{mechanism.value} reads every row of a client (q = 1): leave "
                         "--sample-rate out")
    from fedqr._validate import rate_or_auto

    spec.check(clip=1.0, sample_rate=rate_or_auto(sample_rate, default=1.0) or 1.0)


def twin_plan(o: dict[str, Any]) -> tuple[Plan, Scenario]:
    """``fedqr plan --method twin``: the plan and its scenario (``o``: the options of
    :func:`fedqr.cli.plan.plan`); ``ValueError`` on bad input, before any work."""
    from fedqr._validate import MAX_ROUNDS, int_or_auto, rate_or_auto
    from fedqr.cli._common import FIGURE_SUFFIXES, check_out_file
    from fedqr.cli._common import device as _device

    if o["constants"] is not None:
        raise ValueError("constants is for --method bound|paper, got method=twin")
    check_budget_applies(o["mechanism"], eps=o["eps"], delta=o["delta"])
    check_out_file("plot", o["plot"], suffixes=FIGURE_SUFFIXES)
    work = workload(
        dataset=o["dataset"], partition=o["partition"],
        alpha=o["alpha"], fraction=o["fraction"], num_clients=o["num_clients"],
        seed=o["seed"], data_dir=o["data_dir"], data=o["data"], test_data=o["test_data"],
        test_share=o["test_share"], client_column=o["client_column"],
        label_column=o["label_column"], standardize=o["standardize"], model=o["model"],
        hidden=o["hidden"])
    source, kernel = work.data, work.kernel
    check_full_batch_rate(o["mechanism"], o["sample_rate"])
    scenario = scenario_from_options(
        num_clients=source.num_clients, mechanism=o["mechanism"], eps=o["eps"],
        delta=o["delta"], clip=o["clip"],
        sample_rate=rate_or_auto(o["sample_rate"], default=0.01),
        accountant=o["accountant"], lr=o["lr"], lr_decay=o["lr_decay"],
        lr_schedule=o["lr_schedule"], weight_decay=o["weight_decay"],
        aggregation=o["aggregation"], seed=o["seed"], source=source, kernel=kernel,
        rounds=int_or_auto("rounds", o["rounds"], low=1, high=MAX_ROUNDS),
        clients_per_round=int_or_auto("clients_per_round", o["clients_per_round"], low=1))
    choice = proxy_choice(data_use=o["data_use"], proxy_share=o["proxy_share"],
                          proxy_dataset=o["proxy_dataset"], scenario=scenario,
                          pilot_share=o["pilot_share"], proxy_data=o["proxy_data"],
                          proxy_classes=o["proxy_classes"], client_column=o["client_column"],
                          label_column=o["label_column"])
    result = run_planner(scenario, choice, twin_repeats=o["twin_repeats"],
                         device=_device(o["device"]), use_cache=o["cache"],
                         pilot_share=o["pilot_share"], twin_budget=o["twin_budget"])
    return result, scenario
