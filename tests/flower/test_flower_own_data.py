"""A client with its own data and budget: what it spends, what it refuses, its secret seed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fedqr.data import DatasetName
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.own_data import BudgetRefused, NodeSettings, effective_budget, run_for_client


def _settings(tmp_path: Path, **kw: object) -> NodeSettings:
    node: dict[str, object] = {"data-file": str(tmp_path / "d.npz"), "eps": 2.0,
                               "delta": 1e-5, "state-dir": str(tmp_path / "state"), **kw}
    settings = NodeSettings.from_node_config(node)
    assert settings is not None
    return settings


def test_client_spends_its_own_budget_or_what_the_run_asks_within_it(tmp_path: Path) -> None:
    own = _settings(tmp_path)
    cfg = FlowerRunConfig(num_clients=3, clients_per_round=3, rounds=2,
                          dataset=DatasetName.DIGITS, client_data=True, client_budgets=True)
    assert effective_budget(own, cfg, client=0) == (2.0, 1e-5)
    asks = dataclasses.replace(cfg, client_budgets=False, eps=(1.5,))
    assert effective_budget(own, asks, client=1) == (1.5, 1e-5)
    per_client = dataclasses.replace(asks, eps=(1.0, 3.0, 1.0))
    assert effective_budget(own, per_client, client=0) == (1.0, 1e-5)
    with pytest.raises(BudgetRefused, match=r"client budget is eps=2, delta=1e-05; the run "
                                            r"asks eps=3"):
        effective_budget(own, per_client, client=1)


def test_noise_seed_is_the_nodes_secret_unless_fixed(tmp_path: Path) -> None:
    own = _settings(tmp_path)
    seed = own.seed()
    assert seed == own.seed()  # made once, kept: a restarted node draws the same noise
    assert (tmp_path / "state" / "noise-seed").stat().st_mode & 0o077 == 0
    other = _settings(tmp_path / "b")
    assert other.seed() != seed  # 63 random bits each
    cfg = FlowerRunConfig(num_clients=2, clients_per_round=2, rounds=2,
                          dataset=DatasetName.DIGITS, client_data=True, client_budgets=True)
    # every run draws its own noise: a run's seed is the secret mixed with the run's id (two
    # runs with one noise would give the clipped gradient away by differencing their replies)
    first, second = (run_for_client(cfg, own, client=0, run_key=k).seed for k in ("11", "12"))
    assert first != second and seed not in (first, second)
    assert run_for_client(cfg, own, client=0, run_key="11").seed == first  # a retry: the same
    fixed = _settings(tmp_path / "c", **{"noise-seed": 7})
    assert fixed.seed() == 7 and run_for_client(cfg, fixed, client=0, run_key="11").seed == 7


def test_node_config_errors_are_named(tmp_path: Path) -> None:
    assert NodeSettings.from_node_config({"partition-id": 0}) is None
    with pytest.raises(ValueError, match="must set eps"):
        NodeSettings.from_node_config({"data-file": "x.npz"})
    with pytest.raises(ValueError, match="client-id and noise-seed must be integers"):
        _settings(tmp_path, **{"client-id": "one"})


def test_a_node_keeps_its_ledger_whatever_number_a_run_gives_it(
        tmp_path: Path) -> None:
    """The server numbers nodes without --client-id afresh every run: the ledger made when the
    node was client 2 is still the node's when a later run calls it client 0 (it was refused
    as another client's ledger, with advice to start afresh: to forget what it spent)."""
    from fedqr.flower.client_state import Budget, locked_state
    from fedqr.flower.own_data import ledger_budget

    own = _settings(tmp_path)
    asked = Budget(client_id=2, eps=1.0, delta=1e-6, accountant="rdp")
    first = ledger_budget(own, asked)
    assert (first.client_id, first.eps, first.delta) == (2, 2.0, 1e-5)  # the node's budget
    with locked_state(own.state_dir, budget=first) as (_, save):
        save()
    later = ledger_budget(own, dataclasses.replace(asked, client_id=0))
    assert later.client_id == 2
    with locked_state(own.state_dir, budget=later):
        pass  # accepted: the same ledger
    # --client-id given later (the id in its file): still the same ledger (it was refused
    # both with the new id and with the ledger's, which owner.json refused)
    named = _settings(tmp_path, **{"client-id": 5})
    assert ledger_budget(named, dataclasses.replace(asked, client_id=5)).client_id == 2
    fresh = _settings(tmp_path / "new", **{"client-id": 5})  # a new ledger: the server's index
    assert ledger_budget(fresh, dataclasses.replace(asked, client_id=5)).client_id == 5


