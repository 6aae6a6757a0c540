"""``fedqr run``: simulate FedSGD-DPC and write result.json and a plot."""

# Fast --help (0.5 s, bench/cli_startup.py): only light modules at the top (the command
# imports torch, dp-accounting and flwr when it runs), and no
# "from __future__ import annotations" (typer reads the options from the annotations).
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from fedqr._enums import (
    Accountant,
    Aggregation,
    DatasetName,
    DataUse,
    LrSchedule,
    Mechanism,
    PartitionKind,
    Selection,
)
from fedqr._validate import check_positive, int_or_auto, rate_or_auto
from fedqr.cli._common import (
    check_out_dir,
    fail,
    floats,
    mechanism_for,
    out,
    progress,
    staged,
    warn_diverged,
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
    StandardizeOpt,
    TestDataOpt,
    TestShareOpt,
)

if TYPE_CHECKING:
    import torch

    from fedqr.data.source import DataSource
    from fedqr.data.spec import ClientData
    from fedqr.models.kernel import Kernel
    from fedqr.planner import Scenario
    from fedqr.sim.config import EvalTrain, SimConfig


def run(
    dataset: Annotated[DatasetName, typer.Option(
        help="Data set: mnist and digits train softmax regression, femnist the paper's CNN.")]
        = DatasetName.MNIST,
    partition: Annotated[PartitionKind | None, typer.Option(
        help="two-digits: the paper's non-iid split; iid; dirichlet (see --alpha); by-writer "
             "(FEMNIST's whole writers). Default: by-writer for femnist, else two-digits.")]
        = None,
    alpha: Annotated[float, typer.Option(help="Dirichlet concentration (> 0).")] = 0.5,
    fraction: Annotated[float, typer.Option(
        help="Share of the training set used, in (0, 1]: a class-stratified subset drawn "
             "from --seed (the test set stays whole).")] = 1.0,
    num_clients: Annotated[int | None, typer.Option(
        help="N, the number of clients (default 10; with --data: the file's).")] = None,
    data: DataFileOpt = None,
    test_data: TestDataOpt = None,
    test_share: TestShareOpt = None,
    client_column: ClientColumnOpt = "client",
    label_column: LabelColumnOpt = "label",
    standardize: StandardizeOpt = True,
    model: ModelOpt = None,
    hidden: HiddenOpt = "64",
    clients_per_round: Annotated[str, typer.Option(
        help="b, replies per round (1..N), or 'auto': planned (see fedqr plan).")] = "10",
    rounds: Annotated[str, typer.Option(
        help="T, the number of queries (rounds), or 'auto': planned (see fedqr plan).")]
        = "100",
    mechanism: Annotated[Mechanism, typer.Option(help="Client-side DP mechanism.")]
        = Mechanism.GAUSSIAN,
    eps: Annotated[str, typer.Option(help="Epsilon per client: one value or N comma-separated.")]
        = "1.0",
    delta: Annotated[str, typer.Option(help="Delta per client (Gaussian): one or N values.")]
        = "1e-5",
    clip: Annotated[float | None, typer.Option(
        help="Per-sample clip xi (l1 for laplace, l2 for gaussian). Default: the paper's, "
             "laplace 300 (femnist 200), gaussian 10; none without noise.")]
        = None,
    sample_rate: Annotated[str | None, typer.Option(
        help="q, Poisson sampling rate of the local batch (gaussian default 0.01; laplace 1), "
             "or 'auto' (gaussian): planned.")]
        = None,
    accountant: Annotated[Accountant, typer.Option(help="Accountant for gaussian: rdp or pld.")]
        = Accountant.RDP,
    lr: Annotated[float, typer.Option(help="Initial learning rate eta0.")] = 0.05,
    lr_decay: Annotated[float, typer.Option(help="eta_t = lr / (1 + lr_decay t).")] = 0.01,
    lr_schedule: Annotated[LrSchedule, typer.Option(
        help="inverse-time: lr / (1 + lr_decay t); constant; theory: 2 / (mu (t + gamma)).")]
        = LrSchedule.INVERSE_TIME,
    mu: Annotated[float | None, typer.Option(help="Strong convexity mu (theory schedule).")]
        = None,
    gamma: Annotated[float | None, typer.Option(help="gamma = 2 lambda / mu (theory schedule).")]
        = None,
    weight_decay: Annotated[float, typer.Option(help="L2 regularisation (strong convexity).")]
        = 0.01,
    selection: Annotated[Selection, typer.Option(help="Client selection.")]
        = Selection.ROUND_ROBIN,
    aggregation: Annotated[Aggregation, typer.Option(help="Server aggregation rule.")]
        = Aggregation.PAPER,
    repeats: Annotated[int, typer.Option(
        help="Independent repeats: one batch for mnist/digits, one after another for femnist.")]
        = 1,
    seed: Annotated[int, typer.Option(help="Seed for partition, schedule and noise.")] = 0,
    eval_every: Annotated[int | None, typer.Option(
        help="Evaluate every this many rounds. Default: every round; femnist about 20 "
             "evaluations (each is a forward pass over the test set).")] = None,
    eval_train: Annotated[str, typer.Option(
        help="When the training objective is evaluated: every (at every evaluation), end (the "
             "final one only), none, or sample:N (at every evaluation, estimated from N "
             "training rows, with its standard error).")] = "end",
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder (result.json, PNG).")]
        = Path("runs/latest"),
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    data_dir: Annotated[Path | None, typer.Option(help="Folder with the data files.")] = None,
    data_use: Annotated[DataUse, typer.Option(
        help="With auto: what the planner's twin trains on (see fedqr plan).")]
        = DataUse.CLEAR_PROXY,
    proxy_dataset: Annotated[DatasetName | None, typer.Option(
        help="With auto: the public proxy (public-proxy, private-pilot).")] = None,
    proxy_data: ProxyDataOpt = None,
    proxy_classes: ProxyClassesOpt = None,
    pilot_share: Annotated[float | None, typer.Option(
        help="With auto and private-pilot: share of each budget the pilot spends.")] = None,
) -> None:
    """Simulate FedSGD-DPC and write result.json and a loss/accuracy plot."""
    from fedqr.cli.scenario import workload
    from fedqr.data import DataNotFoundError
    from fedqr.planner import PlanNotUseful

    plan_doc: dict[str, object] | None = None
    try:
        check_out_dir("out", out_dir)
        check_positive("alpha", alpha)
        from fedqr.sim.config import parse_train_eval

        train_eval = parse_train_eval(eval_train)
        rounds_n = int_or_auto("rounds", rounds, low=0)
        b_n = int_or_auto("clients_per_round", clients_per_round, low=1)
        q_opt = rate_or_auto(sample_rate,
                             default=mechanism_for(mechanism).default_sample_rate)
        source, kernel, client_data = workload(
            dataset=dataset, partition=partition, alpha=alpha, fraction=fraction,
            num_clients=num_clients, seed=seed, data_dir=data_dir, data=data,
            test_data=test_data, test_share=test_share, client_column=client_column,
            label_column=label_column, standardize=standardize, model=model, hidden=hidden)
        if rounds_n is None or b_n is None or q_opt is None:
            from fedqr.cli.scenario import scenario_from_options

            scenario = scenario_from_options(
                dataset=dataset, partition=partition, alpha=alpha, fraction=fraction,
                num_clients=source.num_clients, mechanism=mechanism, eps=eps, delta=delta,
                clip=clip, sample_rate=q_opt, accountant=accountant, lr=lr,
                lr_decay=lr_decay, lr_schedule=lr_schedule, weight_decay=weight_decay,
                aggregation=aggregation, seed=seed, data_dir=data_dir, rounds=rounds_n,
                clients_per_round=b_n, source=source, kernel=kernel)
            rounds_n, b_n, q_opt, eps, delta, plan_doc = _planned(
                scenario, data_use=data_use, proxy_dataset=proxy_dataset,
                proxy_data=proxy_data, proxy_classes=proxy_classes, pilot_share=pilot_share,
                client_column=client_column, label_column=label_column, eps=eps, delta=delta,
                device=device)
        config = _config(
            source=source, rounds=rounds_n, clients_per_round=b_n, sample_rate=q_opt,
            selection=selection, aggregation=aggregation, lr=lr, lr_decay=lr_decay,
            lr_schedule=lr_schedule, mu=mu, gamma=gamma, weight_decay=weight_decay,
            mechanism=mechanism, eps=eps, delta=delta, clip=clip, accountant=accountant,
            repeats=repeats, seed=seed, eval_every=eval_every, train_eval=train_eval)
        dev = _device(device)
    except PlanNotUseful as e:
        raise fail(f"{e}; nothing was run", code=1) from None
    except OSError as e:  # an unreadable data file
        raise fail(str(e), code=1) from None
    except DataNotFoundError as e:
        raise fail(str(e), code=1) from None
    except ValueError as e:
        raise fail(str(e)) from None
    doc = _simulate(client_data, config, kernel, dev, label=f"{mechanism.value} "
                    f"b={config.clients_per_round} x{repeats}")
    _write(doc, source=source, kernel=kernel, dev=dev, plan_doc=plan_doc, out_dir=out_dir)


