"""``fedqr estimate`` and ``fedqr plan``: the bound's constants and the optimal (T, b)."""

# Fast --help (0.5 s, bench/cli_startup.py): only light modules at the top (the commands
# import torch, dp-accounting and flwr when they run), and no
# "from __future__ import annotations" (typer reads the options from the annotations at
# every start; strings would cost ~1,000 compiles and evals, a tenth of the budget).
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fedqr._enums import (
    Accountant,
    Aggregation,
    DatasetName,
    DataUse,
    LrSchedule,
    Mechanism,
    Method,
    PartitionKind,
    Rounding,
)
from fedqr._validate import check_in_range, check_positive, check_seed, int_or_auto, rate_or_auto
from fedqr.cli._common import (
    check_out_file,
    err,
    fail,
    mechanism_for,
    out,
    write_file_atomic,
    write_json_atomic,
)
from fedqr.cli.data_options import (
    ClientColumnOpt,
    DataFileOpt,
    HiddenOpt,
    LabelColumnOpt,
    ModelOpt,
    ProxyClassesOpt,
    ProxyDataOpt,
    StandardizeOpt,
    TestDataOpt,
    TestShareOpt,
)

if TYPE_CHECKING:
    from fedqr.cli.constants import EstimateSpec
    from fedqr.theory import ProblemConstants

DatasetOpt = Annotated[DatasetName, typer.Option(help="Data set to estimate on.")]
PartitionOpt = Annotated[PartitionKind | None, typer.Option(
    help="Partition into clients (default: by-writer for femnist, else two-digits).")]
AlphaOpt = Annotated[float, typer.Option(help="Dirichlet concentration (> 0).")]
ClientsOpt = Annotated[int, typer.Option(help="N, the number of clients.")]
MechOpt = Annotated[Mechanism, typer.Option(help="laplace (l1 clip) or gaussian (l2 clip).")]
ClipOpt = Annotated[float | None, typer.Option(
    help="Clip xi (default: the paper's, 300 laplace (femnist 200), 10 gaussian).")]
