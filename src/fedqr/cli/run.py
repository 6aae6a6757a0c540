"""``fedqr run``: simulate FedSGD-DPC and write result.json and a plot."""

# Fast --help (0.5 s, bench/cli_startup.py): only light modules at the top (the command
# imports torch, dp-accounting and flwr when it runs), and no
# "from __future__ import annotations" (typer reads the options from the annotations).
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedqr._enums import (
    Accountant,
    Aggregation,
    DatasetName,
    DataUse,
    LrSchedule,
    Mechanism,
    Selection,
)
from fedqr._options import (
    AggregationOpt,
    AlphaOpt,
    DataDirOpt,
    DeviceOpt,
    LrDecayOpt,
    LrOpt,
    MechanismOpt,
    NumClientsOpt,
)
from fedqr._validate import MAX_ROUNDS, check_positive, int_or_auto, rate_or_auto
from fedqr.cli._common import (
    check_out_dir,
    err,
    fail,
    fail_on,
    floats,
    mechanism_for,
    out,
    progress,
    show_warnings,
)
from fedqr.cli._common import device as _device
from fedqr.cli.data_options import (
    ClientColumnOpt,
    DataFileOpt,
    HiddenOpt,
    LabelColumnOpt,
    ModelOpt,
    ProxyClassesOpt,
    ProxyDataOpt,
    ProxyShareOpt,
    StandardizeOpt,
    TestDataOpt,
    TestShareOpt,
    TwinBudgetOpt,
    TwinRepeatsOpt,
)
from fedqr.cli.run_options import (
    AccountantOpt,
    ArithmeticOpt,
    ClientsPerRoundOpt,
    ClipOpt,
    DatasetOpt,
    DataUseOpt,
    DeltaOpt,
    EpsOpt,
    EvalEveryOpt,
    EvalTrainOpt,
    FractionOpt,
    GammaOpt,
    LrScheduleOpt,
    MuOpt,
    OutDirOpt,
    PartitionOpt,
    PilotShareOpt,
    PlanCacheOpt,
    ProxyDatasetOpt,
    RepeatsOpt,
    RoundsOpt,
    SampleRateOpt,
    SeedOpt,
    SelectionOpt,
    WeightDecayOpt,
)

if TYPE_CHECKING:
    from fedqr.api_results import SimulationResult
    from fedqr.data.source import DataSource
    from fedqr.models.kernel import Kernel