def _planned(scenario: "Scenario", *, data_use: DataUse, proxy_dataset: DatasetName | None,
             proxy_data: Path | None, proxy_classes: str | None, pilot_share: float | None,
             client_column: str, label_column: str, eps: str, delta: str,
             device: str) -> tuple[int, int, float, str, str, dict[str, object]]:
    """T, b and q from the twin planner; the budgets a private pilot left for the run."""
    from fedqr.cli.scenario import proxy_choice, run_planner

    mechanism = scenario.mechanism
    choice = proxy_choice(data_use=data_use, proxy_share=None, proxy_dataset=proxy_dataset,
                          scenario=scenario, pilot_share=pilot_share, proxy_data=proxy_data,
                          proxy_classes=proxy_classes, client_column=client_column,
                          label_column=label_column)
    the_plan = run_planner(scenario, choice, twin_repeats=None, device=_device(device),
                           use_cache=True, pilot_share=pilot_share)
    the_plan.check_useful()
    rec = the_plan.recommended
    left = the_plan.privacy_cost.get("budget_left_for_run")
    if isinstance(left, dict):  # a private pilot spent part of the budget
        eps = ",".join(repr(e) for e in left["eps"])
        if mechanism_for(mechanism).needs_delta:
            delta = ",".join(repr(d) for d in left["delta"])
    sampled = mechanism_for(mechanism).batch_rate(0.5) < 1
    out.print(f"plan: T={rec.rounds}, b={rec.clients_per_round}"
              + (f", q={rec.sample_rate:g}" if sampled else "") + f" ({the_plan.message})")
    return (rec.rounds, rec.clients_per_round, rec.sample_rate, eps, delta,
            the_plan.recommended_dict(mechanism=mechanism))


