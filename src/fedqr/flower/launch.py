"""Flower processes on 127.0.0.1: a SuperLink, SuperNodes, ``flwr run``; all stopped after.

:class:`LocalFederation` starts every process in its own session (process group) under a
guard (:mod:`fedqr.flower.guard`, with a parent-death signal), with its own ``FLWR_HOME`` and
log file, on free loopback ports, insecure (loopback only) or with TLS and node
authentication. :meth:`LocalFederation.close` stops each process it started together with every
descendant (Flower's SuperExec and app processes), first with SIGTERM, then SIGKILL
(:mod:`fedqr.flower.procs`).
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import tomli_w

from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.link_main import NODE_TIMEOUT_ENV
from fedqr.flower.parts import (
    LinkTls,
    NodeConfigValue,
    cli_config,
    plain_text,
    superlink_args,
    supernode_args,
)
from fedqr.flower.procs import (
    _descendants,
    app_processes,
    die_with_parent,
    free_port,
    stop_process,
)

SUPERLINK_START_TIMEOUT_S = 60.0


class LaunchError(RuntimeError):
    """A Flower process did not start, or ``flwr run`` failed."""


def write_app(app_dir: Path, *, cfg: FlowerRunConfig) -> Path:
    """A Flower app folder: ``pyproject.toml`` naming fedqr's apps, with ``cfg`` as run config."""
    app_dir.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "build-system": {"requires": ["setuptools>=68"],
                         "build-backend": "setuptools.build_meta"},
        "project": {"name": "fedqr-flower", "version": "1.0.0",
                    "description": "FedSGD-DPC (fedqr) on Flower", "license": "Apache-2.0",
                    "dependencies": ["fedqr[flower]"]},
        "tool": {"flwr": {"app": {
            "publisher": "fedqr",
            "components": {"serverapp": "fedqr.flower.server_app:app",
                           "clientapp": "fedqr.flower.client_app:app"},
            "config": cfg.to_run_config(),
        }}},
    }
    path = app_dir / "pyproject.toml"
    path.write_text(tomli_w.dumps(doc), encoding="utf-8")
    return path