def run(
    dataset: DatasetOpt = None,
    partition: PartitionOpt = None,
    alpha: AlphaOpt = 0.5,
    fraction: FractionOpt = 1.0,
    num_clients: NumClientsOpt = None,
    data: DataFileOpt = None,
    test_data: TestDataOpt = None,
    test_share: TestShareOpt = None,
    client_column: ClientColumnOpt = "client",
    label_column: LabelColumnOpt = "label",
    standardize: StandardizeOpt = True,
    model: ModelOpt = None,
    hidden: HiddenOpt = "64",
    clients_per_round: ClientsPerRoundOpt = None,
    rounds: RoundsOpt = "100",
    mechanism: MechanismOpt = Mechanism.GAUSSIAN,
    eps: EpsOpt = "1.0",
    delta: DeltaOpt = "1e-5",
    clip: ClipOpt = None,
    sample_rate: SampleRateOpt = None,
    accountant: AccountantOpt = Accountant.RDP,
    lr: LrOpt = 0.05,
    lr_decay: LrDecayOpt = 0.01,
    lr_schedule: LrScheduleOpt = LrSchedule.INVERSE_TIME,
    mu: MuOpt = None,
    gamma: GammaOpt = None,
    weight_decay: WeightDecayOpt = 0.01,
    selection: SelectionOpt = Selection.ROUND_ROBIN,
    aggregation: AggregationOpt = Aggregation.PAPER,
    repeats: RepeatsOpt = 1,
    seed: SeedOpt = 0,
    eval_every: EvalEveryOpt = None,
    eval_train: EvalTrainOpt = "end",
    arithmetic: ArithmeticOpt = "float32",
    out_dir: OutDirOpt = Path("runs/latest"),
    device: DeviceOpt = "auto",
    data_dir: DataDirOpt = None,
    data_use: DataUseOpt = DataUse.CLEAR_PROXY,
    proxy_dataset: ProxyDatasetOpt = None,
    proxy_data: ProxyDataOpt = None,
    proxy_classes: ProxyClassesOpt = None,
    pilot_share: PilotShareOpt = None,
    proxy_share: ProxyShareOpt = None,
    twin_repeats: TwinRepeatsOpt = None,
    twin_budget: TwinBudgetOpt = None,
    cache: PlanCacheOpt = True,
) -> None:
    """Simulate FedSGD-DPC and write result.json and a loss/accuracy plot."""
    from fedqr._cli_checks import (
        check_accountant_applies,
        check_budget_applies,
        check_theory_options_apply,
        given,
    )
    from fedqr._precision import arithmetic_of
    from fedqr.cli.scenario import check_full_batch_rate, workload
    from fedqr.data import DataNotFoundError
    from fedqr.data.presets import default_clients_per_round
    from fedqr.sim.config import LearningRate, parse_train_eval

    plan_doc: dict[str, object] | None = None
    try:
        from fedqr.cli.run_view import RUN_FILES

        check_out_dir("out_dir", out_dir, files=RUN_FILES)
        parse_train_eval(eval_train)  # checked before any work
        arith = arithmetic_of(arithmetic)
        arith_auto = arithmetic.strip().lower() == "auto"  # resolved by the run's model too
        # the options' own checks before the data is read (its warnings would come first)
        check_full_batch_rate(mechanism, sample_rate)
        check_accountant_applies(mechanism, accountant)
        check_budget_applies(mechanism, eps=eps, delta=delta)
        check_theory_options_apply(lr_schedule, mu=mu, gamma=gamma, lr_decay=lr_decay)
        LearningRate(eta0=lr, decay=lr_decay)
        eps_v, delta_v = floats("eps", eps), floats("delta", delta)
        if mechanism_for(mechanism).private:
            for value in eps_v:
                check_positive("eps", value)
        rounds_v = int_or_auto("rounds", rounds, low=0, high=MAX_ROUNDS)
        b_v = (int_or_auto("clients_per_round", clients_per_round, low=1)
               if clients_per_round is not None else None)
        rate_v = rate_or_auto(sample_rate, default=mechanism_for(mechanism).default_sample_rate)
        work = workload(
            dataset=dataset, partition=partition, alpha=alpha, fraction=fraction,
            num_clients=num_clients, seed=seed, data_dir=data_dir, data=data,
            test_data=test_data, test_share=test_share, client_column=client_column,
            label_column=label_column, standardize=standardize, model=model, hidden=hidden)
        source, kernel = work.data, work.kernel
        settings: dict[str, Any] = dict(
            mechanism=mechanism, eps=eps_v, delta=delta_v, clip=clip, accountant=accountant,
            rounds=rounds_v,
            clients_per_round=b_v if clients_per_round is not None
            else default_clients_per_round(source.num_clients),
            sample_rate=rate_v,
            lr=lr, lr_decay=lr_decay, lr_schedule=lr_schedule, mu=mu, gamma=gamma,
            weight_decay=weight_decay, selection=selection, aggregation=aggregation,
            repeats=repeats, seed=seed, eval_every=eval_every, eval_train=eval_train,
            device=_device(device), arithmetic="auto" if arith_auto else arith)
        planning: dict[str, Any] = dict(
            data_use=data_use, proxy_dataset=proxy_dataset, proxy_data=proxy_data,
            proxy_classes=proxy_classes, pilot_share=pilot_share, proxy_share=proxy_share,
            twin_repeats=twin_repeats, twin_budget=twin_budget)
        if None in (settings["rounds"], settings["clients_per_round"], settings["sample_rate"]):
            plan_doc = _planned(source, kernel, settings, eps=eps, delta=delta, cache=cache,
                                client_column=client_column, label_column=label_column,
                                **planning)
        else:
            _nothing_to_plan({**planning, **({"cache": cache} if given("cache") else {})})
    except (OSError, DataNotFoundError) as e:  # data found nowhere (2) or unreadable (1)
        raise fail_on(e) from None
    except ValueError as e:
        raise fail(str(e)) from None
    _warn_unprivate(mechanism, standardized_file=data is not None and standardize)
    if arithmetic.strip().lower() == "mixed":  # asked for by name, not by auto
        _warn_mixed_unused(mechanism, settings["sample_rate"])
    result = _simulate(source, kernel, settings)
    from fedqr.cli.run_view import write_run

    try:
        write_run(result, plan_doc=plan_doc, out_dir=out_dir)
    except ValueError as e:  # an output name taken since the check: nothing was moved in
        raise fail(str(e)) from None


