"""``fedqr flower certs | superlink | supernode``: each party of a federation on its machine.

Every check runs before anything starts or is written; bad input exits with code 2 naming
the option or file. ``superlink`` and ``supernode`` then replace this process with the
party's own process (a guard around :mod:`fedqr.flower.link_main`, Flower's SuperLink;
:mod:`fedqr.flower.node_main`, Flower's SuperNode).
"""

# Fast --help (0.5 s, bench/cli_startup.py): only light modules at the top (the commands
# import torch, dp-accounting and flwr when they run), and no
# "from __future__ import annotations" (typer reads the options from the annotations at
# every start; strings would cost ~1,000 compiles and evals, a tenth of the budget).
import math
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from fedqr._cli_messages import name_options

err = Console(stderr=True)
out = Console()
BINDIR = Path(sys.executable).parent


NodeDataOpt = Annotated[Path, typer.Option(
    help="This client's rows: .npz (x [n, ...], y [n]; client, x_test, y_test may be there, "
         "unused), .csv or .parquet (a label column and the features; a client column, if "
         "any, must name one client).")]
NodeModelOpt = Annotated[str | None, typer.Option(
    help="The model this node trains: logreg, linear, mlp, cnn or FILE.py:FUNCTION (this "
         "node's own file; a node never loads code the server names). Default: the run's.")]
NodeHiddenOpt = Annotated[str | None, typer.Option(
    help="mlp: hidden widths, comma-separated (default: the run's).")]
NodeStandardizeOpt = Annotated[bool, typer.Option(
    "--standardize/--no-standardize",
    help="Standardise every feature by this file's own rows' mean and std (local statistics: "
         "nothing leaves the node); default: the features as given.")]


def _fail(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(name_options(message))}")
    return typer.Exit(2)


def certs(
    directory: Annotated[Path, typer.Argument(help="Empty folder for the files.")],
    host: Annotated[list[str] | None, typer.Option(
        help="SuperLink host name or address (repeat); the certificate also covers localhost "
             "and 127.0.0.1 (the SuperLink's own processes connect over them).")] = None,
    nodes: Annotated[int, typer.Option(help="Number of SuperNode key pairs.")] = 3,
) -> None:
    """Make a CA, the SuperLink's TLS certificate and one key pair per SuperNode."""
    from fedqr.flower.certs import make_certs

    try:
        written = make_certs(directory, hosts=host or [], num_nodes=nodes)
    except ValueError as e:
        raise _fail(str(e)) from None
    out.print(f"wrote {len(written)} files to {directory}: ca.pem (to every SuperNode), "
              "superlink.pem/.key (SuperLink), node-<i> (SuperNode i, secret), node-<i>.pub "
              "(register with the SuperLink)")


