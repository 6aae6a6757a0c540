"""A fedqr SuperNode process: Flower's own SuperNode with a long-running ClientApp.

Flower 1.41 starts a fresh ``flwr-clientapp`` process for every message when a SuperNode
runs with ``--isolation subprocess`` (its default): process start, ``import flwr``, ``import
torch`` and loading the client's data, every round. Here the SuperNode runs with
``--isolation process`` (Flower's mode in which the SuperNode starts no app process itself and
an outside executor serves its Runtime API) and this same process is that executor: a thread
acquires each ClientApp task from the SuperNode's Runtime API and runs fedqr's ClientApp in
process, with torch imported and the client's data read once. It runs fedqr's installed
ClientApp only, never code from the server's FAB.

Two of Flower's fixed delays are shortened in this process (module constants, nothing else
changed): the SuperNode's idle wait between two pulls from the SuperLink (3 s, now a backoff
around ``FEDQR_FLOWER_POLL_S``, default 0.1 s), its wait for a reply (0.5 s polls, now woken
when the reply is stored) and its heartbeat interval (30 s, now
``FEDQR_FLOWER_HEARTBEAT_S``, 10..1800 s; the SuperLink declares a node dead after two
missed intervals).

Run as ``python -m fedqr.flower.node_main <flower-supernode arguments>``; the caller passes
``--isolation process``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from types import ModuleType
from typing import Any

POLL_ENV = "FEDQR_FLOWER_POLL_S"
HEARTBEAT_ENV = "FEDQR_FLOWER_HEARTBEAT_S"
DEFAULT_POLL_S = 0.1
DEFAULT_HEARTBEAT_S = 10.0
log = logging.getLogger("flwr")


class _Pacer:
    """The ``time`` module as Flower's SuperNode loop sees it, with its two waits replaced.

    ``sleep(3)`` (nothing to pull from the SuperLink) becomes a backoff from ``poll_s`` / 2
    up to ``poll_s`` * 5 (reset whenever a message came in); ``sleep(0.5)`` (a message
    waits for its reply) wakes the task thread and returns as soon as the reply is stored.
    """

    IDLE_WAIT, REPLY_WAIT = 3, 0.5  # Flower 1.41's literals in start_client_internal

    def __init__(self, poll_s: float) -> None:
        self.poll_s = poll_s
        self.idle = poll_s / 2
        self.task_ready = threading.Event()
        self.reply_ready = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        if seconds == self.REPLY_WAIT:
            self.idle = self.poll_s / 2
            self.task_ready.set()
            self.reply_ready.wait(self.poll_s)
            self.reply_ready.clear()
        elif seconds == self.IDLE_WAIT:
            time.sleep(self.idle)
            self.idle = min(self.idle * 1.5, self.poll_s * 5)
        else:
            time.sleep(min(seconds, self.poll_s))


def _env_float(name: str, default: float, low: float, high: float) -> float:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise SystemExit(f"{name} must be a number in [{low}, {high}], got {name}={text!r}")
    return value


def tune_flower(*, poll_s: float, heartbeat_s: float) -> _Pacer:
    """Replace the SuperNode's fixed waits, set its heartbeat interval and let its activation
    wait out a previous process of the same node (:func:`patient_activation`)."""
    import flwr.supercore.heartbeat as heartbeat
    import flwr.supernode.fleet_http_connection as fleet
    import flwr.supernode.start_client_internal as internal
    from flwr.supernode.fleet_http_client import FleetHttpClient

    internal_mod: ModuleType = internal
    pacer = _Pacer(poll_s)
    internal_mod.time = pacer  # type: ignore[attr-defined]
    fleet.HEARTBEAT_DEFAULT_INTERVAL = int(heartbeat_s)  # type: ignore[attr-defined]
    heartbeat.HEARTBEAT_DEFAULT_INTERVAL = int(heartbeat_s)  # type: ignore[attr-defined]
    client: Any = FleetHttpClient
    client.ActivateNode = patient_activation(client.ActivateNode,
                                             patience_s=2 * heartbeat_s + RESTART_MARGIN_S)
    return pacer


ACTIVATION_FAILED = 2004
"""Flower's ``FLEET_NODE_ACTIVATION_FAILED``: the SuperLink refuses to activate a node it still
counts as online (its last heartbeat less than two intervals ago)."""
RESTART_MARGIN_S = 5.0


def patient_activation(activate: Any, *, patience_s: float,
                       sleep: Any = time.sleep, clock: Any = time.monotonic) -> Any:
    """``activate`` (Flower's ``FleetHttpClient.ActivateNode``) retried once a second for up
    to ``patience_s`` while the SuperLink refuses it as :data:`ACTIVATION_FAILED`.

    A SuperNode restarted right after it died (as docs/deployment.md says to) finds the
    SuperLink still counting its previous process as online until two heartbeat intervals
    have passed without one; Flower's SuperNode then exits at once ("Failed to activate
    SuperNode"). Waiting out those intervals lets the restart rejoin; any other error, or
    the same one after ``patience_s``, is raised as before.
    """
    import httpx
    from flwr.supercore.error import FlowerError

    def retried(self: Any, request: Any) -> Any:
        deadline, said = clock() + patience_s, False
        while True:
            try:
                return activate(self, request)
            except httpx.HTTPStatusError as exc:
                error = FlowerError.from_json(exc.response.text)
                if error is None or error.code != ACTIVATION_FAILED or clock() >= deadline:
                    raise
                if not said:
                    log.warning("fedqr: the SuperLink still counts this client's previous "
                                "SuperNode as online (a restart within two heartbeats); "
                                "retrying for up to %.0f s", patience_s)
                    said = True
                sleep(1.0)

    return retried


def _run_task(address: str, token: str) -> None:
    """Pull one ClientApp task, run fedqr's ClientApp on it, push the reply and the status."""
    from flwr.app import Error, Message
    from flwr.common.constant import ErrorCode, SubStatus
    from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
    from flwr.supercore.interceptors import (
        RuntimeTokenHttpInterceptor,
        RuntimeVersionHttpInterceptor,
    )
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient
    from flwr.supernode.runtime.run_clientapp import (
        pull_task_input,
        push_message,
        push_task_output,
    )

    from fedqr.flower.client_app import app

    client = RuntimeHttpClient.from_server_address(
        server_address=address, insecure=True, root_certificates=None,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
                      RuntimeTokenHttpInterceptor(token)],
        retry_invoker=make_simple_http_retry_invoker())
    beat = HeartbeatSender(make_task_heartbeat_fn_http(client))
    beat.start()
    message = context = reply = None
    status, details = SubStatus.FAILED, "ClientApp task failed"
    try:
        message, context, run, _fab = pull_task_input(client)
        if not str(run.fab_id).endswith("/fedqr-flower"):
            raise RuntimeError(f"this SuperNode runs fedqr's ClientApp only, the run asks "
                               f"for app {run.fab_id!r}: refused")
        reply = app(message=message, context=context)
        status, details = SubStatus.COMPLETED, ""
    except Exception as exc:  # reported to the server as an error reply
        log.error("fedqr ClientApp task failed", exc_info=exc)
        details = f"{type(exc).__name__}: {exc}"
        if message is not None:
            reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details),
                            reply_to=message)
    finally:
        try:
            if reply is not None and context is not None:
                push_message(client, reply, context)
            push_task_output(client=client, context=context, sub_status=status,
                             details=details)
        finally:
            beat.stop()
            client.close()