def _warn_unprivate(mechanism: Mechanism, *, standardized_file: bool) -> None:
    """Say what of the run reads the clients' data without privacy (stderr)."""
    if not mechanism_for(mechanism).private:
        err.print("[yellow]warning:[/] --mechanism none adds no noise and spends no budget: "
                  "the replies are the clients' clipped gradients as they are (a baseline "
                  "without privacy)")
    if standardized_file:
        err.print("[yellow]warning:[/] --data is standardised with the mean and std of all "
                  "clients' training rows, computed WITHOUT differential privacy (result.json "
                  "records them; a deployment standardises with public or agreed statistics): "
                  "--no-standardize uses the values as given")


def _warn_mixed_unused(mechanism: Mechanism, sample_rate: object) -> None:
    """Say that ``--arithmetic mixed`` leaves a run of Poisson batches with float32 products
    (it is for full-batch passes; the coded rows' norms still clip; result.json records what
    was asked)."""
    if isinstance(sample_rate, float) and mechanism_for(mechanism).batch_rate(sample_rate) < 1:
        err.print(f"[yellow]warning:[/] --arithmetic mixed is for full-batch passes "
                  f"(laplace, or --sample-rate 1): this run's Poisson batches (q = "
                  f"{sample_rate:g}) take float32 products (clipped by the coded rows' "
                  f"norms, which differ from float32's by their rounding bound)")


def _nothing_to_plan(planning: dict[str, Any]) -> None:
    """Refuse the planner's options when T, b and q are all given (they would be ignored)."""
    given = [("--" if v else "--no-") + k.replace("_", "-") if isinstance(v, bool)  # a flag
             else f"{k}={v.value if isinstance(v, DataUse) else v}" for k, v in planning.items()
             if v is not None and v is not DataUse.CLEAR_PROXY]
    if given:
        raise ValueError(f"{', '.join(given)}: options of the planner, which plans only what "
                         f"is auto (--rounds auto, --clients-per-round auto, --sample-rate "
                         f"auto); here T, b and q are all given (leave them out)")


