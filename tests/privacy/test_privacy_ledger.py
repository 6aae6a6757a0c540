"""PrivacyLedger: budget enforcement, exact reply counts, memoisation and persistence."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import dp_accounting
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedqr.privacy import (
    BUDGET_RTOL,
    Accountant,
    PrivacyBudgetExceeded,
    PrivacyLedger,
    calibrate_noise_multiplier,
    epsilon_spent,
    gaussian_event,
    laplace_event,
    laplace_scale,
)
from fedqr.privacy import ledger as ledger_mod

# Small pools keep the accountant evaluations cheap: RDP of the plain Gaussian (q = 1) is
# closed form, a Poisson-sampled one costs ~20 ms per evaluation.
GAUSS_POOL = [
    gaussian_event(noise_multiplier=1.0, sample_rate=1.0),
    gaussian_event(noise_multiplier=1.5, sample_rate=0.02),
    gaussian_event(noise_multiplier=2.5, sample_rate=1.0),
    gaussian_event(noise_multiplier=6.0, sample_rate=1.0),
]
LAPLACE_POOL = [dp_accounting.LaplaceDpEvent(m) for m in (2.0, 5.0, 40.0)]


@settings(max_examples=30, deadline=None)
@given(
    mechanism=st.sampled_from(["gaussian", "laplace"]),
    eps=st.floats(0.2, 5.0),
    delta=st.sampled_from([1e-5, 1e-7]),
    steps=st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 25), st.integers(1, 4)),
        min_size=1,
        max_size=6,
    ),
)
def test_random_schedules_never_exceed_budget(
    mechanism: str, eps: float, delta: float, steps: list[tuple[int, int, int]]
) -> None:
    """Each step charges ``count`` replies of one event ``repeat`` times in a row (so the
    look-ahead memo is exercised); every decision must match a fresh evaluation."""
    if mechanism == "gaussian":
        pool, kind = GAUSS_POOL, Accountant.RDP
    else:
        pool, kind = LAPLACE_POOL, Accountant.PURE
    ledger = PrivacyLedger(eps=eps, delta=delta, accountant=kind, client_id=9)
    schedule = [(idx, count) for idx, count, repeat in steps for _ in range(repeat)]
    for idx, count in schedule:
        event = pool[idx % len(pool)]
        before_counts, before_spent = ledger.counts, ledger.spent()
        after = dict(before_counts)
        after[event] = after.get(event, 0) + count
        # reference evaluated with the ledger's delta (0 for PURE)
        ref_delta = delta if kind is Accountant.RDP else 0.0
        ref_eps = epsilon_spent(after, delta=ref_delta, accountant=kind)
        ok = ref_eps <= eps * (1 + BUDGET_RTOL)
        assert ledger.would_exceed(event, count) is (not ok)
        if ok:
            ledger.charge(event, count)
            assert ledger.counts == after
        else:
            with pytest.raises(PrivacyBudgetExceeded) as info:
                ledger.charge(event, count)
            assert info.value.eps_after == pytest.approx(ref_eps, rel=1e-12)
            assert info.value.client_id == 9 and info.value.eps_budget == eps
            # raised before recording
            assert ledger.counts == before_counts
            assert ledger.spent() == before_spent
        spent_eps, spent_delta = ledger.spent()
        assert spent_eps <= eps * (1 + BUDGET_RTOL)
        assert spent_delta == (delta if kind is Accountant.RDP and ledger.replies else 0.0)
        assert ledger.replies == sum(ledger.counts.values())
        assert ledger.remaining_eps == pytest.approx(max(0.0, eps - spent_eps))
        # what a further release may spend is a number only where budgets add up exactly
        left = ledger.remaining_eps
        assert ledger.spendable_eps == (None if kind is not Accountant.PURE else 0.0
                                        if left <= ledger_mod.BUDGET_RTOL * eps else left)


def test_a_pure_budget_spent_whole_leaves_nothing_to_spend() -> None:
    """0.7 + 0.6 of 1.3 leave a float residue of 2.2e-16, which Flower's refusal printed as
    what was left; within the budget's slack it is nothing."""
    ledger = PrivacyLedger(eps=1.3, delta=0.0, accountant=Accountant.PURE)
    for eps in (0.7, 0.6):
        ledger.charge(dp_accounting.LaplaceDpEvent(noise_multiplier=1 / eps))
    assert 0 < ledger.remaining_eps < 1e-15 and ledger.spendable_eps == 0.0


