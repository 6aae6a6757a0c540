"""``fedqr plan``: the optimal (T, b) (``fedqr estimate`` is in :mod:`fedqr.cli.estimate`)."""

# Fast --help (0.5 s, bench/cli_startup.py): only light modules at the top (the commands
# import torch, dp-accounting and flwr when they run), and no
# "from __future__ import annotations" (typer reads the options from the annotations at
# every start; strings would cost ~1,000 compiles and evals, a tenth of the budget).
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from fedqr._cli_checks import check_accountant_applies, check_left_out
from fedqr._enums import (
    Accountant,
    Aggregation,
    DatasetName,
    DataUse,
    LrSchedule,
    Mechanism,
    Method,
    Rounding,
)
from fedqr._options import (
    AggregationOpt,
    DeviceOpt,
    LrDecayOpt,
    LrOpt,
    NumClientsOpt,
)
from fedqr.cli._common import (
    fail,
    fail_on,
    out,
    recorded_warnings,
    write_file_atomic,
)
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
from fedqr.cli.estimate import (
    AlphaOpt,
    ClipOpt,
    DataDirOpt,
    PartitionOpt,
    PlanSeedOpt,
    ProxyOpt,
    WdOpt,
)
from fedqr.cli.plan_bound import plan_bound
from fedqr.cli.run_options import AccountantOpt


def _extra_eps(text: str) -> float:
    if text.startswith("--"):
        raise ValueError(f"no such option: {text}")
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"unexpected argument {text!r}: only further --eps values may follow "
                         "--eps (e.g. --eps 1 5 10)") from None


_EpsOpt = Annotated[str, typer.Option(
        help="Budget per client: one value or N comma-separated, in the sorted order of the "
             "client ids (twin); --method bound also plans several budgets: --eps 1 5 10.")]
_MethodOpt = Annotated[Method | None, typer.Option(
        help="twin (default): simulate every schedule on a proxy with the deployment's exact "
             "noise; bound: minimise the paper's bound U(T, b); paper: the bound with the "
             "authors' rounding. Default: twin, or bound with --constants.")]
_DatasetOpt = Annotated[DatasetName | None, typer.Option(
        help="Data set of the deployment (default mnist).")]
_FractionOpt = Annotated[float, typer.Option(help="Share of the training set used.")]
_DeltaOpt = Annotated[str, typer.Option(
    help="Delta per client (gaussian, discrete-laplace): one or N values.")]
_SampleRateOpt = Annotated[str | None, typer.Option(
        help="q (gaussian, default 0.01), or 'auto': the planner chooses q too.")]
_LrScheduleOpt = Annotated[LrSchedule, typer.Option(
    help="inverse-time or constant (theory is fedqr run's: it is not planned).")]
_RoundsOpt = Annotated[str | None, typer.Option(help="Fix T (default: auto, planned).")]
_ClientsPerRoundOpt = Annotated[str | None, typer.Option(
        help="Fix b (default: auto, planned).")]
_DataUseOpt = Annotated[DataUse, typer.Option(
        help="clear-proxy: a share of the clients' data read WITHOUT privacy (simulation "
             "only); public-proxy: --proxy-dataset, no cost; private-pilot: public proxy plus "
             "a pilot run charged to the clients' budgets (--pilot-share).")]
_ProxyDatasetOpt = Annotated[DatasetName | None, typer.Option(
        help="Public proxy data set (public-proxy, private-pilot).")]
_PilotShareOpt = Annotated[float | None, typer.Option(
        help="private-pilot: share of each budget the pilot spends, in (0, 1).")]
_PlanCacheOpt = Annotated[bool, typer.Option(
    "--cache/--no-cache",
    help="Reuse a stored answer, the twin's cached simulations and a cached estimate for "
         "the same inputs (--no-cache plans from scratch).")]
_AsJsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
_PlotOpt = Annotated[Path | None, typer.Option(
        help="Write the predicted loss over (T, b) (twin) or U (bound) as a PNG here.")]
