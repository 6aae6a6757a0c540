"""The Flower ServerApp: round robin over N clients, b replies a round, T rounds.

Before round 0 the server asks every connected node (``query``) which partition it holds and
maps partition ids to node ids; it asks again whenever a new node appears, so a restarted
client is found and used from the next round on. Then it asks every client whether the run
fits its ledger (:mod:`fedqr.flower.server_check`), so a client that cannot join stops the
run before anybody is charged. Each round it sends theta_t to the b
clients of the round robin, waits ``round-timeout`` seconds for their replies, aggregates
``(N/b) sum (d_i/d) theta^i`` with ``theta^i = theta_t`` for a reply that did not arrive, and
evaluates theta_{t+1} on the test set. An *error reply* (a client that refuses, e.g. over
budget, or cannot compute) stops the run with the client's message; a *missing reply* (a dead
node, a lost message) does not. Results go to the run config's ``out-dir``:
``progress.jsonl`` (a line per round), then ``model.npz`` and ``result.json``, or
``error.json``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

from fedqr._atomic import write_json_atomic
from fedqr.data import Dataset
from fedqr.flower.client_app import FAILED, REFUSED
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.results import REPORTS, write_error, write_result
from fedqr.flower.server_check import check_clients
from fedqr.flower.server_logic import (
    ClientReply,
    ClientReports,
    FlowerRunError,
    ServerRun,
    check_node_scaling,
    server_dataset,
)

POLL_S = 0.01  # first wait before the server asks the SuperLink again for replies
POLL_MAX_S = 0.2  # the wait grows by half each time up to this
log = logging.getLogger("flwr")
app = ServerApp()


def _pull(grid: Grid, ids: list[str], timeout: float) -> dict[str, Message]:
    """Pull replies to ``ids`` until all arrived or ``timeout`` s passed."""
    pending, replies = set(ids), {}
    deadline = time.monotonic() + timeout
    wait = POLL_S
    while pending:
        for reply in grid.pull_messages(list(pending)):
            key = reply.metadata.reply_to_message_id
            replies[key] = reply
            pending.discard(key)
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(wait)
        wait = min(wait * 1.5, POLL_MAX_S)
    return replies


class Directory:
    """Which node holds which partition. Each node is asked once; a query nobody answers is
    collected later if its answer comes, and never waited for twice."""

    def __init__(self, num_clients: int, *, model: ConfigRecord | None = None) -> None:
        self.num_clients = num_clients
        self.model = model  # clients with their own data: the run's model, sent with queries
        self.node_of: dict[int, int] = {}
        self.asked: set[int] = set()
        self.pending: dict[str, int] = {}  # query message id -> node
        self.info: dict[int, tuple[int, float, float]] = {}  # node -> (size, eps, delta)
        self.standardized: dict[int, bool | None] = {}  # node -> its --standardize
        self.unplaced: list[int] = []  # nodes of clients without --client-id

    def refresh(self, grid: Grid, timeout: float) -> None:
        """Ask new nodes which partition they hold and wait up to ``timeout`` s for them.

        Raises
        ------
        FlowerRunError
            If a node answers with an error, or with a partition id outside [0, N).
        """
        new = sorted(set(grid.get_node_ids()) - self.asked)
        fresh: set[str] = set()
        if new:
            content = RecordDict({"model": self.model} if self.model is not None else {})
            msgs = [Message(content, dst_node_id=n, message_type=MessageType.QUERY)
                    for n in new]
            ids = list(grid.push_messages(msgs))
            self.asked.update(new)
            self.pending.update(zip(ids, new, strict=True))
            fresh = set(ids)
        deadline = time.monotonic() + (timeout if fresh else 0.0)
        while self.pending:
            for reply in grid.pull_messages(list(self.pending)):
                mid = reply.metadata.reply_to_message_id
                fresh.discard(mid)
                node = self.pending.pop(mid, None)
                if node is not None:
                    self._learn(node, reply)
            if not fresh or time.monotonic() >= deadline:
                return
            time.sleep(POLL_S)

    def _learn(self, node: int, reply: Message) -> None:
        if reply.has_error():
            if reply.error.code == FAILED:
                raise FlowerRunError(f"node {node} failed: {reply.error.reason}")
            if reply.error.code == REFUSED:
                raise FlowerRunError(f"node {node} refused: {reply.error.reason}")
            return  # Flower's own error (the node is gone): a restart is a new node
        info = reply.content.config_records["info"]
        pid = _int(info["partition-id"])
        if self.model is not None:
            self.info[node] = (_int(info["num-samples"]), _float(info["eps"]),
                               _float(info["delta"]))
            flag = info.get("standardize")
            self.standardized[node] = None if flag is None else bool(_int(flag))
            if pid < 0:
                self.unplaced.append(node)
                return
        if not 0 <= pid < self.num_clients:
            raise FlowerRunError(f"node {node} holds partition-id={pid}, outside "
                                 f"[0, {self.num_clients - 1}] (N={self.num_clients})")
        if pid in self.node_of:
            log.info("fedqr: partition %d moved from node %d to node %d", pid,
                     self.node_of[pid], node)
        self.node_of[pid] = node

    def wait_all(self, grid: Grid, cfg: FlowerRunConfig) -> None:
        """Block until all N partitions have a node (``connect-timeout``)."""
        deadline = time.monotonic() + cfg.connect_timeout
        while True:
            self.refresh(grid, min(cfg.round_timeout, cfg.connect_timeout))
            missing = sorted(set(range(cfg.num_clients)) - set(self.node_of))
            if missing and len(self.unplaced) >= len(missing):  # give them the free indices
                for pid, node in zip(missing, sorted(self.unplaced), strict=False):
                    self.node_of[pid] = node
                    log.info("fedqr: node %d is client %d", node, pid)
                self.unplaced = sorted(self.unplaced)[len(missing):]
                missing = []
            if not missing:
                if self.model is not None:  # clients with their own rows: scaled as the server's
                    check_node_scaling(cfg, [self.standardized.get(self.node_of[i])
                                             for i in range(cfg.num_clients)])
                return
            if time.monotonic() >= deadline:
                placed = cfg.num_clients - len(missing)
                raise FlowerRunError(
                    f"{placed + len(self.unplaced)} of N={cfg.num_clients} clients connected "
                    f"within connect-timeout={cfg.connect_timeout} s; missing partition ids "
                    f"{missing}" + (f" ({len(self.unplaced)} of them without --client-id, "
                                    f"waiting for the free ids until all N are there)"
                                    if self.unplaced else ""))
            time.sleep(0.2)


    def reports(self) -> ClientReports:
        """Sizes and budgets of clients 0..N-1, as their nodes reported them."""
        rows = [self.info[self.node_of[i]] for i in range(self.num_clients)]
        return ClientReports(sizes=tuple(r[0] for r in rows), eps=tuple(r[1] for r in rows),
                             delta=tuple(r[2] for r in rows))


def model_record(ds: Dataset, cfg: FlowerRunConfig) -> ConfigRecord:
    """The run's data and model as clients with their own data must match them."""
    return ConfigRecord({"num-features": int(ds.x_train.shape[1]),
                         "num-classes": int(ds.num_classes),
                         "image-shape": ",".join(str(v) for v in ds.image_shape or ()),
                         "model": cfg.model_name, "hidden": cfg.hidden})


