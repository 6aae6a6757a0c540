"""The real ServerApp and ClientApp, wired through an in-process Grid (no processes, fast).

The fake Grid delivers each message to ``client_app.app`` at once, or to nobody when its node
is "dead"; it can add a node mid-run (a restarted client). Flower's transport itself is
covered by the deployment and simulation tests.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedqr.data import DatasetName
from fedqr.flower.config import FlowerRunConfig
from fedqr.privacy import Mechanism
from fedqr.sim.engine import simulate

from .conftest import require_flwr

Hook = Callable[[Any, list[Any]], None]  # (the fake grid, the messages pushed)


@pytest.fixture(scope="module")
def flwr_apps():  # the two Flower modules
    require_flwr()
    from flwr.supercore.task_identity import TaskIdentity

    from fedqr.flower import client_app, server_app

    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 7, 1, 0
    return client_app, server_app


def _fake_grid(client_app: object, cfg: FlowerRunConfig, state: Path, hook: Hook | None,
               own: Callable[[int], dict[str, object]] | None = None):
    from flwr.app import Context, Message, RecordDict
    from flwr.serverapp import Grid

    class FakeGrid(Grid):
        def __init__(self) -> None:
            self.nodes: dict[int, int] = {100 + i: i for i in range(cfg.num_clients)}
            self.dead: set[int] = set()
            self.replies: dict[str, Message] = {}
            self.sent: list[tuple[int, str]] = []  # (node, message type) of every push

        def set_run(self, run_id: int) -> None:
            raise NotImplementedError

        @property
        def run(self):
            raise NotImplementedError

        def create_message(self, *args: object, **kwargs: object) -> Message:
            raise NotImplementedError

        def send_and_receive(self, *args: object, **kwargs: object) -> Iterable[Message]:
            raise NotImplementedError

        def get_node_ids(self) -> Iterable[int]:
            return list(self.nodes)

        def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
            messages = list(messages)
            if hook is not None:
                hook(self, messages)
            ids = []
            for msg in messages:
                msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
                ids.append(msg.metadata.message_id)
                node = msg.metadata.dst_node_id
                self.sent.append((node, msg.metadata.message_type))
                if node in self.dead:
                    continue
                pid = self.nodes[node]
                node_config = {"partition-id": pid, "state-dir": str(state / f"client-{pid}"),
                               **(own(pid) if own is not None else {})}
                ctx = Context(run_id=msg.metadata.run_id, node_id=node, node_config=node_config,
                              state=RecordDict(), run_config=cfg.to_run_config())
                self.replies[msg.metadata.message_id] = client_app.app(msg, ctx)
            return ids

        def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
            return [self.replies.pop(i) for i in message_ids if i in self.replies]

    return FakeGrid()


def _serve(apps, cfg: FlowerRunConfig, tmp: Path, hook: Hook | None = None, run_id: int = 7,
           own: Callable[[int], dict[str, object]] | None = None):
    """Run the ServerApp over the fake grid (``own``: client i's own node config, as
    ``fedqr flower supernode --data`` sets it)."""
    from flwr.app import Context, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    client_app, server_app = apps
    TaskIdentity.run_id = run_id
    grid = _fake_grid(client_app, cfg, tmp / "state", hook, own)
    ctx = Context(run_id=run_id, node_id=0, node_config={}, state=RecordDict(),
                  run_config=cfg.to_run_config())
    server_app.app(grid, ctx)
    return grid


def _cfg(tmp: Path, **kw: object) -> FlowerRunConfig:
    base = dict(num_clients=3, clients_per_round=2, rounds=4, dataset=DatasetName.DIGITS,
                mechanism=Mechanism.GAUSSIAN, eps=(2.0, 4.0, 2.0), clip=5.0, sample_rate=0.2,
                lr=0.5, seed=2, round_timeout=0.3, connect_timeout=5.0,
                out_dir=str(tmp / "out"))
    return FlowerRunConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_apps_through_messages_reproduce_the_engine(flwr_apps, tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    _serve(flwr_apps, cfg, tmp_path)
    doc = json.loads((tmp_path / "out" / "result.json").read_text())
    ds, part = cfg.load_data()
    engine = simulate(ds, part, cfg.sim_config())
    with np.load(tmp_path / "out" / "model.npz") as f:
        np.testing.assert_allclose(f["theta"], engine.final_theta, atol=1e-5, rtol=0)
    assert doc["summary"] == pytest.approx(engine.to_json()["summary"], abs=1e-6)
    assert len((tmp_path / "out" / "progress.jsonl").read_text().splitlines()) == cfg.rounds


def test_dead_node_is_lost_and_its_restart_is_found(flwr_apps, tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, mechanism=Mechanism.LAPLACE, eps=(8.0,), clip=20.0, sample_rate=1.0,
               num_clients=2, clients_per_round=2, rounds=3)

    def hook(grid: Any, messages: list[Any]) -> None:
        rounds = {m.metadata.group_id for m in messages if m.metadata.message_type == "train"}
        if rounds == {"1"}:
            grid.dead.add(101)  # client 1's node dies before round 1 reaches it
            grid.nodes[202] = 1  # ... and comes back as a new node, found in round 2

    _serve(flwr_apps, cfg, tmp_path, hook)
    doc = json.loads((tmp_path / "out" / "result.json").read_text())
    assert doc["flower"]["missing_replies"] == [
        {"round": 1, "client": 1, "reason": "no reply within round-timeout"}]
    assert [c["replies_received"] for c in doc["clients"]] == [3, 2]
    assert doc["clients"][1]["epsilon_spent"] == pytest.approx(8.0 / 3 * 2)


def test_a_silent_node_is_asked_once_and_never_waited_for_again(flwr_apps,
                                                                tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, mechanism=Mechanism.NONE, clip=5.0, rounds=4)

    def hook(grid: Any, messages: list[Any]) -> None:
        grid.nodes[999] = 0  # a node that registers but never answers
        grid.dead.add(999)

    grid = _serve(flwr_apps, cfg, tmp_path, hook)
    assert grid.sent.count((999, "query")) == 1
    assert not any(node == 999 for node, kind in grid.sent if kind == "train")


def test_refused_reply_stops_the_run_with_the_client_s_message(flwr_apps,
                                                               tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, mechanism=Mechanism.LAPLACE, eps=(8.0,), clip=20.0, sample_rate=1.0,
               rounds=3)
    _serve(flwr_apps, cfg, tmp_path)  # spends every client's whole budget
    out = tmp_path / "out"
    (out / "result.json").unlink()
    with pytest.raises(Exception, match=r"client 0 refused the run before round 0 \(nobody "
                                        r"was charged\)"):
        _serve(flwr_apps, cfg, tmp_path, run_id=8)  # a second run on the same ledgers
    err = json.loads((out / "error.json").read_text())["error"]
    assert "BudgetRefused: client 0: this run's" in err  # refused before its first reply
    assert not (out / "result.json").exists()


def test_a_client_that_cannot_join_stops_the_run_before_anybody_is_charged(
        flwr_apps, tmp_path: Path) -> None:
    """Client 2 spent its budget in an earlier run; clients 0 and 1 (round 0's) are fresh.
    The server's check before round 0 stops the run: no model is sent, and clients 0 and 1
    are charged nothing (asked only at its first reply, in round 1, client 2 would have
    refused after they were charged for round 0)."""
    from fedqr.flower.client_state import read_state

    cfg = _cfg(tmp_path, mechanism=Mechanism.LAPLACE, eps=(8.0,), clip=20.0, sample_rate=1.0,
               rounds=3)
    _serve(flwr_apps, cfg, tmp_path)  # spends every client's whole budget
    for c in (0, 1):  # clients 0 and 1 come back with fresh ledgers
        for f in (tmp_path / "state" / f"client-{c}").iterdir():
            f.unlink()
    (tmp_path / "out" / "result.json").unlink()
    with pytest.raises(Exception, match="client 2 refused the run before round 0"):
        _serve(flwr_apps, cfg, tmp_path, run_id=8)
    for c in (0, 1):
        state = read_state(tmp_path / "state" / f"client-{c}")
        assert state is None or (state.ledger.replies == 0 and not state.answered)
    assert "this run's 2 replies do not fit" in (tmp_path / "out" / "error.json").read_text()


def test_the_check_charges_nothing_and_the_run_then_replies(flwr_apps, tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, mechanism=Mechanism.LAPLACE, eps=(8.0,), clip=20.0, sample_rate=1.0,
               rounds=3)
    kinds: list[list[str]] = []

    def hook(grid: Any, messages: list[Any]) -> None:
        kinds.append(sorted({m.metadata.message_type for m in messages}))

    _serve(flwr_apps, cfg, tmp_path, hook)
    # the identity queries, then the check (also a query) before the first train message
    assert kinds[:3] == [["query"], ["query"], ["train"]]
    doc = json.loads((tmp_path / "out" / "result.json").read_text())
    assert [c["epsilon_spent"] for c in doc["clients"]] == pytest.approx([8.0] * 3)


def test_a_client_s_earlier_runs_count_in_the_record_from_round_0(
        flwr_apps, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-round record showed a client's total over runs once it replied and 0 before:
    the check before round 0 reports what each ledger spent earlier (here client 2's 1.5,
    an own-data node's earlier run; a partition node's run spends its whole budget)."""
    from fedqr.flower import client_logic

    real = client_logic.check_run

    def earlier(cfg: FlowerRunConfig, *, client: int, **kw: Any) -> tuple[int, float]:
        replies, spent = real(cfg, client=client, **kw)
        return replies, 1.5 if client == 2 else spent

    monkeypatch.setattr(client_logic, "check_run", earlier)
    cfg = _cfg(tmp_path, mechanism=Mechanism.LAPLACE, eps=(8.0,), clip=20.0, sample_rate=1.0,
               rounds=3, num_clients=3, clients_per_round=1)
    _serve(flwr_apps, cfg, tmp_path)
    doc = json.loads((tmp_path / "out" / "result.json").read_text())
    record = [r["epsilon_spent"] for r in doc["runs"][0]["rounds"]]
    assert record[0] == pytest.approx([0.0, 0.0, 1.5])  # before any reply of this run
    assert record[-1] == pytest.approx([8.0, 8.0, 8.0])


def test_connect_timeout_counts_the_clients_without_client_id(flwr_apps) -> None:
    """Two of three own-data nodes without --client-id connected: the message said 0."""
    from flwr.app import ConfigRecord

    _, server_app = flwr_apps
    directory = server_app.Directory(3, model=ConfigRecord({}))
    directory.unplaced = [11, 12]  # nodes that reported no client id: placed once all are in
    directory.refresh = lambda grid, timeout: None  # type: ignore[method-assign]
    cfg = FlowerRunConfig(num_clients=3, clients_per_round=3, rounds=1,
                          dataset=DatasetName.DIGITS, connect_timeout=0.01, round_timeout=0.01)
    with pytest.raises(Exception, match=r"2 of N=3 clients connected within connect-timeout="
                                        r"0.01 s; missing partition ids \[0, 1, 2\] \(2 of them "
                                        r"without --client-id"):
        directory.wait_all(None, cfg)


def _own_rows(tmp: Path, cfg: FlowerRunConfig) -> Callable[[int], dict[str, object]]:
    """Each client's rows of the run's partition in a file of its own; the node config of a
    SuperNode started with ``--data`` (and ``--standardize`` for the clients in ``scaled``)."""
    ds, part = cfg.load_data()
    for i, idx in enumerate(part.indices):
        np.savez(tmp / f"own-{i}.npz", x=ds.x_train[idx], y=ds.y_train[idx])
    return lambda i: {"data-file": str(tmp / f"own-{i}.npz"), "eps": 4.0, "delta": 1e-5,
                      "client-id": i}


@pytest.mark.parametrize("scaled", [(1,), (0, 2)])
def test_nodes_that_scale_their_rows_otherwise_than_the_server_are_refused(
        flwr_apps, tmp_path: Path, scaled: tuple[int, ...]) -> None:
    """A server evaluating on the built-in digits (standardised by one fixed mean and std)
    refuses SuperNodes started with --standardize (their own per-feature statistics), before
    any client is charged: nothing used to check that the two sides agree."""
    cfg = _cfg(tmp_path, mechanism=Mechanism.LAPLACE, eps=(4.0,), clip=20.0, sample_rate=1.0,
               client_data=True, client_budgets=True, rounds=2)
    rows = _own_rows(tmp_path, cfg)
    with pytest.raises(Exception, match=rf"SuperNodes of clients \[{', '.join(map(str, scaled))}"
                                        r"\] read their rows with --standardize while the "
                                        r"server evaluates on the built-in digits"):
        _serve(flwr_apps, cfg, tmp_path,
               own=lambda i: {**rows(i), "standardize": int(i in scaled)})
    error = json.loads((tmp_path / "out" / "error.json").read_text())
    assert "start them without --standardize" in error["error"]
    assert not (tmp_path / "out" / "result.json").exists()
    assert not list((tmp_path / "state").glob("client-*/state.json"))  # nobody charged


def test_nodes_scaled_as_the_server_run(flwr_apps, tmp_path: Path) -> None:
    """The same nodes without --standardize run; with a --test-data file that the server
    standardises, nodes without --standardize are refused, with it they run."""
    cfg = _cfg(tmp_path, mechanism=Mechanism.LAPLACE, eps=(4.0,), clip=20.0, sample_rate=1.0,
               client_data=True, client_budgets=True, rounds=2)
    rows = _own_rows(tmp_path, cfg)
    _serve(flwr_apps, cfg, tmp_path, own=lambda i: {**rows(i), "standardize": 0})
    assert json.loads((tmp_path / "out" / "result.json").read_text())["config"]["rounds"] == 2
    ds, _ = cfg.load_data()
    np.savez(tmp_path / "test.npz", x=ds.x_test, y=ds.y_test)
    on_file = dataclasses.replace(cfg, test_data=str(tmp_path / "test.npz"),
                                  out_dir=str(tmp_path / "file"))
    with pytest.raises(Exception, match=r"clients \[0, 1, 2\] read their rows with "
                                        r"--no-standardize \(the default\) while the server "
                                        r"standardises --test-data by its own statistics"):
        _serve(flwr_apps, on_file, tmp_path / "a", own=lambda i: {**rows(i), "standardize": 0})
    _serve(flwr_apps, on_file, tmp_path / "b", own=lambda i: {**rows(i), "standardize": 1})
    assert (tmp_path / "file" / "result.json").is_file()