def superlink(
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: all).")]
        = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port of the SuperLink (all APIs).")] = 9093,
    certs_dir: Annotated[Path | None, typer.Option(
        "--certs", help="Folder of `fedqr flower certs` (ca.pem, superlink.pem/.key).")] = None,
    insecure: Annotated[bool, typer.Option(help="No TLS, no node authentication.")] = False,
    force_insecure: Annotated[bool, typer.Option(
        help="Allow --insecure on a non-loopback address.")] = False,
    state_dir: Annotated[Path, typer.Option(help="The SuperLink's Flower home.")]
        = Path("superlink-state"),
    node_timeout: Annotated[float | None, typer.Option(
        help="A SuperNode silent this many s (5..3600) is gone: its replies count as lost. "
             "Default: Flower's, 2 heartbeat intervals of the node (20 s at --heartbeat 10).")]
        = None,
) -> None:
    """Run the SuperLink (the server's side): TLS and node authentication unless --insecure."""
    from fedqr.flower.link_main import NODE_TIMEOUT_ENV, check_node_timeout
    from fedqr.flower.parts import (
        LinkTls,
        check_file,
        check_insecure,
        check_port_free,
        superlink_args,
    )

    try:
        if not 0 < port < 65536:
            raise ValueError(f"--port must be in 1..65535, got --port={port}")
        check_node_timeout("--node-timeout", node_timeout)
        check_insecure("--host", host, insecure=insecure, force=force_insecure)
        tls = None
        if not insecure:
            if certs_dir is None:
                raise ValueError("--certs DIR is required (fedqr flower certs DIR makes it), "
                                 "or --insecure on a loopback address")
            tls = LinkTls(certfile=check_file("--certs", certs_dir / "superlink.pem"),
                          keyfile=check_file("--certs", certs_dir / "superlink.key"),
                          ca=check_file("--certs", certs_dir / "ca.pem"))
        check_port_free("--port", host, port)
        state_dir.mkdir(parents=True, exist_ok=True)
    except (ValueError, OSError) as e:
        raise _fail(str(e)) from None
    args = superlink_args(host=host, port=port, tls=tls)
    if node_timeout is not None:
        os.environ[NODE_TIMEOUT_ENV] = str(node_timeout)
    os.environ["FLWR_HOME"] = str(state_dir.resolve())
    os.environ["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = "0.5"
    os.environ["FEDQR_GUARD_WATCH_PARENT"] = "0"  # a server outlives its shell (nohup)
    os.environ["PATH"] = str(BINDIR) + os.pathsep + os.environ.get("PATH", "")  # flwr-* tools
    os.execv(sys.executable, [sys.executable, "-m", "fedqr.flower.guard", *args])


def supernode(
    superlink_address: Annotated[str, typer.Option(
        "--superlink", help="The SuperLink, HOST:PORT.")],
    data: NodeDataOpt,
    eps: Annotated[float, typer.Option(help="This client's privacy budget epsilon (> 0).")],
    state_dir: Annotated[Path, typer.Option(help="This client's ledger and secrets.")],
    delta: Annotated[float, typer.Option(help="This client's delta (gaussian).")] = 1e-5,
    root_certificates: Annotated[Path | None, typer.Option(
        help="ca.pem of the SuperLink's CA (TLS).")] = None,
    auth_key: Annotated[Path | None, typer.Option(
        help="This SuperNode's private key (node-<i> of fedqr flower certs).")] = None,
    client_id: Annotated[int | None, typer.Option(
        help="This client's index 0..N-1 (default: the server assigns one).")] = None,
    noise_seed: Annotated[int | None, typer.Option(
        help="Fix the noise seed (reproduction only: the seed reveals the noise).")] = None,
    heartbeat: Annotated[float, typer.Option(
        help="Heartbeat interval s (10..1800); the SuperLink drops the node after 2.")] = 10.0,
    insecure: Annotated[bool, typer.Option(help="No TLS (loopback only).")] = False,
    force_insecure: Annotated[bool, typer.Option(
        help="Allow --insecure to a non-loopback SuperLink.")] = False,
    model: NodeModelOpt = None,
    hidden: NodeHiddenOpt = None,
    client_column: Annotated[str, typer.Option(help="csv/parquet: client column.")] = "client",
    label_column: Annotated[str, typer.Option(help="csv/parquet: label column.")] = "label",
    standardize: NodeStandardizeOpt = False,
) -> None:
    """Run one client: its own data, budget and ledger, on its own machine."""
    from fedqr.flower.parts import (
        check_file,
        check_insecure,
        check_node_key,
        check_superlink,
        split_address,
        supernode_args,
    )
    from fedqr.flower.state_owner import bind_state

    try:
        host, port = split_address("--superlink", superlink_address)
        _check_node_numbers(eps=eps, delta=delta, heartbeat=heartbeat, client_id=client_id)
        check_insecure("--superlink", host, insecure=insecure, force=force_insecure)
        if not insecure and root_certificates is None:
            raise ValueError("--root-certificates CA.pem is required (TLS), or --insecure on "
                             "a loopback address")
        ca = None if insecure else check_file("--root-certificates", root_certificates
                                              or Path())
        if not insecure and auth_key is None:
            raise ValueError("--auth-key KEY is required with TLS: the SuperLink admits "
                             "registered SuperNodes only (this client's private key, node-<i> "
                             "of fedqr flower certs), or --insecure on a loopback address")
        key = check_node_key("--auth-key", auth_key, private=True) if auth_key else None
        data = check_file("--data", data)
        model, owner = _check_node_model(data, model=model, hidden=hidden,
                                         standardize=standardize, client_column=client_column,
                                         label_column=label_column, client_id=client_id)
        check_superlink(host, port, ca=ca)
        state_dir.mkdir(parents=True, exist_ok=True)
        bind_state(state_dir, data=data, owner=owner)
    except (ValueError, OSError) as e:
        raise _fail(str(e)) from None
    config: dict[str, str | int | float] = {
        "data-file": str(data), "eps": eps, "delta": delta,
        "state-dir": str(state_dir.resolve()), "client-id": -1 if client_id is None else client_id,
        "noise-seed": -1 if noise_seed is None else noise_seed, "standardize": int(standardize),
        "client-column": client_column, "label-column": label_column}
    config.update({k: v for k, v in (("model", model), ("hidden", hidden)) if v})
    from fedqr.flower.procs import free_port

    runtime_port = free_port()  # the node's own Runtime API, on loopback only
    args = supernode_args(superlink=superlink_address, runtime_port=runtime_port,
                          node_config=config, root_cert=ca, auth_key=key)
    os.environ.setdefault("FLWR_HOME", str((state_dir / "flwr-home").resolve()))
    os.environ["FEDQR_FLOWER_HEARTBEAT_S"] = str(heartbeat)
    os.execv(args[0], args)


def _check_node_numbers(*, eps: float, delta: float, heartbeat: float,
                        client_id: int | None) -> None:
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"--eps must be > 0 and finite, got --eps={eps}")
    if not 0 <= delta < 1:
        raise ValueError(f"--delta must be in [0, 1), got --delta={delta}")
    if not 10 <= heartbeat <= 1800:
        raise ValueError(f"--heartbeat must be in [10, 1800] s, got --heartbeat={heartbeat}")
    if client_id is not None and client_id < 0:
        raise ValueError(f"--client-id must be >= 0, got --client-id={client_id}")