_ConstantsOpt = Annotated[Path | None, typer.Option(
        help="Constants JSON for --method bound|paper (see estimate).")]
_RoundingOpt = Annotated[Rounding, typer.Option(
        help="bound: best neighbouring integer; paper: floor T*, ceil b*.")]
_TMaxOpt = Annotated[int, typer.Option("--t-max", help="bound, gaussian: largest T searched.")]


_MechanismOpt = Annotated[Mechanism, typer.Option(
    help="Client-side DP mechanism (with --constants: the one they were estimated for).")]
_TWIN_ONLY = ("model", "hidden", "test_data", "test_share", "client_column", "label_column",
              "standardize", "fraction", "lr", "lr_decay", "lr_schedule", "aggregation",
              "rounds", "clients_per_round", "data_use", "proxy_share", "proxy_dataset",
              "proxy_data", "proxy_classes", "pilot_share", "twin_repeats", "twin_budget",
              "device")
"""Options the bound does not read (``--method bound|paper``): refused rather than ignored."""
_ESTIMATE_ONLY = ("partition", "alpha", "num_clients", "proxy_fraction", "seed", "data_dir",
                  "weight_decay")
"""Options of the constants' estimate from ``--dataset``: refused with ``--constants``."""


def plan(
    ctx: typer.Context,
    eps: _EpsOpt = "1.0",
    method: _MethodOpt = None,
    mechanism: _MechanismOpt = Mechanism.GAUSSIAN,
    dataset: _DatasetOpt = None,
    model: ModelOpt = None,
    hidden: HiddenOpt = "64",
    data: DataFileOpt = None,
    test_data: TestDataOpt = None,
    test_share: TestShareOpt = None,
    client_column: ClientColumnOpt = "client",
    label_column: LabelColumnOpt = "label",
    standardize: StandardizeOpt = True,
    partition: PartitionOpt = None,
    alpha: AlphaOpt = 0.5,
    fraction: _FractionOpt = 1.0,
    num_clients: NumClientsOpt = None,
    delta: _DeltaOpt = "1e-5",
    clip: ClipOpt = None,
    sample_rate: _SampleRateOpt = None,
    accountant: AccountantOpt = Accountant.RDP,
    lr: LrOpt = 0.05,
    lr_decay: LrDecayOpt = 0.01,
    lr_schedule: _LrScheduleOpt = LrSchedule.INVERSE_TIME,
    weight_decay: WdOpt = 0.01,
    aggregation: AggregationOpt = Aggregation.PAPER,
    rounds: _RoundsOpt = None,
    clients_per_round: _ClientsPerRoundOpt = None,
    data_use: _DataUseOpt = DataUse.CLEAR_PROXY,
    proxy_share: ProxyShareOpt = None,
    proxy_dataset: _ProxyDatasetOpt = None,
    proxy_data: ProxyDataOpt = None,
    proxy_classes: ProxyClassesOpt = None,
    pilot_share: _PilotShareOpt = None,
    twin_repeats: TwinRepeatsOpt = None,
    twin_budget: TwinBudgetOpt = None,
    seed: PlanSeedOpt = 0,
    device: DeviceOpt = "auto",
    data_dir: DataDirOpt = None,
    cache: _PlanCacheOpt = True,
    as_json: _AsJsonOpt = False,
    plot: _PlotOpt = None,
    constants: _ConstantsOpt = None,
    rounding: _RoundingOpt = Rounding.BEST,
    t_max: _TMaxOpt = 1000,
    proxy_fraction: ProxyOpt = None,
) -> None:
    """Plan the numbers of rounds T and replies per round b (and q) for the clients' budgets."""
    try:  # (no new local names above _plan_twin(dict(locals())): they would key the cache)
        check_accountant_applies(mechanism, accountant)
    except ValueError as e:
        raise fail(str(e)) from None
    chosen = method or (Method.BOUND if constants is not None else Method.TWIN)
    if chosen is not Method.TWIN:
        if data is not None:
            raise fail(f"--method {chosen.value} plans from the bound's constants, not from a "
                       f"data file, got data={str(data)!r}: estimate them first (fedqr "
                       f"estimate --data {data} --out constants.json; it reads the clients' data "
                       "without privacy) and give --constants constants.json, or leave --method "
                       "out to plan with the twin")
        try:
            check_left_out(_TWIN_ONLY, why=f"is an option of the twin planner (--method twin), "
                                           f"not of --method {chosen.value}")
            if constants is not None:
                check_left_out(_ESTIMATE_ONLY, why="sets how the bound's constants are "
                               "estimated from --dataset, which --constants FILE already holds")
            if "," in eps:  # the twin's per-client list: not several budgets
                raise ValueError(f"eps must be one budget for every client per value with "
                                 f"--method {chosen.value} (several budgets: --eps 1 5 10; "
                                 f"per-client budgets, a comma list, are planned by the twin), "
                                 f"got eps={eps!r}")
            eps_list = [_extra_eps(eps)] + [_extra_eps(a) for a in ctx.args]
            delta_f = float(delta)
        except ValueError as e:
            raise fail(str(e)) from None
        q = None if sample_rate is None else _float_opt("sample_rate", sample_rate)
        plan_bound(eps_list=eps_list, mechanism=mechanism, constants=constants,
                    dataset=dataset, rounding=Rounding.PAPER if chosen is Method.PAPER
                    else rounding, t_max=t_max, accountant=accountant, delta=delta_f,
                    partition=partition, alpha=alpha,
                    num_clients=10 if num_clients is None else num_clients, clip=clip,
                    sample_rate=q, weight_decay=weight_decay, proxy_fraction=proxy_fraction,
                    seed=seed, data_dir=data_dir, cache=cache, as_json=as_json, plot=plot)
        return
    if ctx.args and ctx.args[0].startswith("--"):
        raise fail(f"no such option: {ctx.args[0]}")
    if ctx.args:
        raise fail(f"unexpected argument {ctx.args[0]!r}: the twin plans one scenario; give "
                   "per-client budgets as --eps 1,2,... (several budgets: run plan once per "
                   "budget)")
    _plan_twin(dict(locals()))