@pytest.mark.parametrize(
    ("replies", "q", "eps", "kind"),
    [
        (1, 0.01, 1.0, Accountant.RDP),
        (40, 0.01, 1.0, Accountant.RDP),
        (250, 0.05, 2.0, Accountant.RDP),
        (30, 1.0, 0.5, Accountant.RDP),
        (100, 0.01, 1.0, Accountant.PLD),
    ],
)
def test_gaussian_schedule_admits_exactly_r_replies(
    replies: int, q: float, eps: float, kind: Accountant
) -> None:
    z = calibrate_noise_multiplier(
        replies=replies, sample_rate=q, eps=eps, delta=1e-5, accountant=kind
    )
    event = gaussian_event(noise_multiplier=z, sample_rate=q)
    ledger = PrivacyLedger(eps=eps, delta=1e-5, accountant=kind)
    for _ in range(replies):
        ledger.charge(event)
    assert ledger.replies == replies
    # the full schedule gives exactly the number calibration saw
    assert ledger.spent()[0] == epsilon_spent({event: replies}, delta=1e-5, accountant=kind)
    with pytest.raises(PrivacyBudgetExceeded, match="reply refused"):
        ledger.charge(event)
    assert ledger.replies == replies


@settings(max_examples=50, deadline=None)
@given(
    replies=st.integers(1, 2000),
    clip=st.floats(1e-2, 1e3),
    num_samples=st.integers(1, 10**6),
    eps=st.floats(1e-2, 50.0),
)
def test_laplace_schedule_admits_exactly_r_replies(
    replies: int, clip: float, num_samples: int, eps: float
) -> None:
    b = laplace_scale(replies=replies, clip=clip, num_samples=num_samples, eps=eps)
    event = laplace_event(scale=b, clip=clip, num_samples=num_samples)
    ledger = PrivacyLedger(eps=eps, delta=0.0, accountant=Accountant.PURE)
    for _ in range(replies):
        ledger.charge(event)
    assert ledger.spent() == (pytest.approx(eps, rel=1e-12), 0.0)
    assert ledger.would_exceed(event)
    with pytest.raises(PrivacyBudgetExceeded):
        ledger.charge(event)
    assert ledger.replies == replies


def test_charging_r_replies_costs_log_r_evaluations() -> None:
    ledger_mod._state_eps.cache_clear()
    event = gaussian_event(noise_multiplier=1.7, sample_rate=0.02)
    ledger = PrivacyLedger(eps=1.0, delta=1e-5, accountant=Accountant.RDP)
    while not ledger.would_exceed(event):
        ledger.charge(event)
    assert ledger.replies > 300
    assert ledger_mod._state_eps.cache_info().misses <= 25


