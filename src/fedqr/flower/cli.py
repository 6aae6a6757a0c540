"""``fedqr flower simulate`` and ``fedqr flower deploy``: FedSGD-DPC on Flower.

This module imports no ``flwr`` at import time (the commands import it when they run), so
``fedqr`` works without the ``[flower]`` extra. Both commands write the ``result.json`` of
``fedqr run`` (plus a ``flower`` section), ``training.png`` and ``model.npz`` into ``--out``;
bad input exits with code 2 naming the parameter and writes nothing.
"""

# Fast --help (0.5 s, bench/cli_startup.py): only light modules at the top (the commands
# import torch, dp-accounting and flwr when they run), and no
# "from __future__ import annotations" (typer reads the options from the annotations at
# every start; strings would cost ~1,000 compiles and evals, a tenth of the budget).
import contextlib
import importlib.util
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import typer
from rich.console import Console
from rich.markup import escape

from fedqr._atomic import check_writable_dir
from fedqr._cli_checks import check_accountant_applies, check_budget_applies, given
from fedqr._cli_messages import diverged_note, exit_code, name_options
from fedqr._cli_once import OnceCommand
from fedqr._enums import Accountant, Aggregation, DatasetName, Mechanism
from fedqr._options import (
    AggregationOpt,
    AlphaOpt,
    ClientColumnOpt,
    DataDirOpt,
    HiddenOpt,
    LabelColumnOpt,
    LrDecayOpt,
    LrOpt,
    MechanismOpt,
    ModelOpt,
    NumClientsOpt,
    TestShareOpt,
)
from fedqr._signals import sigterm_as_interrupt
from fedqr._validate import check_positive
from fedqr.flower import cli_options as o
from fedqr.flower import cli_parties

if TYPE_CHECKING:
    from fedqr.flower.auto import AutoChoice
    from fedqr.flower.config import FlowerRunConfig

flower_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         pretty_exceptions_show_locals=False,
                         help="Run FedSGD-DPC on Flower: simulation or a local deployment.")
err = Console(stderr=True)
out = Console()

_COMMAND = {"simulation": "fedqr flower simulate", "deployment": "fedqr flower deploy",
            "remote": "fedqr flower run"}
Remote = tuple[str, Path | None] | None  # the SuperLink's address and CA, for fedqr flower run
_MODE = {"simulate": "simulation", "deploy": "deployment", "run": "remote"}


def _fail(message: str, code: int) -> typer.Exit:
    err.print(f"[bold red]error:[/] "
              f"{escape(name_options(message) if code == 2 else message)}")
    return typer.Exit(code)


def command(
    ctx: typer.Context,
    dataset: o.DatasetOpt = DatasetName.MNIST,
    data_dir: DataDirOpt = None,
    fraction: o.FractionOpt = 1.0,
    partition: o.PartitionOpt = None,
    alpha: AlphaOpt = 0.5,
    num_clients: NumClientsOpt = None,
    data: o.DataOpt = None,
    test_data: o.TestDataOpt = None,
    test_share: TestShareOpt = None,
    client_column: ClientColumnOpt = "client",
    label_column: LabelColumnOpt = "label",
    standardize: o.StandardizeOpt = True,
    model: ModelOpt = None,
    hidden: HiddenOpt = "64",
    clients_per_round: o.ClientsPerRoundOpt = "",
    rounds: o.RoundsOpt = "10",
    mechanism: MechanismOpt = Mechanism.GAUSSIAN,
    eps: o.EpsOpt = "",
    delta: o.DeltaOpt = "1e-5",
    clip: o.ClipOpt = None,
    sample_rate: o.SampleRateOpt = None,
    accountant: o.AccountantOpt = Accountant.RDP,
    lr: LrOpt = 0.05,
    lr_decay: LrDecayOpt = 0.01,
    weight_decay: o.WeightDecayOpt = 0.01,
    aggregation: AggregationOpt = Aggregation.PAPER,
    seed: o.SeedOpt = 0,
    round_timeout: o.RoundTimeoutOpt = 120.0,
    connect_timeout: o.ConnectTimeoutOpt = 120.0,
    min_replies: o.MinRepliesOpt = 1,
    state_dir: o.StateDirOpt = None,
    work_dir: o.WorkDirOpt = None,
    timeout: o.TimeoutOpt = 3600.0,
    out_dir: o.OutOpt = Path("runs/flower"),
    superlink: o.SuperlinkOpt = None,
    root_certificates: o.RootCertificatesOpt = None,
    insecure: o.InsecureOpt = False,
    proxy_dataset: o.ProxyDatasetOpt = None,
    proxy_data: o.ProxyDataOpt = None,
    proxy_classes: o.ProxyClassesOpt = None,
    node_timeout: o.NodeTimeoutOpt = None,
) -> None:
    """FedSGD-DPC on Flower (simulate, deploy or run: the command's name says which)."""
    options = o.FlowerOptions(**{k: v for k, v in locals().items() if k != "ctx"})
    _main(_MODE[str(ctx.info_name)], options)


