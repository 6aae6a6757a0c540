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
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from fedqr._atomic import check_writable_dir
from fedqr._enums import Accountant, Aggregation, DatasetName, Mechanism, PartitionKind
from fedqr._validate import check_positive
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


def _fail(message: str, code: int) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the run like Ctrl-C does: every started process is stopped."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _command(mode: str, summary: str) -> Callable[..., None]:
    def command(
        dataset: Annotated[DatasetName, typer.Option(help="Data set.")] = DatasetName.MNIST,
        data_dir: Annotated[Path | None, typer.Option(help="Folder with the data files.")]
            = None,
        fraction: Annotated[float, typer.Option(help="Share of the training set (0, 1].")]
            = 1.0,
        partition: Annotated[PartitionKind, typer.Option(help="How data are split.")]
            = PartitionKind.TWO_DIGITS,
        alpha: Annotated[float, typer.Option(help="Dirichlet concentration (> 0).")] = 0.5,
        num_clients: Annotated[int, typer.Option(help="N, the number of clients.")] = 10,
        clients_per_round: Annotated[str, typer.Option(
            help="b, replies per round (1..N); run: or 'auto' (planned, see --proxy-dataset).")]
            = "10",
        rounds: Annotated[str, typer.Option(
            help="T, the number of rounds; run: or 'auto' (planned).")] = "10",
        mechanism: Annotated[Mechanism, typer.Option(help="Client-side DP mechanism.")]
            = Mechanism.GAUSSIAN,
        eps: Annotated[str, typer.Option(
            help="Epsilon per client: one value or N (default 1; run: each client's own).")]
            = "",
        delta: Annotated[str, typer.Option(help="Delta per client (gaussian): one or N.")]
            = "1e-5",
        clip: Annotated[float | None, typer.Option(
            help="Per-sample clip (l1 laplace, l2 gaussian). Default: the paper's, laplace "
                 "300 (femnist 200), gaussian 10; none without noise.")] = None,
        sample_rate: Annotated[str | None, typer.Option(
            help="q, Poisson sampling rate (gaussian default 0.01; laplace 1); run: or "
                 "'auto'.")] = None,
        accountant: Annotated[Accountant, typer.Option(help="rdp or pld (gaussian).")]
            = Accountant.RDP,
        lr: Annotated[float, typer.Option(help="Initial learning rate eta0.")] = 0.05,
        lr_decay: Annotated[float, typer.Option(help="eta_t = lr / (1 + lr_decay t).")] = 0.01,
        weight_decay: Annotated[float, typer.Option(help="L2 regularisation.")] = 0.01,
        aggregation: Annotated[Aggregation, typer.Option(help="Server aggregation rule.")]
            = Aggregation.PAPER,
        seed: Annotated[int, typer.Option(help="Seed: partition, batches, noise.")] = 0,
        round_timeout: Annotated[float, typer.Option(
            help="Seconds to wait for a round's replies; later ones are lost.")] = 120.0,
        connect_timeout: Annotated[float, typer.Option(
            help="Seconds to wait for all N clients to connect.")] = 120.0,
        min_replies: Annotated[int, typer.Option(
            help="Stop when a round gets fewer replies (1..b).")] = 1,
        state_dir: Annotated[Path | None, typer.Option(
            help="Clients' ledgers (client-<i>/state.json); default: a fresh folder.")] = None,
        work_dir: Annotated[Path | None, typer.Option(
            help="Keep app, logs and state here (default: a temporary folder, removed).")]
            = None,
        timeout: Annotated[float, typer.Option(help="Seconds for the whole run.")] = 3600.0,
        out_dir: Annotated[Path, typer.Option("--out", help="Output folder.")]
            = Path("runs/flower"),
        superlink: Annotated[str | None, typer.Option(
            help="run: the SuperLink, HOST:PORT (run this on the server's machine).")] = None,
        root_certificates: Annotated[Path | None, typer.Option(
            help="run: ca.pem of the SuperLink's CA (TLS).")] = None,
        insecure: Annotated[bool, typer.Option(help="run: no TLS (loopback only).")] = False,
        proxy_dataset: Annotated[DatasetName | None, typer.Option(
            help="run with auto: the public data set (mnist, digits) the server plans on, "
                 "with the sizes and budgets the clients report.")] = None,
        node_timeout: Annotated[float | None, typer.Option(
            help="deploy: a SuperNode silent this many s (5..3600) is gone and its reply lost "
                 "(default: Flower's, 20 s). run: set it on fedqr flower superlink.")] = None,
    ) -> None:
        from fedqr.data import DataNotFoundError
        from fedqr.data.presets import default_clip
        from fedqr.flower.cli_auto import auto_choice, check_plannable, parse_schedule
        from fedqr.flower.config import FlowerRunConfig, parse_floats
        from fedqr.flower.link_main import check_node_timeout
        from fedqr.privacy import mechanism_for

        remote = None
        try:
            check_writable_dir("out", out_dir)
            check_positive("timeout", timeout)
            check_node_timeout("--node-timeout", node_timeout)
            if node_timeout is not None and mode != "deployment":
                raise ValueError("--node-timeout is an option of fedqr flower deploy (and of "
                                 "fedqr flower superlink), got --node-timeout="
                                 f"{node_timeout} for {_COMMAND[mode]}")
            if (superlink is not None) != (mode == "remote"):
                raise ValueError("--superlink HOST:PORT is required by fedqr flower run and "
                                 f"only used there, got --superlink={superlink!r}")
            schedule = parse_schedule(
                rounds=rounds, clients_per_round=clients_per_round, sample_rate=sample_rate,
                default_rate=mechanism_for(mechanism).default_sample_rate)
            choice = auto_choice(schedule, command=_COMMAND[mode], remote=mode == "remote",
                                 proxy_dataset=proxy_dataset)
            if superlink is not None:
                remote = _remote(superlink, root_certificates, insecure=insecure)
            q = schedule.sample_rate or mechanism_for(mechanism).default_sample_rate
            cfg = FlowerRunConfig(  # auto: T = 1, b = N until planned
                num_clients=num_clients, clients_per_round=schedule.clients_per_round or
                num_clients, rounds=schedule.rounds or 1,
                dataset=dataset, data_dir=str(data_dir.resolve()) if data_dir else "",
                fraction=fraction, partition=partition, alpha=alpha, mechanism=mechanism,
                eps=parse_floats("eps", eps or "1.0"), delta=parse_floats("delta", delta),
                clip=clip if clip is not None else default_clip(dataset, mechanism), sample_rate=q,
                accountant=accountant, lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                aggregation=aggregation, seed=seed, round_timeout=round_timeout,
                connect_timeout=connect_timeout, min_replies=min_replies,
                state_dir=str(state_dir.resolve()) if state_dir else "",
                client_data=remote is not None, client_budgets=remote is not None and not eps)
            if choice is not None:
                check_plannable(cfg, choice)
        except DataNotFoundError as e:
            raise _fail(str(e), 1) from None
        except ValueError as e:
            raise _fail(str(e), 2) from None
        _execute(cfg, mode=mode, work_dir=work_dir, timeout=timeout, out_dir=out_dir,
                 remote=remote, node_timeout=node_timeout, choice=choice)

    command.__doc__ = summary
    return command


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
             node_timeout: float | None = None, choice: "AutoChoice | None" = None) -> None:
    from fedqr.data import DataNotFoundError
    from fedqr.flower.cli_auto import plan_remote

    if importlib.util.find_spec("flwr") is None:
        raise _fail("fedqr flower needs Flower: pip install 'fedqr[flower]'", 1)
    try:
        if remote is not None:
            cfg.data_spec().load()  # the server's evaluation data
        else:
            cfg.load_data()  # fails here, before any process starts
    except DataNotFoundError as e:
        raise _fail(str(e), 1) from None
    except ValueError as e:
        raise _fail(str(e), 2) from None
    from fedqr.flower.auto import PlanNotUseful
    from fedqr.flower.runner import FlowerRunFailed, LaunchError, Mode, run_flower, run_remote

    work = work_dir.resolve() if work_dir else Path(tempfile.mkdtemp(prefix="fedqr-flower-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    planned = None
    try:
        if remote is not None and choice is not None:
            with _sigterm_as_interrupt():
                planned = plan_remote(cfg, choice=choice, address=remote[0], ca=remote[1],
                                      work=work, timeout_s=timeout, console=out)
            cfg = planned.cfg
        with _sigterm_as_interrupt(), _progress(cfg.rounds) as on_progress:
            if remote is not None:
                outcome = run_remote(cfg, address=remote[0], ca=remote[1], work=work,
                                     timeout_s=timeout, on_progress=on_progress)
            else:
                outcome = run_flower(cfg, mode=Mode(mode), work=work, timeout_s=timeout,
                                     on_progress=on_progress, node_timeout=node_timeout)
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
    if planned is not None:  # as fedqr run --rounds auto records it
        doc["plan"] = {**planned.record(),
                       "achieved_test_loss": doc["summary"]["final_test_loss_mean"]}
    _write(out_dir, doc, outcome.theta)
    final = doc["summary"]
    missing = doc["flower"]["missing_replies"]
    out.print(f"{mode}: {cfg.rounds} rounds, N={cfg.num_clients}, b={cfg.clients_per_round}, "
              f"{len(missing)} replies lost; final test accuracy "
              f"{final['final_test_accuracy_mean']:.4f}, test loss "
              f"{final['final_test_loss_mean']:.4f} ({doc['wall_time_s']:.1f} s)")
    out.print(f"wrote {out_dir / 'result.json'}, {out_dir / 'training.png'}, "
              f"{out_dir / 'model.npz'}")


@contextlib.contextmanager
def _progress(total: int) -> Iterator[Callable[[list[dict[str, Any]]], None]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("[bold]Flower[/] {task.description}"), BarColumn(),
                  MofNCompleteColumn(), console=err, disable=not err.is_terminal) as bar:
        task = bar.add_task("rounds", total=total)

        def update(lines: list[dict[str, Any]]) -> None:
            last = lines[-1]
            bar.update(task, completed=len(lines),
                       description=f"acc {last['test_accuracy']:.3f} lost {len(last['lost'])}")
        yield update


def _write(out_dir: Path, doc: dict[str, Any], theta: Any) -> None:
    """result.json, training.png and model.npz, staged so that no partial output remains."""
    import numpy as np

    from fedqr._atomic import staged_dir, write_file_atomic, write_json_atomic
    from fedqr.experiments.plots import plot_training
    from fedqr.sim.result import finite_json

    with staged_dir(out_dir) as stage:  # inside out_dir: no rename across file systems
        write_file_atomic(stage / "model.npz", lambda p: np.savez(p, theta=theta))
        plot_training(doc, stage / "training.png")
        write_json_atomic(stage / "result.json", finite_json(doc))


flower_app.command("simulate")(_command(
    "simulation", "FedSGD-DPC in Flower's simulation runtime (N virtual SuperNodes)."))
flower_app.command("deploy")(_command(
    "deployment", "FedSGD-DPC on a SuperLink and N SuperNodes started on 127.0.0.1."))
flower_app.command("run")(_command(
    "remote", "Submit a run to a SuperLink whose SuperNodes hold their own data and budgets."))
flower_app.command("certs")(cli_parties.certs)
flower_app.command("superlink")(cli_parties.superlink)
flower_app.command("supernode")(cli_parties.supernode)
flower_app.command("register")(cli_parties.register)