def test_a_run_the_ledger_cannot_take_is_refused_when_the_clients_report(tmp_path: Path) -> None:
    """Before the server plans: the reports gave each node's whole budget although earlier
    runs had spent most of it, and the plan was made for budget that no longer existed."""
    import numpy as np

    from fedqr.flower.client_logic import answer_round
    from fedqr.flower.client_state import read_state
    from fedqr.flower.own_data import check_budget_left
    from fedqr.privacy import Mechanism

    cfg = FlowerRunConfig(num_clients=3, clients_per_round=3, rounds=2,
                          dataset=DatasetName.DIGITS, mechanism=Mechanism.LAPLACE, eps=(5.0,),
                          clip=20.0, sample_rate=1.0, lr=0.3)
    state = tmp_path / "state"
    answer_round(cfg, client=1, round=0, theta=np.zeros((10, 64), dtype=np.float32),
                 run_key="first", state_dir=state)  # eps 2.5 of the ledger's 5 spent
    ledger = read_state(state)
    assert ledger is not None and ledger.ledger.spent()[0] == pytest.approx(2.5)
    node = dataclasses.replace(_settings(tmp_path), eps=5.0)
    with pytest.raises(BudgetRefused, match=r"of which eps=2.5 was spent in earlier runs; a run "
                                            r"without --eps asks every client's whole budget"
                                            r".* at most 2.5, what is left"):
        check_budget_left(node, eps=5.0, whole=True, run_key="second")
    with pytest.raises(BudgetRefused, match=r"the run asks eps=3, more than the 2.5 left"):
        check_budget_left(node, eps=3.0, whole=False, run_key="second")
    check_budget_left(node, eps=2.5, whole=False, run_key="second")  # what is left: fits
    check_budget_left(node, eps=5.0, whole=True, run_key="first")  # the run it began
    check_budget_left(_settings(tmp_path / "fresh"), eps=2.0, whole=True, run_key="x")


def test_a_budget_spent_whole_leaves_nothing_not_a_float_residue(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.7 + 0.6 of a budget of 1.3 leave 2.2e-16, which the refusal printed as what is left
    (a tester's Flower walkthrough)."""
    import types

    import dp_accounting

    import fedqr.flower.client_state as client_state
    from fedqr.flower.own_data import check_budget_left
    from fedqr.privacy import Accountant, PrivacyLedger

    ledger = PrivacyLedger(eps=1.3, delta=0.0, accountant=Accountant.PURE, client_id=1)
    for eps in (0.7, 0.6):
        ledger.charge(dp_accounting.LaplaceDpEvent(noise_multiplier=1 / eps))
    assert 0 < 1.3 - ledger.spent()[0] < 1e-15  # the residue itself
    monkeypatch.setattr(client_state, "read_state",
                        lambda _d: types.SimpleNamespace(ledger=ledger, answered={}))
    node = dataclasses.replace(_settings(tmp_path), eps=1.3)
    with pytest.raises(BudgetRefused, match=r"the run asks eps=0.5, more than the 0 left"):
        check_budget_left(node, eps=0.5, whole=False, run_key="c")
    with pytest.raises(BudgetRefused, match=r"run with --eps; nothing is left of it: this "
                                            r"client can take part in no further run"):
        check_budget_left(node, eps=1.3, whole=True, run_key="c")  # "--eps at most 0" was
        # advice that --eps refuses