def _main(mode: str, opts: "o.FlowerOptions") -> None:
    """Check every option and the data (exit 2 naming the option, nothing written), then run."""
    from fedqr.data import DataNotFoundError

    try:
        cfg, choice, remote, names = _configure(mode, opts)
    except DataNotFoundError as e:  # bad input: exit 2, naming --data-dir and FEDQR_DATA
        raise _fail(str(e), exit_code(e)) from None
    except ValueError as e:
        raise _fail(str(e), 2) from None
    _execute(cfg, mode=mode, work_dir=opts.work_dir, timeout=opts.timeout,
             out_dir=opts.out_dir, remote=remote, node_timeout=opts.node_timeout, choice=choice,
             names=names)


def _configure(mode: str, opts: "o.FlowerOptions"
               ) -> "tuple[FlowerRunConfig, AutoChoice | None, Remote, tuple[str, ...] | None]":
    """The run's configuration, its auto choice, the remote SuperLink and the ``--data``
    file's client ids (``None``: no file), all checked."""
    from fedqr.data.presets import default_clients_per_round, default_clip, default_partition
    from fedqr.flower.cli_auto import auto_choice, check_plannable, parse_schedule
    from fedqr.flower.cli_data import check_model, data_fields, own_data
    from fedqr.flower.config import FlowerRunConfig, parse_floats
    from fedqr.privacy import mechanism_for

    _check_mode(mode, opts)
    if given("eps") and not opts.eps.strip():
        raise ValueError("eps must be a number or a comma-separated list of per-client "
                         "numbers (leave --eps out for the default), got eps=''")
    check_accountant_applies(opts.mechanism, opts.accountant)
    check_budget_applies(opts.mechanism, eps=opts.eps, delta=opts.delta)  # as fedqr run does
    remote = None
    if opts.superlink is not None:
        remote = _remote(opts.superlink, opts.root_certificates, insecure=opts.insecure)
    own = own_data(opts, remote=remote is not None)
    n = own.num_clients if own is not None else (
        10 if opts.num_clients is None else opts.num_clients)
    if n < 1:  # before b's default (every client of a small federation) names b instead
        raise ValueError(f"num_clients must be >= 1, got num_clients={n}")
    default_rate = mechanism_for(opts.mechanism).default_sample_rate
    schedule = parse_schedule(  # b: 10, or every client of a smaller federation by default
        rounds=opts.rounds, clients_per_round=opts.clients_per_round or str(
            default_clients_per_round(n)), sample_rate=opts.sample_rate,
        default_rate=default_rate, offer_auto=mode == "remote")
    choice = auto_choice(schedule, command=_COMMAND[mode], remote=mode == "remote",
                         proxy_dataset=opts.proxy_dataset, proxy_data=opts.proxy_data,
                         proxy_classes=opts.proxy_classes)
    cfg = FlowerRunConfig(  # auto: T = 1, b = N until planned
        num_clients=n, clients_per_round=schedule.clients_per_round or n,
        rounds=schedule.rounds or 1, dataset=opts.dataset,
        data_dir=str(opts.data_dir.resolve()) if opts.data_dir else "",
        fraction=opts.fraction, partition=opts.partition or default_partition(opts.dataset),
        alpha=opts.alpha, mechanism=opts.mechanism, **data_fields(opts),
        eps=parse_floats("eps", opts.eps or "1.0"), delta=parse_floats("delta", opts.delta),
        clip=opts.clip if opts.clip is not None else default_clip(
            None if opts.data or opts.test_data else opts.dataset, opts.mechanism),
        sample_rate=schedule.sample_rate or default_rate, accountant=opts.accountant,
        lr=opts.lr, lr_decay=opts.lr_decay, weight_decay=opts.weight_decay,
        aggregation=opts.aggregation, seed=opts.seed, round_timeout=opts.round_timeout,
        connect_timeout=opts.connect_timeout, min_replies=opts.min_replies,
        state_dir=str(opts.state_dir.resolve()) if opts.state_dir else "",
        client_data=remote is not None, client_budgets=remote is not None and not opts.eps)
    check_model(cfg, own)
    if choice is not None:
        check_plannable(cfg, choice)
    return cfg, choice, remote, own.client_names if own is not None else None