def test_spent_follows_every_charge_and_is_computed_once_per_charge(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """spent() is asked at every evaluation of every client: one accountant look-up per
    charge, never a stale value."""
    event = LAPLACE_POOL[1]
    ledger = PrivacyLedger(eps=10.0, delta=0.0, accountant=Accountant.PURE)
    calls: list[int] = []
    real = ledger._eps_of

    def counted(counts: dict[dp_accounting.DpEvent, int]) -> float:
        calls.append(1)
        return real(counts)

    monkeypatch.setattr(ledger, "_eps_of", counted)
    for replies in (1, 2, 3):
        ledger.charge(event)
        before = len(calls)
        first, again = ledger.spent()[0], ledger.spent()[0]
        assert first == again == pytest.approx(epsilon_spent(
            {event: replies}, delta=0.0, accountant=Accountant.PURE))
        assert len(calls) == before + 1


def test_heterogeneous_budgets_per_client() -> None:
    clients = [  # (eps, delta, d_i, R_i)
        (0.5, 1e-5, 500, 12),
        (1.0, 1e-6, 2000, 30),
        (4.0, 1e-5, 800, 7),
        (8.0, 1e-4, 5000, 60),
    ]
    q = 0.05
    ledgers, events = [], []
    for cid, (eps, delta, _d, r) in enumerate(clients):
        z = calibrate_noise_multiplier(replies=r, sample_rate=q, eps=eps, delta=delta)
        events.append(gaussian_event(noise_multiplier=z, sample_rate=q))
        ledgers.append(PrivacyLedger(eps=eps, delta=delta, accountant="rdp", client_id=cid))
    for cid, (ledger, event, (_, _, _, r)) in enumerate(zip(ledgers, events, clients, strict=True)):
        ledger.charge(event, r)
        assert ledger.would_exceed(event)
        with pytest.raises(PrivacyBudgetExceeded, match=f"client {cid}:") as info:
            ledger.charge(event)
        assert info.value.client_id == cid
        assert info.value.eps_after > ledger.eps_budget
        assert info.value.delta_budget == ledger.delta_budget
    # a smaller budget cannot afford the noise calibrated for a larger one
    assert ledgers[0].would_exceed(events[3], 1)


def test_round_trip_and_save_load(tmp_path: Path) -> None:
    ledger = PrivacyLedger(eps=3.0, delta=1e-6, accountant=Accountant.RDP, client_id=4)
    ledger.charge(GAUSS_POOL[1], 3)
    ledger.charge(GAUSS_POOL[3], 2)
    data = json.loads(json.dumps(ledger.to_dict()))
    back = PrivacyLedger.from_dict(data)
    assert back.counts == ledger.counts
    assert back.spent() == ledger.spent()
    assert (back.client_id, back.eps_budget, back.delta_budget) == (4, 3.0, 1e-6)
    assert back.accountant is Accountant.RDP
    path = tmp_path / "client4.json"
    ledger.save(path)
    ledger.save(path)  # overwrite atomically
    assert [p.name for p in tmp_path.iterdir()] == ["client4.json"]
    loaded = PrivacyLedger.load(path)
    assert loaded.to_dict() == ledger.to_dict()
    pure = PrivacyLedger(eps=1.0, delta=0.0, accountant=Accountant.PURE)
    pure.charge(LAPLACE_POOL[1], 4)
    assert PrivacyLedger.from_dict(pure.to_dict()).spent() == (pytest.approx(0.8), 0.0)


def test_from_dict_rejects_bad_data() -> None:
    good = PrivacyLedger(eps=2.0, delta=1e-5, accountant=Accountant.RDP)
    good.charge(GAUSS_POOL[3])
    data = good.to_dict()
    with pytest.raises(ValueError, match="format"):
        PrivacyLedger.from_dict({**data, "format": "x"})
    with pytest.raises(ValueError, match="version must be 1"):
        PrivacyLedger.from_dict({**data, "version": 2})
    with pytest.raises(ValueError, match="event type must be one of"):
        PrivacyLedger.from_dict({**data, "charges": [{"event": {"type": "evil"}, "count": 1}]})
    with pytest.raises(ValueError, match="charges must fit the budget"):
        PrivacyLedger.from_dict({**data, "charges": [{**data["charges"][0], "count": 10**6}]})
    with pytest.raises(ValueError, match="count must be an integer >= 0"):
        PrivacyLedger.from_dict({**data, "charges": [{**data["charges"][0], "count": -1}]})
    with pytest.raises(ValueError, match="eps must be > 0"):
        PrivacyLedger.from_dict({**data, "eps": -1})


def test_exception_pickles_and_message() -> None:
    err = PrivacyBudgetExceeded(client_id=3, eps_budget=1.0, delta_budget=1e-5, eps_after=1.2)
    back = pickle.loads(pickle.dumps(err))
    assert (back.client_id, back.eps_budget, back.delta_budget, back.eps_after) == (
        3,
        1.0,
        1e-5,
        1.2,
    )
    assert str(back) == str(err)
    assert "eps=1.2 > budget eps=1" in str(err)
    assert isinstance(err, RuntimeError)


def test_ledger_bad_inputs() -> None:
    with pytest.raises(ValueError, match=r"^eps must be > 0 and finite, got eps=-1$"):
        PrivacyLedger(eps=-1, delta=1e-5, accountant=Accountant.RDP)
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\), got delta=0"):
        PrivacyLedger(eps=1, delta=0, accountant=Accountant.RDP)
    with pytest.raises(ValueError, match="accountant must be one of 'rdp', 'pld', 'pure'"):
        PrivacyLedger(eps=1, delta=1e-5, accountant="moments")  # type: ignore[arg-type]
    ledger = PrivacyLedger(eps=1, delta=0.0, accountant=Accountant.PURE)
    with pytest.raises(ValueError, match="event must be supported by the 'pure' accountant"):
        ledger.charge(GAUSS_POOL[0])
    with pytest.raises(ValueError, match=r"event must be a hashable dp_accounting\.DpEvent"):
        ledger.charge("laplace")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="count must be an integer >= 0, got count=-2"):
        ledger.charge(LAPLACE_POOL[0], -2)
    ledger.charge(LAPLACE_POOL[0], 0)
    assert ledger.replies == 0 and ledger.spent() == (0.0, 0.0)