QOpt = Annotated[float | None, typer.Option(help="Sampling rate q (gaussian default 0.01).")]
DeltaOpt = Annotated[float, typer.Option(help="delta per client (gaussian).")]
WdOpt = Annotated[float, typer.Option(help="L2 regularisation; mu >= weight decay.")]
ProxyOpt = Annotated[float | None, typer.Option(
    help="Estimate on this random share of each client's data (0..1) instead of all of it.")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the partition (and proxy draw).")]
DataDirOpt = Annotated[Path | None, typer.Option(help="Folder with the data files.")]
CacheOpt = Annotated[bool, typer.Option(help="Reuse a cached estimate for the same settings.")]


def _spec(dataset: DatasetName, partition: PartitionKind | None, num_clients: int, alpha: float,
          mechanism: Mechanism, clip: float | None, sample_rate: float | None,
          weight_decay: float, proxy_fraction: float | None, seed: int) -> "EstimateSpec":
    if not mechanism_for(mechanism).private:
        raise ValueError(f"mechanism must be a private mechanism, got "
                         f"mechanism={mechanism.value!r}")
    if not num_clients >= 2:
        raise ValueError(f"num_clients must be >= 2, got num_clients={num_clients}")
    check_positive("alpha", alpha)
    check_seed("seed", seed)
    q = mechanism_for(mechanism).default_sample_rate if sample_rate is None else sample_rate
    if not 0 < q <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got sample_rate={q}")
    from fedqr.cli.constants import EstimateSpec
    from fedqr.data.presets import default_clip, default_partition

    return EstimateSpec(
        dataset=dataset, partition=default_partition(dataset) if partition is None else partition,
        num_clients=num_clients, alpha=alpha, mechanism=mechanism,
        clip=default_clip(dataset, mechanism) if clip is None else clip,
        sample_rate=q, weight_decay=weight_decay, proxy_fraction=proxy_fraction, seed=seed)


def _check_budget(eps: float, delta: float, mechanism: Mechanism) -> None:
    check_positive("eps", eps)
    check_in_range("delta", delta, 0, 1, low_open=mechanism_for(mechanism).needs_delta,
                   high_open=True)


def estimate(
    dataset: DatasetOpt = DatasetName.MNIST,
    partition: PartitionOpt = None,
    alpha: AlphaOpt = 0.5,
    num_clients: ClientsOpt = 10,
    mechanism: MechOpt = Mechanism.LAPLACE,
    clip: ClipOpt = None,
    sample_rate: QOpt = None,
    eps: Annotated[float, typer.Option(help="Budget written into the file.")] = 1.0,
    delta: DeltaOpt = 1e-5,
    weight_decay: WdOpt = 0.01,
    proxy_fraction: ProxyOpt = None,
    seed: SeedOpt = 0,
    out_path: Annotated[Path, typer.Option("--out", help="Constants JSON to write.")]
        = Path("constants.json"),
    data_dir: DataDirOpt = None,
    cache: CacheOpt = True,
) -> None:
    """Estimate mu, lambda, G, Gamma, Y0, Lambda_i of a data set and partition (no privacy!)."""
    from fedqr.cli.constants import estimate_for
    from fedqr.data import DataNotFoundError
    from fedqr.theory import constants_from_json

    try:
        spec = _spec(dataset, partition, num_clients, alpha, mechanism, clip, sample_rate,
                     weight_decay, proxy_fraction, seed)
        delta_used = mechanism_for(mechanism).client_delta(delta)
        _check_budget(eps, delta_used, mechanism)
        check_out_file("out", out_path)
        err.print("[yellow]note:[/] the estimate reads the clients' data without privacy"
                  + ("" if proxy_fraction else "; use --proxy-fraction or a public split"))
        with err.status("estimating constants (Hessian eigenvalues, local optima) ..."):
            doc = estimate_for(spec, data_dir=data_dir, eps=eps, delta=delta_used,
                               use_cache=cache)
        c = constants_from_json(json.dumps(doc))
    except DataNotFoundError as e:
        raise fail(str(e), code=1) from None
    except ValueError as e:
        raise fail(str(e)) from None
    write_json_atomic(out_path, doc)
    out.print(f"mu={c.mu:.4g} lambda={c.lam:.4g} gamma={c.gamma:.4g} G={c.G:.4g} "
              f"Gamma={c.Gamma:.4g} Y0={c.Y0:.4g} (clipped at theta_0: "
              f"{doc['estimate']['clipped_fraction']['theta_0']:.1%})")
    out.print(f"wrote {out_path}")


def _plan_bound(
    *, eps_list: list[float], mechanism: Mechanism, constants: Path | None,
    dataset: DatasetName | None, rounding: Rounding, t_max: int, accountant: Accountant,
    delta: float, partition: PartitionKind | None, alpha: float, num_clients: int,
    clip: float | None, sample_rate: float | None, weight_decay: float,
    proxy_fraction: float | None, seed: int, data_dir: Path | None, cache: bool,
    as_json: bool, plot: Path | None,
) -> None:
    """The paper's bound: optimal T and b for each budget eps (``--method bound|paper``)."""
    from fedqr.cli.constants import estimate_for, read_constants
    from fedqr.cli.tables import print_gaussian, print_laplace
    from fedqr.data import DataNotFoundError
    from fedqr.privacy import PaperBound
    from fedqr.theory import constants_from_json
    from fedqr.theory.tables import gaussian_rows, laplace_rows

    spec = mechanism_for(mechanism)
    try:
        for e in eps_list:
            _check_budget(e, delta, mechanism)
        check_out_file("plot", plot)
        if (constants is None) == (dataset is None):
            raise ValueError("give exactly one of --constants FILE or --dataset NAME, got "
                             f"constants={constants}, dataset={dataset}")
        if spec.bound is None:
            covered = ", ".join(m.value for m in Mechanism if mechanism_for(m).bound)
            raise ValueError(f"mechanism must be one the paper's bounds cover ({covered}; "
                             f"plan others with --method twin), got "
                             f"mechanism={mechanism.value!r}")
        if not isinstance(t_max, int) or t_max < 1:
            raise ValueError(f"t_max must be an integer >= 1, got t_max={t_max}")
        source: dict[str, Any]
        if dataset is not None:
            est = _spec(dataset, partition, num_clients, alpha, mechanism, clip, sample_rate,
                        weight_decay, proxy_fraction, seed)
            with err.status(f"estimating constants on {dataset.value} ..."):
                doc = estimate_for(est, data_dir=data_dir, eps=eps_list[0],
                                   delta=spec.client_delta(delta), use_cache=cache)
            base = constants_from_json(json.dumps(doc))
            source = {"dataset": dataset.value, "estimate": doc["estimate"]}
        else:
            assert constants is not None
            base, doc = read_constants(constants)
            source = {"constants_file": str(constants)}
        base = _for_mechanism(base, mechanism, delta)
        # the paper's two theorems give two tables (Theorem 3: closed forms; Theorem 4: an
        # accountant-calibrated grid): a branch on the theorem, not on the mechanism
        closed_form = spec.bound is PaperBound.THEOREM_3
        paper_ok = (dataset is DatasetName.MNIST and closed_form
                    and partition in (None, PartitionKind.TWO_DIGITS) and base.N == 10
                    and base.xi == 300.0)
        if closed_form:
            rows, panels = laplace_rows(base, eps_list, rounding=rounding)
        else:
            with err.status("calibrating the Gaussian noise over the (T, b) grid ..."):
                rows, panels = gaussian_rows(base, eps_list, t_max=t_max,
                                             accountant=accountant)
    except DataNotFoundError as e:
        raise fail(str(e), code=1) from None
    except ValueError as e:
        raise fail(str(e)) from None
    result = {"mechanism": mechanism.value, "rounding": rounding.value, "source": source,
              "constants": json.loads(json.dumps(doc_constants(base))), "table": rows}
    if plot is not None:
        from fedqr.experiments.plots import plot_bound_grid

        write_file_atomic(plot, lambda p: plot_bound_grid(panels, p))
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    if closed_form:
        print_laplace(base, rows, compare_paper=paper_ok, source=source)
    else:
        print_gaussian(base, rows, t_max=t_max, source=source)
    if plot is not None:
        out.print(f"wrote {plot}")


def _extra_eps(text: str) -> float:
    if text.startswith("--"):
        raise ValueError(f"no such option: {text}")
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"unexpected argument {text!r}: only further --eps values may follow "
                         "--eps (e.g. --eps 1 5 10)") from None