def _check_mode(mode: str, opts: "o.FlowerOptions") -> None:
    """The options that belong to one command only, the output folder and the timeout."""
    from fedqr.flower.link_main import check_node_timeout

    check_writable_dir("out_dir", opts.out_dir)
    for name, folder in (("work_dir", opts.work_dir), ("state_dir", opts.state_dir)):
        if folder is not None:  # the logs and the clients' ledgers: refused before any work
            check_writable_dir(name, folder)
    check_positive("timeout", opts.timeout)
    check_node_timeout("--node-timeout", opts.node_timeout)
    if opts.node_timeout is not None and mode != "deployment":
        raise ValueError("--node-timeout is an option of fedqr flower deploy (and of fedqr "
                         f"flower superlink), got --node-timeout={opts.node_timeout} for "
                         f"{_COMMAND[mode]}")
    if (opts.superlink is not None) != (mode == "remote"):
        raise ValueError("--superlink HOST:PORT is required by fedqr flower run and only "
                         f"used there, got --superlink={opts.superlink!r}")
    if mode != "remote" and (opts.insecure or opts.root_certificates is not None):
        given = (f"--root-certificates={opts.root_certificates}"
                 if opts.root_certificates is not None else "--insecure")
        raise ValueError("--insecure and --root-certificates are options of fedqr flower run "
                         f"(the connection to a SuperLink), got {given} for {_COMMAND[mode]}")


def _remote(address: str, ca: Path | None, *, insecure: bool) -> tuple[str, Path | None]:
    """The SuperLink's address and CA, checked (reachable, certificate verified)."""
    from fedqr.flower.parts import check_file, check_insecure, check_superlink, split_address

    host, port = split_address("--superlink", address)
    check_insecure("--superlink", host, insecure=insecure, force=False)
    if not insecure and ca is None:
        raise ValueError("--root-certificates CA.pem is required (TLS), or --insecure on a "
                         "loopback address")
    ca = None if insecure else check_file("--root-certificates", ca or Path())
    check_superlink(host, port, ca=ca)
    return address, ca


