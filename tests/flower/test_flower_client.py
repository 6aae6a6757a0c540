"""A client's reply and ledger, and the server's rounds, without Flower processes."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fedqr.data import Dataset, DatasetName, Partition, PartitionKind
from fedqr.flower.client_logic import answer_round
from fedqr.flower.client_state import ReplayRefused, read_state, state_path
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.own_data import BudgetRefused
from fedqr.flower.server_logic import ClientReply, FlowerRunError, ServerRun
from fedqr.models.factory import ModelName, default_model
from fedqr.privacy import Mechanism, PrivacyLedger
from fedqr.sim.engine import simulate
from fedqr.sim.network import simulate_network
from fedqr.sim.result import SimResult

LAPLACE = FlowerRunConfig(num_clients=3, clients_per_round=3, rounds=2,
                          dataset=DatasetName.DIGITS, mechanism=Mechanism.LAPLACE, eps=(5.0,),
                          clip=20.0, sample_rate=1.0, lr=0.3)


def _theta(cfg: FlowerRunConfig) -> np.ndarray:
    return np.zeros((10, 64), dtype=np.float32)


def _answer(cfg: FlowerRunConfig, tmp: Path, *, rnd: int = 0, theta: np.ndarray | None = None,
            run: str = "run-1", client: int = 1):
    return answer_round(cfg, client=client, round=rnd,
                        theta=_theta(cfg) if theta is None else theta, run_key=run,
                        state_dir=tmp / f"client-{client}")


def test_reply_is_charged_and_persisted_before_it_is_returned(tmp_path: Path) -> None:
    reply = _answer(LAPLACE, tmp_path)
    state = read_state(tmp_path / "client-1")
    assert state is not None and state.ledger.replies == 1 == reply.replies_charged
    assert state.answered == {"run-1": {"0": state.answered["run-1"]["0"]}}
    assert reply.epsilon_spent == pytest.approx(2.5)  # eps 5 over R_i = 2 replies
    # the file alone (a restarted client) holds the ledger
    doc = json.loads(state_path(tmp_path / "client-1").read_text())
    assert PrivacyLedger.from_dict(doc["ledger"]).spent()[0] == pytest.approx(2.5)


def test_resent_round_gets_the_same_reply_without_a_new_charge(tmp_path: Path) -> None:
    first = _answer(LAPLACE, tmp_path)
    again = _answer(LAPLACE, tmp_path)
    np.testing.assert_array_equal(first.theta, again.theta)
    assert again.replies_charged == 1
    with pytest.raises(ReplayRefused, match="already answered for another model"):
        _answer(LAPLACE, tmp_path, theta=_theta(LAPLACE) + 1)


def test_over_budget_reply_is_refused_and_nothing_recorded(tmp_path: Path) -> None:
    _answer(LAPLACE, tmp_path, rnd=0)
    _answer(LAPLACE, tmp_path, rnd=1)
    before = state_path(tmp_path / "client-1").read_bytes()
    # a second run on a spent ledger: refused at its first reply, as its whole schedule
    # does not fit what is left (before the reply's own check, which would refuse too)
    with pytest.raises(BudgetRefused, match="client 1: this run's 2 replies do not fit"):
        _answer(LAPLACE, tmp_path, rnd=0, run="run-2")
    assert state_path(tmp_path / "client-1").read_bytes() == before


def test_unscheduled_round_and_foreign_ledger_are_refused(tmp_path: Path) -> None:
    cfg = FlowerRunConfig(**{**LAPLACE.__dict__, "clients_per_round": 1})
    with pytest.raises(ValueError, match="round 0 does not select client 1"):
        _answer(cfg, tmp_path, rnd=0)
    _answer(LAPLACE, tmp_path)
    other = FlowerRunConfig(**{**LAPLACE.__dict__, "eps": (9.0,)})
    with pytest.raises(ValueError, match="a ledger keeps its client and budget for life"):
        _answer(other, tmp_path, rnd=1)
    # the same client and budget, another accountant (a Gaussian run after Laplace runs): the
    # message says so, and does not advise a fresh state folder
    from fedqr.flower.client_state import Budget, locked_state

    with pytest.raises(ValueError, match=r"composes its releases with the 'pure' accountant, "
                                         r"this run's mechanism is accounted by 'rdp'.*never"):
        with locked_state(tmp_path / "client-1",
                          budget=Budget(client_id=1, eps=5.0, delta=0.0, accountant="rdp")):
            pass


def test_a_crash_while_saving_leaves_the_previous_ledger(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _answer(LAPLACE, tmp_path, rnd=0)
    before = state_path(tmp_path / "client-1").read_bytes()

    def crash(*args: object) -> None:
        raise KeyboardInterrupt  # killed between the temporary file and the rename

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        _answer(LAPLACE, tmp_path, rnd=1)
    monkeypatch.undo()
    assert state_path(tmp_path / "client-1").read_bytes() == before
    assert [p.name for p in (tmp_path / "client-1").iterdir() if p.suffix == ".tmp"] == []
    assert _answer(LAPLACE, tmp_path, rnd=1).replies_charged == 2  # resumes cleanly


@pytest.mark.parametrize(
    ("mechanism", "q", "clip"),
    [(Mechanism.LAPLACE, 1.0, 20.0), (Mechanism.GAUSSIAN, 0.3, 3.0), (Mechanism.NONE, 0.5, 2.0)],
)
def test_client_replies_and_server_rounds_reproduce_the_engine(
        tmp_path: Path, mechanism: Mechanism, q: float, clip: float) -> None:
    """The Flower code path, minus the transport, equals the engine with per-reply seeding."""
    cfg = FlowerRunConfig(num_clients=4, clients_per_round=2, rounds=4,
                          dataset=DatasetName.DIGITS, partition=PartitionKind.DIRICHLET,
                          mechanism=mechanism, eps=(2.0, 4.0, 2.0, 4.0), clip=clip,
                          sample_rate=q, lr=0.3, seed=5)
    ds, part = cfg.load_data()
    _rounds_reproduce(cfg, simulate(ds, part, cfg.sim_config()), tmp_path)


def _rounds_reproduce(cfg: FlowerRunConfig, engine: SimResult, tmp_path: Path) -> None:
    """Every round through the client and server logic ends where ``engine`` ends."""
    run = ServerRun.start(cfg)
    for t in range(cfg.rounds):
        run.record(t)
        got = {}
        for c in run.selected(t):
            rep = answer_round(cfg, client=c, round=t, theta=run.theta_numpy(), run_key="r",
                               state_dir=tmp_path / f"client-{c}")
            got[c] = ClientReply(client=c, theta=rep.theta, rows=rep.rows,
                                 clipped_fraction=rep.clipped_fraction, grad_norm=rep.grad_norm,
                                 epsilon_spent=rep.epsilon_spent)
        run.apply_round(t, replies=got, lost={})
    run.record(cfg.rounds)
    np.testing.assert_allclose(run.theta.numpy(), engine.final_theta, atol=1e-5, rtol=0)
    doc = run.result()
    ref = engine.to_json()
    assert doc["summary"] == pytest.approx(ref["summary"], abs=1e-5)
    for mine, theirs in zip(doc["clients"], ref["clients"], strict=True):
        assert mine["epsilon_spent"] == pytest.approx(theirs["epsilon_spent"])
        assert mine["noise_std"] == theirs["noise_std"]
        assert mine["replies"] == theirs["replies"] == mine["replies_received"]
        # the clipped share pooled over the replies' rows, as the engine pools it
        assert mine["clipped_fraction"] == pytest.approx(theirs["clipped_fraction"], abs=1e-12)


def test_femnist_cnn_rounds_reproduce_the_network_engine(
        tmp_path: Path, femnist_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The paper's CNN on real FEMNIST: Flower's client and server logic over two rounds of
    three clients (two per round, Laplace: l1 per-sample clipping; the Poisson-sampled
    Gaussian CNN reply is compared in tests/sim/test_reply_paths.py) equal the engine."""
    cfg = FlowerRunConfig(num_clients=3, clients_per_round=2, rounds=2,
                          dataset=DatasetName.FEMNIST, data_dir=str(femnist_dir),
                          fraction=0.002, partition=PartitionKind.IID,
                          mechanism=Mechanism.LAPLACE, eps=(2.0,), clip=3.0, sample_rate=1.0,
                          lr=0.05, seed=3)
    assert default_model(cfg.dataset) is ModelName.CNN
    load = FlowerRunConfig.load_data

    def small_test_set(self: FlowerRunConfig) -> tuple[Dataset, Partition]:
        # FEMNIST's 16k test images cost ~90% of the time in evaluations the engine and the
        # server repeat each round; 256 of them keep the comparison and take a second
        ds, part = load(self)
        keep = slice(0, 256)
        return replace(ds, x_test=ds.x_test[keep], y_test=ds.y_test[keep],
                       writer_test=None if ds.writer_test is None else ds.writer_test[keep]), part

    monkeypatch.setattr(FlowerRunConfig, "load_data", small_test_set)
    ds, part = cfg.load_data()
    _rounds_reproduce(cfg, simulate_network(ds, part, cfg.sim_config()), tmp_path)


