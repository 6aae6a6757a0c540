"""One Flower run from start to result: simulation or a local deployment on 127.0.0.1.

``simulation``: a SuperLink with Flower's simulation runtime, N virtual SuperNodes.
``deployment``: a SuperLink and N real SuperNode processes, each with its own state folder
(its ledger) and its own partition id in its node config.
Both start the app with ``flwr run`` and wait for the ServerApp's ``result.json`` (or
``error.json``); every process started is stopped on the way out, also on errors and Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.launch import LaunchError, LocalFederation, app_processes, write_app
from fedqr.flower.results import ERROR, MODEL, REPORTS, RESULT, read_progress

ProgressCallback = Callable[[list[dict[str, Any]]], None]
PROBE_EVERY_S = 10.0  # a remote run: how often the SuperLink's port is tried
PROBE_FAILURES = 3  # ... and after how many refused tries in a row the run is given up
APP_GONE_GRACE_S = 10.0  # after the ServerApp process ended, how long to wait for its files


class Mode(StrEnum):
    """Which Flower runtime runs the clients."""

    SIMULATION = "simulation"
    DEPLOYMENT = "deployment"


class FlowerRunFailed(RuntimeError):
    """The run ended without a result; the message says why."""


class RemoteInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) while a run went on on another SuperLink: ``flwr stop`` was sent;
    the message says whether the SuperLink confirmed it (else the run may still spend the
    clients' budgets)."""


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """The ``result.json`` document and the final model ``(k, p)``."""

    doc: dict[str, Any]
    theta: np.ndarray


class FlowerRunner:
    """Start, watch and stop one run; a context manager (``close`` stops all processes).

    Parameters
    ----------
    cfg:
        The run; its ``out_dir`` and (when empty) ``state_dir`` are set under ``work``.
    mode:
        ``simulation`` or ``deployment``.
    work:
        An empty folder for the app, the logs, the clients' state and the server's output.
    node_timeout:
        Seconds after which the SuperLink declares a silent SuperNode gone (``None``:
        Flower's two heartbeat intervals); see :mod:`fedqr.flower.link_main`.
    """

    def __init__(self, cfg: FlowerRunConfig, *, mode: Mode, work: Path,
                 node_timeout: float | None = None) -> None:
        self.mode = mode
        self.work = work
        self.exchange = work / "server-out"
        self.cfg = dataclasses.replace(cfg, out_dir=str(self.exchange),
                                       state_dir=cfg.state_dir or str(work / "state"))
        self.fed = LocalFederation(work, simulation=mode is Mode.SIMULATION,
                                   node_timeout=node_timeout)
        self.run_id = ""
        self._app_seen = False
        self._app_gone_at: float | None = None

    def __enter__(self) -> FlowerRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def node_state_dir(self, partition: int) -> Path:
        """Where client ``partition`` keeps its ledger."""
        return Path(self.cfg.state_dir) / f"client-{partition}"

    def start(self) -> None:
        """SuperLink, SuperNodes (deployment), then ``flwr run``."""
        self.exchange.mkdir(parents=True, exist_ok=True)
        app_dir = self.work / "app"
        write_app(app_dir, cfg=self.cfg)
        self.fed.start_superlink()
        n = self.cfg.num_clients
        if self.mode is Mode.DEPLOYMENT:
            for i in range(n):
                self.restart_node(i)
        self.run_id = self.fed.flwr_run(
            app_dir, num_supernodes=n if self.mode is Mode.SIMULATION else None)

    def restart_node(self, partition: int) -> None:
        """(Re)start the SuperNode of client ``partition`` with its state folder."""
        self.fed.start_supernode(partition, num_partitions=self.cfg.num_clients,
                                 state_dir=self.node_state_dir(partition))

    def kill_node(self, partition: int) -> None:
        """SIGKILL the SuperNode of client ``partition`` (and its app processes)."""
        self.fed.kill_supernode(partition)

    def run_log(self, lines: int = 40) -> str:
        """The last lines of this run's own log (the ServerApp's and the simulation
        runtime's output: :meth:`LocalFederation.run_log`)."""
        return self.fed.run_log(self.run_id, lines=lines)

    def progress(self) -> list[dict[str, Any]]:
        """Rounds finished so far, as the ServerApp logged them."""
        return read_progress(self.exchange)

    def poll(self) -> Outcome | None:
        """The outcome once the ServerApp wrote it, ``None`` while it runs.

        Raises
        ------
        FlowerRunFailed
            If the ServerApp reported an error, or it or the SuperLink died without a word.
        """
        if (self.exchange / ERROR).is_file():
            err = json.loads((self.exchange / ERROR).read_text())
            raise FlowerRunFailed(str(err.get("error", "unknown error")))
        if (self.exchange / RESULT).is_file():
            doc = json.loads((self.exchange / RESULT).read_text())
            with np.load(self.exchange / MODEL) as f:
                theta = np.asarray(f["theta"])
            doc["flower"].update({"mode": self.mode.value, "run_id": self.run_id})
            return Outcome(doc=doc, theta=theta)
        link = self.fed.superlink
        if link is None or link.poll() is not None:
            raise FlowerRunFailed("the SuperLink stopped before the run finished; its log:\n"
                                  + self.fed.log_tail("superlink"))
        if app_processes(link.pid):
            self._app_seen, self._app_gone_at = True, None
        elif self._app_seen:
            self._app_gone_at = self._app_gone_at or time.monotonic()
            if time.monotonic() - self._app_gone_at > APP_GONE_GRACE_S:
                raise FlowerRunFailed("the ServerApp process ended without a result; the "
                                      "SuperLink's log:\n" + self.fed.log_tail("superlink")
                                      + "\nthe run's own log (flwr log):\n" + self.run_log())
        return None

    def wait(self, *, timeout_s: float, on_progress: ProgressCallback | None = None,
             poll_s: float = 0.2) -> Outcome:
        """Block until the outcome (``FlowerRunFailed`` after ``timeout_s`` seconds)."""
        deadline = time.monotonic() + timeout_s
        seen = 0
        while True:
            outcome = self.poll()
            if on_progress is not None:
                lines = self.progress()
                if len(lines) != seen:
                    seen = len(lines)
                    on_progress(lines)
            if outcome is not None:
                return outcome
            if time.monotonic() >= deadline:
                raise FlowerRunFailed(f"no result within timeout={timeout_s} s "
                                      f"({len(self.progress())} of {self.cfg.rounds} rounds "
                                      "done); the SuperLink's log:\n"
                                      + self.fed.log_tail("superlink", lines=40)
                                      + "\nthe run's own log (flwr log):\n" + self.run_log())
            time.sleep(poll_s)

    def close(self) -> None:
        """Stop every process started for this run."""
        self.fed.close()