def serve_tasks(address: str, *, pacer: _Pacer, stop: threading.Event) -> None:
    """Acquire ClientApp tasks from the SuperNode's Runtime API at ``address``, run each
    (woken by the SuperNode loop when a message came in; otherwise once a second)."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient

    import fedqr.flower.client_app  # torch and fedqr imported before round 0
    import fedqr.flower.client_data
    import fedqr.flower.client_logic

    fedqr.flower.client_data.KEEP_RECIPE = False  # one client per SuperNode: its shard only

    client = RuntimeHttpClient.from_server_address(
        server_address=address, insecure=True, root_certificates=None,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperExec")],
        retry_invoker=make_simple_http_retry_invoker())
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP.value])
    while not stop.is_set():
        try:
            res = client.AcquireTask(request)
        except Exception:  # the SuperNode's Runtime API is not up yet, or restarting
            stop.wait(0.2)
            continue
        if res.HasField("task") and res.token:
            try:
                _run_task(address, res.token)
            except Exception as exc:
                log.error("fedqr: task not completed", exc_info=exc)
            pacer.reply_ready.set()
            continue
        pacer.task_ready.wait(1.0)
        pacer.task_ready.clear()


def _runtime_address(argv: list[str]) -> str:
    host, port = "127.0.0.1", "9094"
    for i, arg in enumerate(argv[:-1]):
        if arg == "--host":
            host = argv[i + 1]
        elif arg == "--port":
            port = argv[i + 1]
    return f"{host}:{port}"


def main(argv: list[str] | None = None) -> None:
    """Start the task thread, then Flower's SuperNode (``argv``: its arguments)."""
    args = list(sys.argv[1:] if argv is None else argv)
    poll_s = _env_float(POLL_ENV, DEFAULT_POLL_S, 0.01, 3.0)
    heartbeat_s = _env_float(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S, 10.0, 1800.0)
    pacer = tune_flower(poll_s=poll_s, heartbeat_s=heartbeat_s)
    stop = threading.Event()
    threading.Thread(target=serve_tasks, args=(_runtime_address(args),),
                     kwargs={"pacer": pacer, "stop": stop}, daemon=True,
                     name="fedqr-clientapp").start()
    from flwr.supernode.cli.flower_supernode import flower_supernode

    sys.argv = ["flower-supernode", *args]
    try:
        flower_supernode()
    finally:
        stop.set()


if __name__ == "__main__":
    main()