def _config(*, source: "DataSource", rounds: int, clients_per_round: int, sample_rate: float,
            selection: Selection, aggregation: Aggregation, lr: float, lr_decay: float,
            lr_schedule: LrSchedule, mu: float | None, gamma: float | None,
            weight_decay: float, mechanism: Mechanism, eps: str, delta: str,
            clip: float | None, accountant: Accountant, repeats: int, seed: int,
            eval_every: int | None, train_eval: "tuple[EvalTrain, int | None]") -> "SimConfig":
    """The simulation's configuration; the presets fill what the options leave open."""
    from fedqr.data.presets import default_clip, default_eval_every
    from fedqr.sim.config import LearningRate, PrivacyConfig, SimConfig

    return SimConfig(
        num_clients=source.num_clients, clients_per_round=clients_per_round, rounds=rounds,
        selection=selection, aggregation=aggregation,
        lr=LearningRate(schedule=lr_schedule, eta0=lr, decay=lr_decay, mu=mu, gamma=gamma),
        weight_decay=weight_decay,
        privacy=PrivacyConfig(
            mechanism=mechanism, eps=floats("eps", eps), delta=floats("delta", delta),
            clip=clip if clip is not None else default_clip(source.dataset, mechanism),
            sample_rate=sample_rate, accountant=accountant),
        repeats=repeats, seed=seed,
        eval_every=eval_every if eval_every is not None
        else default_eval_every(source.dataset, rounds),
        train_eval=train_eval[0], train_eval_rows=train_eval[1])