class LocalFederation:
    """A SuperLink (and SuperNodes) on 127.0.0.1 for one run; use as a context manager."""

    def __init__(self, work: Path, *, simulation: bool, tls: LinkTls | None = None,
                 node_timeout: float | None = None) -> None:
        self.work = work
        self.simulation = simulation
        self.tls = tls
        self.remote: tuple[str, Path | None] | None = None  # (HOST:PORT, CA) of another link
        self.port = 0
        self.superlink: subprocess.Popen[bytes] | None = None
        self.nodes: dict[int, subprocess.Popen[bytes]] = {}
        self._procs: list[subprocess.Popen[bytes]] = []
        bindir = str(Path(sys.executable).parent)  # flower-* and flwr live beside python
        self.env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
                    "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
                    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
                    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.5", "PYTHONUNBUFFERED": "1",
                    "FEDQR_GUARD_WATCH_PARENT": "1"}
        if node_timeout is not None:  # the SuperLink's node expiry (fedqr.flower.link_main)
            self.env[NODE_TIMEOUT_ENV] = str(node_timeout)
        self.bindir = Path(bindir)

    def __enter__(self) -> LocalFederation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, name: str, args: list[str], home: Path) -> subprocess.Popen[bytes]:
        home.mkdir(parents=True, exist_ok=True)
        exe = self.bindir / args[0]
        # the guard takes the process group (Flower's SuperExec and app processes) down with
        # it when this process dies, by any signal: a parent-death signal, or its own polling
        cmd = [sys.executable, "-m", "fedqr.flower.guard",
               str(exe) if exe.exists() else args[0], *args[1:]]
        parent = os.getpid()
        with open(self.work / f"{name}.log", "ab") as logf:
            proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    env={**self.env, "FLWR_HOME": str(home)}, cwd=self.work,
                                    preexec_fn=lambda: die_with_parent(parent, signal.SIGTERM))
        self._procs.append(proc)
        return proc

    def log_tail(self, name: str, lines: int = 15) -> str:
        """The last lines of a process's log."""
        path = self.work / f"{name}.log"
        if not path.is_file():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def start_superlink(self, attempts: int = 3) -> int:
        """Start the SuperLink on a free port and wait until it answers; returns the port."""
        for _ in range(attempts):
            port = free_port()
            args = superlink_args(host="127.0.0.1", port=port, tls=self.tls,
                                  simulation=self.simulation)
            proc = self._spawn("superlink", args, self.work / "superlink-home")
            deadline = time.monotonic() + SUPERLINK_START_TIMEOUT_S
            while proc.poll() is None and time.monotonic() < deadline:
                if _healthy(port, ca=self.tls.ca if self.tls else None):
                    self.superlink, self.port = proc, port
                    return port
                time.sleep(0.1)
            stop_process(proc)
        raise LaunchError(f"the SuperLink did not start on 127.0.0.1 ({attempts} attempts); "
                          f"its log:\n{self.log_tail('superlink')}")

    def start_supernode(self, partition: int, *, num_partitions: int, state_dir: Path) -> None:
        """Start (or restart) the SuperNode holding ``partition``."""
        self.start_node(partition, {"partition-id": partition, "num-partitions": num_partitions,
                                    "state-dir": str(state_dir)})

    def start_node(self, index: int, node_config: dict[str, NodeConfigValue], *,
                   auth_key: Path | None = None) -> None:
        """Start (or restart) SuperNode ``index`` with ``node_config``."""
        args = supernode_args(superlink=f"127.0.0.1:{self.port}", runtime_port=free_port(),
                              node_config=node_config,
                              root_cert=self.tls.ca if self.tls else None, auth_key=auth_key)
        self.nodes[index] = self._spawn(f"supernode-{index}", args,
                                        self.work / f"supernode-{index}-home")

    def _cli_home(self) -> Path:
        home = self.work / "cli-home"
        home.mkdir(parents=True, exist_ok=True)
        address, ca = self.remote or (f"127.0.0.1:{self.port}", self.tls.ca if self.tls else None)
        (home / "config.toml").write_text(tomli_w.dumps(cli_config(address, ca=ca)))
        return home

    def register(self, public_key: Path) -> None:
        """Admit the SuperNode with ``public_key`` (``flwr supernode register``)."""
        done = subprocess.run([str(self.bindir / "flwr"), "supernode", "register",
                               str(public_key), "fedqr"], capture_output=True, timeout=120,
                              cwd=self.work, env={**self.env, "FLWR_HOME": str(self._cli_home())},
                              check=False)
        if done.returncode != 0:
            raise LaunchError(f"flwr supernode register {public_key} failed: " + plain_text(
                f"{done.stdout.decode(errors='replace')} {done.stderr.decode(errors='replace')}"))

    def kill_supernode(self, partition: int) -> None:
        """SIGKILL a SuperNode and its app processes at once (a crash, for fault tests)."""
        stop_process(self.nodes[partition], kill=True)

    def flwr_run(self, app_dir: Path, *, num_supernodes: int | None = None,
                 timeout_s: float = 120.0) -> str:
        """``flwr run`` the app on this SuperLink; returns the run id."""
        home = self._cli_home()
        args = [str(self.bindir / "flwr"), "run", str(app_dir), "fedqr", "--format", "json"]
        if num_supernodes is not None:
            args += ["--federation-config", f"num-supernodes={num_supernodes}"]
        try:
            parent = os.getpid()
            done = subprocess.run(args, capture_output=True, timeout=timeout_s, cwd=self.work,
                                  preexec_fn=lambda: die_with_parent(parent),
                                  env={**self.env, "FLWR_HOME": str(home)}, check=False)
        except subprocess.TimeoutExpired:
            raise LaunchError(f"flwr run did not answer within {timeout_s} s") from None
        text = done.stdout.decode(errors="replace")
        try:
            doc = json.loads(text[text.index("{"):])
        except ValueError:
            doc = None
        run_id = doc.get("run-id") if isinstance(doc, dict) else None
        if done.returncode != 0 or not run_id:
            said = (doc.get("error-message") if isinstance(doc, dict) else None) or text.strip()
            hint = (" (check --superlink, and --root-certificates for a TLS SuperLink or "
                    "--insecure for one without TLS: as the SuperLink was started)"
                    if "unavailable" in str(said).lower() else "")
            raise LaunchError("flwr run failed: " + plain_text(
                f"{said} {done.stderr.decode(errors='replace')}") + hint)
        return str(run_id)

    def flwr_stop(self, run_id: str, *, timeout_s: float = 30.0) -> bool:
        """``flwr stop`` the run on this federation's SuperLink (or the remote one): whether
        the SuperLink confirmed it."""
        args = [str(self.bindir / "flwr"), "stop", run_id, "fedqr"]
        try:
            done = subprocess.run(args, capture_output=True, timeout=timeout_s, cwd=self.work,
                                  env={**self.env, "FLWR_HOME": str(self._cli_home())},
                                  check=False)
        except (subprocess.TimeoutExpired, OSError):
            return False
        return done.returncode == 0

    def run_log(self, run_id: str, *, lines: int = 40, timeout_s: float = 30.0) -> str:
        """The last ``lines`` of the run's own log as the SuperLink keeps it (``flwr log
        --show``: the ServerApp's output and, in simulation, the runtime's, Ray's start
        included), which no process log here holds; a line saying why where it cannot be had."""
        if not run_id or self.superlink is None or self.superlink.poll() is not None:
            return "(no run log: the SuperLink is not running)"
        args = [str(self.bindir / "flwr"), "log", run_id, "fedqr", "--show"]
        try:
            done = subprocess.run(args, capture_output=True, timeout=timeout_s, cwd=self.work,
                                  env={**self.env, "FLWR_HOME": str(self._cli_home())},
                                  check=False)
        except subprocess.TimeoutExpired:
            return f"(flwr log gave nothing within {timeout_s:g} s)"
        text = (done.stdout + done.stderr).decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """Stop every process this federation started (nodes first), with descendants."""
        for proc in reversed(self._procs):
            if proc.poll() is None or _descendants(proc.pid):
                stop_process(proc)
        self._procs.clear()


def _healthy(port: int, *, ca: Path | None = None) -> bool:
    scheme = "https" if ca is not None else "http"
    context = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    try:
        with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/health", timeout=1.0,
                                    context=context) as res:
            return bool(res.status == 200)
    except (urllib.error.URLError, OSError):
        return False


__all__ = ["LaunchError", "LocalFederation", "app_processes", "die_with_parent", "free_port",
           "stop_process", "write_app"]