def _execute(cfg: "FlowerRunConfig", *, mode: str, work_dir: Path | None, timeout: float,
             out_dir: Path, remote: tuple[str, Path | None] | None = None,
             node_timeout: float | None = None, choice: "AutoChoice | None" = None,
             names: tuple[str, ...] | None = None) -> None:
    from fedqr.flower.cli_auto import plan_remote
    from fedqr.sim.result import name_clients

    if importlib.util.find_spec("flwr") is None:
        raise _fail("fedqr flower needs Flower: pip install 'fedqr[flower]'", 1)
    from fedqr.flower.auto import PlanNotUseful
    from fedqr.flower.runner import (
        FlowerRunFailed,
        LaunchError,
        Mode,
        RemoteInterrupted,
        run_flower,
        run_remote,
    )

    work = work_dir.resolve() if work_dir else Path(tempfile.mkdtemp(prefix="fedqr-flower-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    planned = None
    try:
        if remote is not None and choice is not None:
            with sigterm_as_interrupt():
                planned = plan_remote(cfg, choice=choice, address=remote[0], ca=remote[1],
                                      work=work, timeout_s=timeout, console=out)
            cfg = planned.cfg
        with sigterm_as_interrupt(), _progress(cfg.rounds) as on_progress:
            err.print(f"waiting for the {cfg.num_clients} clients (up to --connect-timeout "
                      f"{cfg.connect_timeout:g} s), then {cfg.rounds} rounds", highlight=False)
            if remote is not None:
                outcome = run_remote(cfg, address=remote[0], ca=remote[1], work=work,
                                     timeout_s=timeout, on_progress=on_progress)
            else:
                outcome = run_flower(cfg, mode=Mode(mode), work=work, timeout_s=timeout,
                                     on_progress=on_progress, node_timeout=node_timeout)
    except RemoteInterrupted as e:
        raise _fail(f"interrupted: {e}", 130) from None
    except KeyboardInterrupt:
        raise _fail("interrupted: every Flower process started was stopped", 130) from None
    except PlanNotUseful as e:
        raise _fail(f"{e}; nothing was run", 1) from None
    except (FlowerRunFailed, LaunchError) as e:
        hint = f"(logs: {work})" if work_dir else "(--work-dir DIR keeps the Flower logs)"
        raise _fail(f"{e}\n{hint}", 1) from None
    finally:
        if work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    doc = outcome.doc
    doc["wall_time_s"] = time.perf_counter() - started
    name_clients(doc, names)  # the --data file's ids, as fedqr run names them
    if planned is not None:  # as fedqr run --rounds auto records it
        doc["plan"] = {**planned.record(),
                       "achieved_test_loss": doc["summary"]["final_test_loss_mean"]}
    _write(out_dir, doc, outcome.theta)
    note = diverged_note(doc)  # its metrics are null: said once, printed as "-"
    if note is not None:
        err.print(f"[yellow]warning:[/] {escape(note)}")
    final = doc["summary"]
    missing = doc["flower"]["missing_replies"]
    out.print(f"{mode}: {cfg.rounds} rounds, N={cfg.num_clients}, b={cfg.clients_per_round}, "
              f"{len(missing)} replies lost; final test accuracy "
              f"{_metric(final['final_test_accuracy_mean'])}, test loss "
              f"{_metric(final['final_test_loss_mean'])} ({doc['wall_time_s']:.1f} s)")
    out.print(f"wrote {out_dir / 'result.json'}, {out_dir / 'training.png'}, "
              f"{out_dir / 'model.npz'}")


@contextlib.contextmanager
def _progress(total: int) -> Iterator[Callable[[list[dict[str, Any]]], None]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("[bold]Flower[/] {task.description}"), BarColumn(),
                  MofNCompleteColumn(), console=err, disable=not err.is_terminal) as bar:
        task = bar.add_task("rounds (waiting for the clients)", total=total)

        def update(lines: list[dict[str, Any]]) -> None:
            last = lines[-1]
            bar.update(task, completed=len(lines),
                       description=f"acc {last['test_accuracy']:.3f} lost {len(last['lost'])}")
        yield update


def _metric(value: object) -> str:
    """A final metric as printed: four decimals, ``-`` where the run diverged (null)."""
    return "-" if value is None else f"{value:.4f}"


def _write(out_dir: Path, doc: dict[str, Any], theta: Any) -> None:
    """result.json, training.png and model.npz (``fedqr run``'s, one repeat: ``theta`` of shape
    ``(1, *param_shape)``), staged so that no partial output remains."""
    from fedqr._atomic import staged_dir, write_json_atomic
    from fedqr.experiments.plots import plot_training
    from fedqr.sim.result import finite_json, write_model

    with staged_dir(out_dir) as stage:  # inside out_dir: no rename across file systems
        write_model(stage / "model.npz", theta)
        plot_training(doc, stage / "training.png")
        write_json_atomic(stage / "result.json", finite_json(doc))


_ONLY = {"remote": ("superlink", "root_certificates", "insecure", "proxy_dataset", "proxy_data",
                    "proxy_classes"), "deployment": ("node_timeout",)}
"""The options of one mode only: the others refuse them (:func:`_check_mode`, ``auto_choice``)
and leave them out of their ``--help``."""


def _command_of(mode: str) -> type[OnceCommand]:
    """The command class of ``mode``: the options of another mode hidden from its help (still
    parsed, so that giving one gets the refusal that names the command it belongs to)."""
    hidden = {name for m, names in _ONLY.items() if m != mode for name in names}

    class ModeCommand(OnceCommand):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            for param in self.params:
                if param.name in hidden and isinstance(param, click.Option):
                    param.hidden = True

    return ModeCommand


flower_app.command("simulate", cls=_command_of("simulation"), help="FedSGD-DPC in Flower's "
                   "simulation runtime (N virtual SuperNodes).")(command)
flower_app.command("deploy", cls=_command_of("deployment"), help="FedSGD-DPC on a SuperLink "
                   "and N SuperNodes started on 127.0.0.1.")(command)
flower_app.command("run", cls=_command_of("remote"), help="Submit a run to a SuperLink whose "
                   "SuperNodes hold their own data and budgets.")(command)
flower_app.command("certs", cls=OnceCommand)(cli_parties.certs)
flower_app.command("superlink", cls=OnceCommand)(cli_parties.superlink)
flower_app.command("supernode", cls=OnceCommand)(cli_parties.supernode)
flower_app.command("register", cls=OnceCommand)(cli_parties.register)