def _check_node_model(data: Path, *, model: str | None, hidden: str | None, standardize: bool,
                      client_column: str, label_column: str, client_id: int | None
                      ) -> tuple[str | None, str]:
    """Read and check the node's rows (a file whose rows name another client than
    ``--client-id`` is refused: that client's rows would be charged to two budgets); check
    its model on them; the model with a file's path made absolute, and whose rows these are
    (:func:`data_owner`)."""
    from fedqr.flower.node_data import read_node_rows
    from fedqr.flower.run_values import parse_widths
    from fedqr.flower.state_owner import data_owner

    rows = read_node_rows(data, client_column=client_column, label_column=label_column,
                          standardize=standardize)
    if (client_id is not None and rows.client is not None
            and rows.client.lstrip("-").isdigit() and int(rows.client) != client_id):
        raise ValueError(f"--data: {data} holds the rows of client {rows.client}, but "
                         f"--client-id is {client_id}: a SuperNode serves its own client's "
                         f"rows (another client's file would charge those rows to two "
                         f"budgets); give this client's file, or --client-id {rows.client}")
    owner = data_owner(data, client=rows.client)
    if hidden is not None:
        parse_widths(hidden)
    if model is None:
        return None, owner
    from fedqr.flower.client_data import run_kernel

    path, sep, func = model.rpartition(":")
    if sep and path.endswith(".py"):
        model = f"{Path(path).resolve()}:{func}"
    try:
        run_kernel(model, input_shape=rows.input_shape,
                   num_classes=max(int(rows.y.max()) + 1, 2),
                   hidden=parse_widths(hidden or "64"))
    except ValueError as e:
        raise ValueError(f"--model: {e}") from None
    return model, owner


def register(
    public_key: Annotated[Path, typer.Argument(help="node-<i>.pub of fedqr flower certs.")],
    superlink_address: Annotated[str, typer.Option(
        "--superlink", help="The SuperLink, HOST:PORT.")] = "127.0.0.1:9093",
    root_certificates: Annotated[Path | None, typer.Option(
        help="ca.pem of the SuperLink's CA (TLS).")] = None,
) -> None:
    """Admit a SuperNode's public key to the SuperLink (``flwr supernode register``)."""
    import subprocess
    import tempfile

    import tomli_w

    from fedqr.flower.parts import (
        check_file,
        check_node_key,
        check_superlink,
        cli_config,
        plain_text,
        split_address,
    )

    try:
        key = check_node_key("PUBLIC_KEY", public_key, private=False)
        host, port = split_address("--superlink", superlink_address)
        ca = None if root_certificates is None else check_file("--root-certificates",
                                                                root_certificates)
        check_superlink(host, port, ca=ca)
    except ValueError as e:
        raise _fail(str(e)) from None
    with tempfile.TemporaryDirectory(prefix="fedqr-flwr-") as home:
        Path(home, "config.toml").write_text(tomli_w.dumps(cli_config(superlink_address,
                                                                      ca=ca)))
        done = subprocess.run([str(BINDIR / "flwr"), "supernode", "register", str(key),
                               "fedqr"], env={**os.environ, "FLWR_HOME": home},
                              capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = plain_text(f"{done.stdout} {done.stderr}")
        err.print("[bold red]error:[/] flwr supernode register failed: " + escape(said))
        raise typer.Exit(1)
    out.print(f"registered {key.name}: {done.stdout.strip()}")


__all__ = ["certs", "register", "superlink", "supernode"]