def _planned(source: "DataSource", kernel: "Kernel", settings: dict[str, Any], *, eps: str,
             delta: str, data_use: DataUse, proxy_dataset: DatasetName | None,
             proxy_data: Path | None, proxy_classes: str | None, pilot_share: float | None,
             proxy_share: float | None, twin_repeats: int | None, twin_budget: float | None,
             client_column: str, label_column: str, cache: bool) -> dict[str, object]:
    """Fill T, b and q of ``settings`` from the twin planner (and the budgets a private pilot
    left for the run); the plan's document."""
    from fedqr.cli.plan_view import plan_view
    from fedqr.cli.run_view import pilot_spent
    from fedqr.cli.scenario import plan_document, proxy_choice, run_planner, scenario_from_options
    from fedqr.planner import PlanNotUseful

    s, mechanism = settings, settings["mechanism"]
    if s["selection"] is not Selection.ROUND_ROBIN:  # the twin's reply counts are round robin
        raise ValueError(f"selection must be round-robin where the planner chooses (--rounds, "
                         f"--clients-per-round or --sample-rate auto): it plans round-robin "
                         f"replies; plan, then run T, b and q with --selection "
                         f"{s['selection'].value}, got selection={s['selection'].value}")
    scenario = scenario_from_options(
        num_clients=source.num_clients, mechanism=mechanism, eps=eps, delta=delta,
        clip=s["clip"], sample_rate=s["sample_rate"], accountant=s["accountant"], lr=s["lr"],
        lr_decay=s["lr_decay"], lr_schedule=s["lr_schedule"], weight_decay=s["weight_decay"],
        aggregation=s["aggregation"], seed=s["seed"], rounds=s["rounds"],
        clients_per_round=s["clients_per_round"], source=source, kernel=kernel)
    choice = proxy_choice(data_use=data_use, proxy_share=proxy_share, proxy_dataset=proxy_dataset,
                          scenario=scenario, pilot_share=pilot_share, proxy_data=proxy_data,
                          proxy_classes=proxy_classes, client_column=client_column,
                          label_column=label_column)
    the_plan = run_planner(scenario, choice, twin_repeats=twin_repeats, device=s["device"],
                           use_cache=cache, pilot_share=pilot_share, twin_budget=twin_budget)
    for warning in plan_view(plan_document(the_plan, scenario)).warnings:
        err.print(warning)  # as fedqr plan shows them: reading the clients' data WITHOUT DP
    spent = pilot_spent(the_plan.privacy_cost)
    try:
        the_plan.check_useful()
    except PlanNotUseful as e:
        raise fail(f"{e}; nothing was run" + (f" ({spent})" if spent else ""), code=1) from None
    if spent:
        out.print(spent)
    rec = the_plan.recommended
    s.update(rounds=rec.rounds, clients_per_round=rec.clients_per_round,
             sample_rate=rec.sample_rate)
    left = the_plan.privacy_cost.get("budget_left_for_run")
    if isinstance(left, dict):  # a private pilot spent part of the budget
        s["eps"] = tuple(float(e) for e in left["eps"])
        if mechanism_for(mechanism).needs_delta:
            s["delta"] = tuple(float(d) for d in left["delta"])
    sampled = mechanism_for(mechanism).batch_rate(0.5) < 1
    out.print(f"plan: T={rec.rounds}, b={rec.clients_per_round}"
              + (f", q={rec.sample_rate:g}" if sampled else "") + f" ({the_plan.message})")
    return the_plan.recommended_dict(mechanism=mechanism)


def _simulate(source: "DataSource", kernel: "Kernel", settings: dict[str, Any]
              ) -> "SimulationResult":
    """Run :func:`fedqr.simulate` with a progress bar; its result."""
    import warnings

    from fedqr._cli_checks import given
    from fedqr.api import simulate
    from fedqr.privacy import PrivacyBudgetExceeded

    # the option's default is the API's: None (the mechanism's own accountant)
    settings = {**settings, "accountant": settings["accountant"] if given("accountant") else None}

    label = (f"{settings['mechanism'].value} b={settings['clients_per_round']} "
             f"x{settings['repeats']}")
    with progress("FedSGD-DPC") as bar, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        task = bar.add_task(label, total=settings["rounds"])
        try:
            result = simulate(data=source, model=kernel, **settings,
                              on_round=lambda t: bar.update(task, completed=t))
        except PrivacyBudgetExceeded as e:
            raise fail(str(e), code=1) from None
        except ValueError as e:
            raise fail(str(e)) from None
    # after the progress bar; a diverged run is said in the command's own words
    # (warn_diverged), once
    show_warnings([w for w in caught if not str(w.message).startswith("the run diverged")],
                  rewrite=lambda text: text.replace("arithmetic='mixed'", "--arithmetic mixed"))
    return result