def test_lost_reply_counts_as_theta_t_and_too_few_replies_stop(tmp_path: Path) -> None:
    cfg = FlowerRunConfig(**{**LAPLACE.__dict__, "min_replies": 2})
    run = ServerRun.start(cfg)
    run.record(0)
    before = run.theta.clone()
    rep = _answer(cfg, tmp_path, client=0)
    one = {0: ClientReply(client=0, theta=rep.theta, rows=rep.rows, clipped_fraction=0.0,
                          grad_norm=1.0, epsilon_spent=rep.epsilon_spent)}
    with pytest.raises(FlowerRunError, match="1 of 3 replies arrived, fewer than min_replies=2"):
        run.apply_round(0, replies=one, lost={1: "no reply", 2: "no reply"})
    rep2 = _answer(cfg, tmp_path, client=2)
    two = {**one, 2: ClientReply(client=2, theta=rep2.theta, rows=rep2.rows,
                                 clipped_fraction=0.0, grad_norm=1.0, epsilon_spent=1.0)}
    run.apply_round(0, replies=two, lost={1: "no reply within round-timeout"})
    n, b = 3, 3
    w = n / b * run.sizes / run.sizes.sum()
    expect = w[0] * rep.theta + w[1] * before[0].numpy() + w[2] * rep2.theta
    np.testing.assert_allclose(run.theta[0].numpy(), expect, atol=1e-6)
    assert run.missing == [{"round": 0, "client": 1, "reason": "no reply within round-timeout"}]