def _train_messages(run: ServerRun, directory: Directory, t: int,
                    sel: Iterable[int]) -> list[Message]:
    theta = ArrayRecord({"theta": Array(run.theta_numpy())})
    extra = {"model": directory.model} if directory.model is not None else {}
    return [Message(RecordDict({"theta": theta,
                                "config": ConfigRecord({"round": t, "client-id": c}), **extra}),
                    dst_node_id=directory.node_of[c], message_type=MessageType.TRAIN,
                    group_id=str(t)) for c in sel]


def _collect(run: ServerRun, t: int, sel: list[int], ids: list[str],
             replies: dict[str, Message]) -> tuple[dict[int, ClientReply], dict[int, str]]:
    """Replies by client, and why each missing one is missing; a refusal stops the run."""
    got: dict[int, ClientReply] = {}
    lost: dict[int, str] = {}
    for c, mid in zip(sel, ids, strict=True):
        reply = replies.get(mid)
        if reply is None:
            lost[c] = "no reply within round-timeout"
        elif reply.has_error():
            if reply.error.code in (REFUSED, FAILED):
                raise FlowerRunError(f"round {t}: client {c} refused to reply: "
                                     f"{reply.error.reason}")
            lost[c] = f"lost (Flower error {reply.error.code}: {reply.error.reason})"
        else:
            m = reply.content.metric_records["metrics"]
            d = _int(m["num-samples"])
            if d != int(run.sizes[c]):
                raise FlowerRunError(
                    f"round {t}: client {c} holds {d} samples, the server's partition gives it "
                    f"{int(run.sizes[c])}: every node needs the same data, seed and partition")
            got[c] = ClientReply(
                client=c, theta=reply.content.array_records["theta"]["theta"].numpy(),
                rows=_int(m["rows"]), clipped_fraction=_float(m["clipped-fraction"]),
                grad_norm=_float(m["grad-norm"]), epsilon_spent=_float(m["epsilon-spent"]))
    return got, lost


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise FlowerRunError(f"a client sent {value!r} where an integer belongs")
    return value