def run_flower(cfg: FlowerRunConfig, *, mode: Mode, work: Path, timeout_s: float,
               on_progress: ProgressCallback | None = None,
               node_timeout: float | None = None) -> Outcome:
    """Run ``cfg`` on Flower and return its outcome; all processes are stopped after.

    Raises
    ------
    FlowerRunFailed, LaunchError
        With the reason (a client's refusal, a timeout, a process that would not start).
    """
    with FlowerRunner(cfg, mode=mode, work=work, node_timeout=node_timeout) as runner:
        runner.start()
        return runner.wait(timeout_s=timeout_s, on_progress=on_progress)


def _submit(cfg: FlowerRunConfig, *, address: str, ca: Path | None,
            work: Path) -> tuple[FlowerRunConfig, Path, str]:
    """``flwr run`` ``cfg`` on the SuperLink at ``address``; its output goes to ``work``."""
    exchange = work / "server-out"
    exchange.mkdir(parents=True, exist_ok=True)
    cfg = dataclasses.replace(cfg, out_dir=str(exchange.resolve()))
    fed = LocalFederation(work, simulation=False)
    fed.remote = (address, ca)
    write_app(work / "app", cfg=cfg)
    return cfg, exchange, fed.flwr_run(work / "app")


def _superlink_answers(address: str) -> bool:
    """Whether a TCP connection to the SuperLink's ``host:port`` opens (no TLS needed)."""
    from fedqr.flower.parts import check_superlink, split_address

    try:
        check_superlink(*split_address("--superlink", address), ca=None)
    except ValueError:
        return False
    return True