def _plan_twin(o: dict[str, Any]) -> None:
    """``--method twin``: plan one scenario with the twin (``o``: the options of :func:`plan`).

    A repeated plan is answered from its stored document without importing the planner
    (:mod:`fedqr.cli.plan_cache`), except with ``--plot``, which needs the planner's
    predictions (its answer is stored all the same)."""
    from fedqr.cli import plan_cache
    from fedqr.cli.plan_view import plan_view, show_plan

    started = time.perf_counter()
    try:
        check_left_out(("rounding", "t_max", "proxy_fraction"),
                       why="is an option of --method bound|paper, not of the twin planner")
    except ValueError as e:
        raise fail(str(e)) from None
    key = plan_cache.answer_key(o)
    plot = o["plot"]
    if key is not None and plot is None and plan_cache.replay(key, as_json=o["as_json"],
                                                               started=started):
        return
    from fedqr.cli.scenario import plan_document, twin_plan
    from fedqr.data import DataNotFoundError

    try:
        with recorded_warnings() as said:
            result, scenario = twin_plan(o)
    except (DataNotFoundError, OSError) as e:  # data found nowhere (2) or unreadable (1)
        raise fail_on(e) from None
    except ValueError as e:
        raise fail(str(e)) from None
    if plot is not None:
        from fedqr.experiments.plots import plot_predicted_loss

        write_file_atomic(plot, lambda p: plot_predicted_loss(result.predictions, p))
    doc = plan_document(result, scenario)  # through JSON, as a cached one
    doc["warnings"] = said  # what loading and planning said: a replay says it again
    view = plan_view(doc)
    if key is not None:
        plan_cache.store(key, doc)
    show_plan(view, as_json=o["as_json"])
    if plot is not None and not o["as_json"]:
        out.print(f"wrote {plot}")


def _float_opt(name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise fail(f"{name} must be a number, got {name}={text!r}") from None