def test_the_server_pools_the_clipped_share_over_the_replies_rows() -> None:
    cfg = FlowerRunConfig(num_clients=4, clients_per_round=2, rounds=1,
                          dataset=DatasetName.DIGITS, mechanism=Mechanism.GAUSSIAN, eps=2.0,
                          clip=3.0, sample_rate=0.3, seed=5)
    run = ServerRun.start(cfg)
    theta = run.theta_numpy()
    for rows, share in ((10, 1.0), (30, 0.0)):  # 10 of 40 sampled rows clipped: 0.25
        run._account(0, ClientReply(client=0, theta=theta, rows=rows, clipped_fraction=share,
                                    grad_norm=1.0, epsilon_spent=0.5))
    run.record(0)
    assert run.result()["clients"][0]["clipped_fraction"] == pytest.approx(0.25)  # not 0.5


def test_a_run_that_does_not_fit_what_earlier_runs_left_is_refused_before_any_reply(
        tmp_path: Path) -> None:
    """A node's ledger holds eps 2 over runs; each run asks eps 1 (Laplace: basic
    composition), so two runs fit and a third is refused at its first reply, charging
    nothing, instead of spending what is left on replies it cannot finish."""
    from fedqr.flower.client_logic import client_budget
    from fedqr.flower.client_state import Budget
    from fedqr.flower.own_data import BudgetRefused

    cfg = FlowerRunConfig(num_clients=2, clients_per_round=1, rounds=4,
                          dataset=DatasetName.DIGITS, mechanism=Mechanism.LAPLACE, eps=1.0,
                          clip=20.0, sample_rate=1.0, seed=5)
    run = ServerRun.start(cfg)
    budget = client_budget(cfg.sim_config(), client=0)
    assert budget is not None
    lifetime = Budget(client_id=0, eps=2.0, delta=budget.delta, accountant=budget.accountant)
    state = tmp_path / "client-0"
    for key in ("first", "second"):
        for t in (0, 2):  # client 0's rounds of the round-robin schedule
            answer_round(cfg, client=0, round=t, theta=run.theta_numpy(), run_key=key,
                         state_dir=state, ledger_budget=lifetime)
    before = (state / "state.json").read_bytes() if (state / "state.json").exists() else None
    with pytest.raises(BudgetRefused, match=r"this run's 2 replies do not fit its budget "
                                            r"eps=2 .* refused before its first reply"):
        answer_round(cfg, client=0, round=0, theta=run.theta_numpy(), run_key="third",
                     state_dir=state, ledger_budget=lifetime)
    after = (state / "state.json").read_bytes() if (state / "state.json").exists() else None
    assert before == after  # nothing charged


def test_the_check_before_round_0_charges_nothing_and_refuses_what_does_not_fit(
        tmp_path: Path) -> None:
    from fedqr.flower.client_logic import check_run

    state = tmp_path / "client-1"
    assert check_run(LAPLACE, client=1, run_key="run-1", state_dir=state) == (2, 0.0)
    checked = read_state(state)
    assert checked is not None and checked.ledger.replies == 0 and not checked.answered
    assert checked.calibration  # kept for the first reply
    _answer(LAPLACE, tmp_path, rnd=0)
    _answer(LAPLACE, tmp_path, rnd=1)  # run-1 spends the whole budget
    # a run begun is not refused; the ledger's spend is reported
    assert check_run(LAPLACE, client=1, run_key="run-1", state_dir=state) == (2, 5.0)
    before = state_path(state).read_bytes()
    with pytest.raises(BudgetRefused, match="client 1: this run's 2 replies do not fit"):
        check_run(LAPLACE, client=1, run_key="run-2", state_dir=state)
    assert state_path(state).read_bytes() == before