def _for_mechanism(c: "ProblemConstants", mechanism: Mechanism,
                   delta: float) -> "ProblemConstants":
    """Budgets of the mechanism: its delta (0 for pure DP) and its batch rate (1 without
    sampling)."""
    from dataclasses import replace

    spec = mechanism_for(mechanism)
    return replace(c, delta_i=(spec.client_delta(delta),) * c.N, q=spec.batch_rate(c.q))


def doc_constants(c: "ProblemConstants") -> dict[str, Any]:
    """The constants as the JSON document of :func:`fedqr.theory.constants_to_json`."""
    from fedqr.theory import constants_to_json

    out_doc: dict[str, Any] = json.loads(constants_to_json(c))
    out_doc.pop("eps_i", None)
    return out_doc


def plan(
    ctx: typer.Context,
    eps: Annotated[str, typer.Option(
        help="Budget per client: one value or N comma-separated (twin); --method bound also "
             "plans several budgets: --eps 1 5 10.")] = "1.0",
    method: Annotated[Method | None, typer.Option(
        help="twin (default): simulate every schedule on a proxy with the deployment's exact "
             "noise; bound: minimise the paper's bound U(T, b); paper: the bound with the "
             "authors' rounding. Default: twin, or bound with --constants.")] = None,
    mechanism: Annotated[Mechanism, typer.Option(help="Client-side DP mechanism.")]
        = Mechanism.GAUSSIAN,
    dataset: Annotated[DatasetName | None, typer.Option(
        help="Data set of the deployment (default mnist).")] = None,
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
    fraction: Annotated[float, typer.Option(help="Share of the training set used.")] = 1.0,
    num_clients: Annotated[int | None, typer.Option(
        help="N, the number of clients (default 10; with --data: the file's).")] = None,
    delta: Annotated[str, typer.Option(help="Delta per client (gaussian): one or N values.")]
        = "1e-5",
    clip: ClipOpt = None,
    sample_rate: Annotated[str | None, typer.Option(
        help="q (gaussian, default 0.01), or 'auto': the planner chooses q too.")] = None,
    accountant: Annotated[Accountant, typer.Option(help="Gaussian: rdp or pld.")]
        = Accountant.RDP,
    lr: Annotated[float, typer.Option(help="Initial learning rate eta0.")] = 0.05,
    lr_decay: Annotated[float, typer.Option(help="eta_t = lr / (1 + lr_decay t).")] = 0.01,
    lr_schedule: Annotated[LrSchedule, typer.Option(help="inverse-time or constant.")]
        = LrSchedule.INVERSE_TIME,
    weight_decay: WdOpt = 0.01,
    aggregation: Annotated[Aggregation, typer.Option(help="Server aggregation rule.")]
        = Aggregation.PAPER,
    rounds: Annotated[str | None, typer.Option(help="Fix T (default: auto, planned).")] = None,
    clients_per_round: Annotated[str | None, typer.Option(
        help="Fix b (default: auto, planned).")] = None,
    data_use: Annotated[DataUse, typer.Option(
        help="clear-proxy: a share of the clients' data read WITHOUT privacy (simulation "
             "only); public-proxy: --proxy-dataset, no cost; private-pilot: public proxy plus "
             "a pilot run charged to the clients' budgets (--pilot-share).")]
        = DataUse.CLEAR_PROXY,
    proxy_share: Annotated[float | None, typer.Option(
        help="Share of each client's (or the public set's) rows the twin trains on "
             "(default: about 4000 rows in all).")] = None,
    proxy_dataset: Annotated[DatasetName | None, typer.Option(
        help="Public proxy data set (public-proxy, private-pilot).")] = None,
    proxy_data: ProxyDataOpt = None,
    proxy_classes: ProxyClassesOpt = None,
    pilot_share: Annotated[float | None, typer.Option(
        help="private-pilot: share of each budget the pilot spends, in (0, 1).")] = None,
    twin_repeats: Annotated[int | None, typer.Option(
        help="Twin repeats per schedule (>= 2; default 3 on 3,000 proxy rows or more, up to "
             "12 on fewer).")] = None,
    twin_budget: Annotated[float | None, typer.Option(
        help="Seconds (estimated) the twin of a model other than logreg may simulate "
             "(default 12 per 1,000 proxy rows, 15 to 45).")] = None,
    seed: SeedOpt = 0,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    data_dir: DataDirOpt = None,
    cache: CacheOpt = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
        = False,
    plot: Annotated[Path | None, typer.Option(
        help="Write the predicted loss over (T, b) (twin) or U (bound) as a PNG here.")]
        = None,
    constants: Annotated[Path | None, typer.Option(
        help="Constants JSON for --method bound|paper (see estimate).")] = None,
    rounding: Annotated[Rounding, typer.Option(
        help="bound: best neighbouring integer; paper: floor T*, ceil b*.")] = Rounding.BEST,
    t_max: Annotated[int, typer.Option("--t-max", help="bound, gaussian: largest T searched.")]
        = 1000,
    proxy_fraction: ProxyOpt = None,
) -> None:
    """Plan the numbers of rounds T and replies per round b (and q) for the clients' budgets."""
    chosen = method or (Method.BOUND if constants is not None else Method.TWIN)
    if chosen is not Method.TWIN:
        try:
            eps_list = [_extra_eps(e) for e in eps.split(",")] + [_extra_eps(a)
                                                                 for a in ctx.args]
            delta_f = float(delta)
        except ValueError as e:
            raise fail(str(e)) from None
        q = None if sample_rate is None else _float_opt("sample_rate", sample_rate)
        _plan_bound(eps_list=eps_list, mechanism=mechanism, constants=constants,
                    dataset=dataset, rounding=Rounding.PAPER if chosen is Method.PAPER
                    else rounding, t_max=t_max, accountant=accountant, delta=delta_f,
                    partition=partition, alpha=alpha,
                    num_clients=10 if num_clients is None else num_clients, clip=clip,
                    sample_rate=q, weight_decay=weight_decay, proxy_fraction=proxy_fraction,
                    seed=seed, data_dir=data_dir, cache=cache, as_json=as_json, plot=plot)
        return
    from fedqr.cli._common import device as _device
    from fedqr.cli.scenario import (
        plan_document,
        print_plan,
        proxy_choice,
        run_planner,
        scenario_from_options,
        workload,
    )
    from fedqr.data import DataNotFoundError

    try:
        if ctx.args:
            raise ValueError(f"unexpected argument {ctx.args[0]!r}: the twin plans one "
                             "scenario; give per-client budgets as --eps 1,2,... (several "
                             "budgets: run plan once per budget)")
        if constants is not None:
            raise ValueError("constants is for --method bound|paper, got method=twin")
        check_out_file("plot", plot)
        source, kernel, _ = workload(
            dataset=dataset or DatasetName.MNIST, partition=partition, alpha=alpha,
            fraction=fraction, num_clients=num_clients, seed=seed, data_dir=data_dir,
            data=data, test_data=test_data, test_share=test_share,
            client_column=client_column, label_column=label_column, standardize=standardize,
            model=model, hidden=hidden)
        scenario = scenario_from_options(
            dataset=dataset or DatasetName.MNIST, partition=partition, alpha=alpha,
            fraction=fraction, num_clients=source.num_clients, mechanism=mechanism, eps=eps,
            delta=delta, clip=clip, sample_rate=rate_or_auto(sample_rate, default=0.01),
            accountant=accountant, lr=lr, lr_decay=lr_decay, lr_schedule=lr_schedule,
            weight_decay=weight_decay, aggregation=aggregation, seed=seed, data_dir=data_dir,
            source=source, kernel=kernel, rounds=int_or_auto("rounds", rounds, low=1),
            clients_per_round=int_or_auto("clients_per_round", clients_per_round, low=1))
        choice = proxy_choice(data_use=data_use, proxy_share=proxy_share,
                              proxy_dataset=proxy_dataset, scenario=scenario,
                              pilot_share=pilot_share, proxy_data=proxy_data,
                              proxy_classes=proxy_classes, client_column=client_column,
                              label_column=label_column)
        result = run_planner(scenario, choice, twin_repeats=twin_repeats,
                             device=_device(device), use_cache=cache, pilot_share=pilot_share,
                             twin_budget=twin_budget)
    except (DataNotFoundError, OSError) as e:
        raise fail(str(e), code=1) from None
    except ValueError as e:
        raise fail(str(e)) from None
    if plot is not None:
        from fedqr.experiments.plots import plot_predicted_loss

        write_file_atomic(plot, lambda p: plot_predicted_loss(result.predictions, p))
    if as_json:
        typer.echo(json.dumps(plan_document(result, scenario), indent=2))
    else:
        print_plan(result, scenario)
        if plot is not None:
            out.print(f"wrote {plot}")


def _float_opt(name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise fail(f"{name} must be a number, got {name}={text!r}") from None