def _float(value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise FlowerRunError(f"a client sent {value!r} where a number belongs")
    return float(value)


def run_rounds(grid: Grid, cfg: FlowerRunConfig, *, progress: Path | None) -> ServerRun:
    """Discover the clients and run T rounds; returns the finished run."""
    if cfg.client_data:  # the clients report sizes and budgets first
        ds = server_dataset(cfg)
        directory = Directory(cfg.num_clients, model=model_record(ds, cfg))
        directory.wait_all(grid, cfg)
        run = ServerRun.start(cfg, reported=directory.reports(), dataset=ds)
    else:
        with ThreadPoolExecutor(max_workers=1) as pool:  # load data while clients connect
            starting = pool.submit(ServerRun.start, cfg)
            directory = Directory(cfg.num_clients)
            directory.wait_all(grid, cfg)
            run = starting.result()
    earlier = check_clients(grid, node_of=directory.node_of, model=directory.model,
                            timeout=cfg.round_timeout, pull=_pull)
    for c, eps in earlier.items():  # a client's record counts its earlier runs from round 0
        run.reported_eps[c] = max(run.reported_eps[c], eps)
    started = time.monotonic()
    for t in range(cfg.rounds):
        directory.refresh(grid, cfg.round_timeout)
        sel = run.selected(t)
        t0 = time.monotonic()
        ids = list(grid.push_messages(_train_messages(run, directory, t, sel)))
        metrics = run.record(t)  # theta_t evaluated while the clients compute
        t1 = time.monotonic()
        replies = _pull(grid, ids, max(cfg.round_timeout - (t1 - t0), 0.0))
        t2 = time.monotonic()
        got, lost = _collect(run, t, sel, ids, replies)
        run.apply_round(t, replies=got, lost=lost)
        line = {"round": t, "selected": sel, "replied": sorted(got), "lost": lost,
                "test_accuracy": metrics.test_accuracy[0], "test_loss": metrics.test_loss[0],
                "elapsed_s": time.monotonic() - started, "evaluate_s": t1 - t0,
                "exchange_s": t2 - t1}
        log.info("fedqr round %d/%d: %d/%d replies, test accuracy %.4f%s", t + 1, cfg.rounds,
                 len(got), len(sel), metrics.test_accuracy[0], f", lost {lost}" if lost else "")
        if progress is not None:
            with open(progress, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")
    final = run.record(cfg.rounds)
    log.info("fedqr finished: test accuracy %.4f", final.test_accuracy[0])
    return run


def survey(grid: Grid, cfg: FlowerRunConfig) -> ClientReports:
    """Wait for all N clients with their own data; their reported sizes and budgets."""
    if not cfg.client_data:
        raise FlowerRunError("a survey asks clients with their own data (fedqr flower "
                             "supernode --data), got client-data=false")
    directory = Directory(cfg.num_clients, model=model_record(server_dataset(cfg), cfg))
    directory.wait_all(grid, cfg)
    return directory.reports()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run FedSGD-DPC; write ``result.json`` and ``model.npz`` (or ``error.json``); a survey
    writes ``reports.json``."""
    out: Path | None = None
    try:
        cfg = FlowerRunConfig.from_run_config(context.run_config)
        out = Path(cfg.out_dir) if cfg.out_dir else None
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
        if cfg.survey:
            reports = survey(grid, cfg)
            log.info("fedqr survey: sizes %s, eps %s", reports.sizes, reports.eps)
            if out is not None:
                write_json_atomic(out / REPORTS, dataclasses.asdict(reports))
            return
        run = run_rounds(grid, cfg, progress=out / "progress.jsonl" if out is not None else None)
        if out is not None:
            write_result(out, doc=run.result(), theta=run.theta.numpy())
    except Exception as exc:
        out = out or _out_dir_of(context)
        if out is not None:
            write_error(out, exc)
        raise


def _out_dir_of(context: Context) -> Path | None:
    value = context.run_config.get("out-dir")
    return Path(value) if isinstance(value, str) and value else None
