"""A client process killed mid-run: the round goes on without it, its ledger survives intact,
and the restarted node continues from that ledger; with ``node_timeout`` the SuperLink notices
the dead node within that time (not Flower's two heartbeat intervals)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fedqr.data import DatasetName
from fedqr.flower.client_state import read_state
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.runner import FlowerRunner, Mode, Outcome
from fedqr.privacy import Mechanism

pytestmark = [pytest.mark.usefixtures("no_leftovers"), pytest.mark.slow]


def _until(runner: FlowerRunner, rounds: int, timeout_s: float) -> Outcome | None:
    """Wait until ``rounds`` rounds are logged (or the run ended)."""
    deadline = time.monotonic() + timeout_s
    while len(runner.progress()) < rounds:
        outcome = runner.poll()  # raises if the run failed
        if outcome is not None:
            return outcome
        assert time.monotonic() < deadline, f"round {rounds - 1} not done in {timeout_s} s"
        time.sleep(0.1)
    return None


def test_killed_client_is_skipped_and_restarts_with_its_ledger(tmp_path: Path) -> None:
    cfg = FlowerRunConfig(num_clients=2, clients_per_round=2, rounds=3,
                          dataset=DatasetName.DIGITS, mechanism=Mechanism.LAPLACE, eps=(6.0,),
                          clip=20.0, sample_rate=1.0, lr=0.3, round_timeout=30.0,
                          connect_timeout=90.0, min_replies=1)
    with FlowerRunner(cfg, mode=Mode.DEPLOYMENT, work=tmp_path) as runner:
        runner.start()
        assert _until(runner, 1, 150) is None  # round 0: both clients replied
        runner.kill_node(1)  # SIGKILL the SuperNode and its app processes, mid-run
        killed = read_state(runner.node_state_dir(1))  # intact: loads and fits the budget
        assert killed is not None and killed.ledger.replies >= 1
        runner.restart_node(1)  # same partition, same state folder: the same client
        outcome = runner.wait(timeout_s=150)
        # the run's own log, which a timeout's message quotes (the ServerApp's lines)
        assert "fedqr finished" in runner.run_log()
    doc = outcome.doc
    lost = [(m["round"], m["client"]) for m in doc["flower"]["missing_replies"]]
    assert (1, 1) in lost and all(c == 1 for _, c in lost)  # round 1 went on without it
    progress = runner.progress()
    assert progress[-1]["replied"] == [0, 1]  # the restarted node answered round 2
    state = read_state(runner.node_state_dir(1))
    assert state is not None
    answered = state.answered[runner.run_id]
    # one charge per round answered, before and after the restart; none twice, none lost
    assert state.ledger.replies == len(answered) >= 2 and {"0", "2"} <= set(answered)
    assert state.ledger.spent()[0] == pytest.approx(2.0 * state.ledger.replies)  # eps 6 / R=3
    client = doc["clients"][1]
    assert client["replies_received"] == 3 - len(lost)
    assert client["epsilon_spent"] == pytest.approx(state.ledger.spent()[0])
    assert doc["clients"][0]["replies_received"] == 3


NODE_TIMEOUT_S = 8.0  # Flower's own expiry at the SuperNodes' 10 s heartbeat: 15.5 to 20 s


def test_dead_node_is_noticed_within_the_node_timeout(tmp_path: Path) -> None:
    cfg = FlowerRunConfig(num_clients=2, clients_per_round=2, rounds=3,
                          dataset=DatasetName.DIGITS, mechanism=Mechanism.LAPLACE, eps=(6.0,),
                          clip=20.0, sample_rate=1.0, lr=0.3, round_timeout=120.0,
                          connect_timeout=90.0, min_replies=1)
    with FlowerRunner(cfg, mode=Mode.DEPLOYMENT, work=tmp_path,
                      node_timeout=NODE_TIMEOUT_S) as runner:
        runner.start()
        assert _until(runner, 1, 150) is None
        runner.kill_node(1)  # never restarted
        outcome = runner.wait(timeout_s=150)
    missing = outcome.doc["flower"]["missing_replies"]
    assert missing and all(m["client"] == 1 for m in missing)
    # noticed by the SuperLink (Flower's node-unavailable error), not by round-timeout=120 s
    assert all("Flower error" in m["reason"] for m in missing), missing
    lost_rounds = {m["round"] for m in missing}
    waits = [line["exchange_s"] for line in runner.progress() if line["round"] in lost_rounds]
    assert max(waits) < NODE_TIMEOUT_S + 6.0, waits  # the round's wait: the expiry, no more
    assert outcome.doc["clients"][1]["replies_received"] == 3 - len(missing)


def test_a_timeout_quotes_the_superlinks_log_and_the_runs_own(tmp_path: Path) -> None:
    from fedqr.flower.runner import FlowerRunFailed

    cfg = FlowerRunConfig(num_clients=2, clients_per_round=2, rounds=3,
                          dataset=DatasetName.DIGITS, mechanism=Mechanism.LAPLACE, eps=(6.0,),
                          clip=20.0, sample_rate=1.0)
    with FlowerRunner(cfg, mode=Mode.SIMULATION, work=tmp_path) as runner:
        runner.start()
        with pytest.raises(FlowerRunFailed) as caught:
            runner.wait(timeout_s=0.1)  # long before the first round
    text = str(caught.value)
    assert "no result within timeout=0.1 s (0 of 3 rounds done)" in text
    assert "the SuperLink's log:" in text and "the run's own log (flwr log):" in text
    assert "Using SuperLink: fedqr" in text  # flwr log answered, while the run was starting