def _simulate(client_data: "ClientData", config: "SimConfig", kernel: "Kernel",
              dev: "torch.device", *, label: str) -> dict[str, Any]:
    """Run the rounds with a progress bar; the result document with its wall time."""
    from fedqr.privacy import PrivacyBudgetExceeded
    from fedqr.sim.loop import run_rounds

    started = time.perf_counter()
    with progress("FedSGD-DPC") as bar:
        task = bar.add_task(label, total=config.rounds)
        try:
            result = run_rounds(client_data.dataset, client_data.partition, config, kernel,
                                device=dev, on_round=lambda t: bar.update(task, completed=t))
        except PrivacyBudgetExceeded as e:
            raise fail(str(e), code=1) from None
        except ValueError as e:
            raise fail(str(e)) from None
    doc = result.to_json()
    doc["wall_time_s"] = time.perf_counter() - started
    return doc


def _write(doc: dict[str, Any], *, source: "DataSource", kernel: "Kernel", dev: "torch.device",
           plan_doc: dict[str, object] | None, out_dir: Path) -> None:
    """Write result.json and the plot together (a failure leaves no partial output)."""
    from fedqr.cli._common import write_json_atomic
    from fedqr.data.source import OwnData
    from fedqr.experiments.plots import plot_training
    from fedqr.sim.provenance import provenance

    if plan_doc is not None:
        doc["plan"] = {**plan_doc,
                       "achieved_test_loss": doc["summary"]["final_test_loss_mean"]}
    if isinstance(source, OwnData):
        doc["data"] = source.identity()
    doc["provenance"] = provenance(model=kernel.describe(), device=dev)
    warn_diverged(doc)
    with staged(out_dir) as stage:
        write_json_atomic(stage / "result.json", doc)
        plot_training(doc, stage / "training.png")
    _summary(doc, doc["wall_time_s"], out_dir)
    if plan_doc is not None:
        pred = plan_doc["predicted_test_loss"]
        if isinstance(pred, dict):
            out.print(f"planned test loss {pred['mean']:.4f} +- {pred['stderr']:.4f}, "
                      f"achieved {doc['plan']['achieved_test_loss']:.4f}")


def _summary(doc: dict[str, object], elapsed: float, out_dir: Path) -> None:
    summary = doc["summary"]
    assert isinstance(summary, dict)
    clients = doc["clients"]
    assert isinstance(clients, list)
    table = Table(title="clients", show_lines=False)
    for col in ("id", "d_i", "replies", "eps spent", "noise std", "clipped", "SNR"):
        table.add_column(col, justify="right")
    for c in clients[:12]:
        table.add_row(str(c["id"]), str(c["num_samples"]), str(c["replies"]),
                      _fmt(c["epsilon_spent"]), _fmt(c["noise_std"]),
                      f"{c['clipped_fraction']:.1%}", _fmt(c["snr"]))
    out.print(table)
    out.print(f"final test accuracy {_fmt(summary['final_test_accuracy_mean'])} "
              f"+- {_fmt(summary['final_test_accuracy_std'])}, test loss "
              f"{_fmt(summary['final_test_loss_mean'])}  ({elapsed:.1f} s)")
    out.print(f"wrote {out_dir / 'result.json'} and {out_dir / 'training.png'}")


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v[:3]) + (", ...]" if len(v) > 3 else "]")
    return "-" if v is None else str(v)