def _await(exchange: Path, name: str, *, run_id: str, rounds: int, timeout_s: float,
           on_progress: ProgressCallback | None, address: str | None = None) -> None:
    """Wait until the ServerApp wrote ``name`` into ``exchange``; with the SuperLink's
    ``address``, stop waiting when it no longer accepts connections (:data:`PROBE_EVERY_S`,
    :data:`PROBE_FAILURES` times in a row): its run is gone with it.

    Raises
    ------
    FlowerRunFailed
        With the ServerApp's error, after ``timeout_s`` seconds, or when the SuperLink is gone.
    """
    deadline, seen = time.monotonic() + timeout_s, 0
    next_probe, failures = time.monotonic() + PROBE_EVERY_S, 0
    while True:
        if address is not None and time.monotonic() >= next_probe:
            failures = 0 if _superlink_answers(address) else failures + 1
            next_probe = time.monotonic() + PROBE_EVERY_S
            if failures >= PROBE_FAILURES:
                done = len(read_progress(exchange))
                raise FlowerRunFailed(
                    f"the SuperLink at {address} stopped accepting connections ({failures} "
                    f"tries, {PROBE_EVERY_S:g} s apart) after {done} of {rounds} rounds of run "
                    f"{run_id}: the run is gone with it (the replies of those rounds were "
                    "charged to the clients' ledgers); restart the SuperLink, register the "
                    "nodes again and start a new run")
        if (exchange / ERROR).is_file():
            err = json.loads((exchange / ERROR).read_text())
            raise FlowerRunFailed(str(err.get("error", "unknown error")))
        if (exchange / name).is_file():
            return
        lines = read_progress(exchange)
        if on_progress is not None and len(lines) != seen:
            seen = len(lines)
            on_progress(lines)
        if time.monotonic() >= deadline:
            raise FlowerRunFailed(f"no result within timeout={timeout_s} s ({len(lines)} of "
                                  f"{rounds} rounds done; run {run_id} may still run: "
                                  "flwr stop)")
        time.sleep(0.2)


def run_remote(cfg: FlowerRunConfig, *, address: str, ca: Path | None, work: Path,
               timeout_s: float, on_progress: ProgressCallback | None = None) -> Outcome:
    """Submit ``cfg`` to the SuperLink at ``address`` (on this machine: the ServerApp writes
    its result into ``work``) and wait for the outcome.

    Raises
    ------
    FlowerRunFailed, LaunchError
        With the reason (a client's refusal, a timeout, ``flwr run`` failing).
    """
    cfg, exchange, run_id = _submit(cfg, address=address, ca=ca, work=work)
    try:
        _await(exchange, RESULT, run_id=run_id, rounds=cfg.rounds, timeout_s=timeout_s,
               on_progress=on_progress, address=address)
    except KeyboardInterrupt:  # the ServerApp runs under the SuperLink, not this process
        fed = LocalFederation(work, simulation=False)
        fed.remote = (address, ca)
        stopped = fed.flwr_stop(run_id)
        raise RemoteInterrupted(
            f"run {run_id} was stopped on the SuperLink {address} (flwr stop)" if stopped else
            f"flwr stop {run_id} was not confirmed by the SuperLink {address}: the run may "
            f"still be running and spending the clients' budgets; stop it with flwr stop "
            f"{run_id}") from None
    doc = json.loads((exchange / RESULT).read_text())
    with np.load(exchange / MODEL) as f:
        theta = np.asarray(f["theta"])
    doc["flower"].update({"mode": "remote", "run_id": run_id, "superlink": address})
    return Outcome(doc=doc, theta=theta)


def survey_remote(cfg: FlowerRunConfig, *, address: str, ca: Path | None, work: Path,
                  timeout_s: float) -> dict[str, Any]:
    """Ask the SuperLink's clients (their own data) for their sizes and budgets: a run that
    trains nothing. Returns ``reports.json`` as the ServerApp wrote it.

    Raises
    ------
    FlowerRunFailed, LaunchError
        With the reason (a client's refusal, missing clients, ``flwr run`` failing).
    """
    cfg = dataclasses.replace(cfg, survey=True)
    cfg, exchange, run_id = _submit(cfg, address=address, ca=ca, work=work)
    _await(exchange, REPORTS, run_id=run_id, rounds=0, timeout_s=timeout_s, on_progress=None)
    doc: dict[str, Any] = json.loads((exchange / REPORTS).read_text())
    return doc


__all__ = ["FlowerRunFailed", "FlowerRunner", "LaunchError", "Mode", "Outcome",
           "RemoteInterrupted", "run_flower", "run_remote", "survey_remote"]
