"""Calibration and accounting against Google's dp-accounting."""

from __future__ import annotations

import math
from typing import Any

import dp_accounting
import numpy as np
import pytest
from dp_accounting import NeighboringRelation
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from hypothesis import given, settings
from hypothesis import strategies as st

from fedqr.privacy import (
    PLD_VALUE_DISCRETIZATION_INTERVAL,
    Accountant,
    PureDpAccountant,
    calibrate_noise_multiplier,
    composed_event,
    epsilon_spent,
    gaussian_event,
    laplace_event,
    laplace_scale,
    make_accountant,
    paper_gaussian_sigma,
)

DELTA = 1e-5


def _dp_eps(z: float, q: float, replies: int, delta: float, acct: Any) -> float:
    """Spent eps straight from dp-accounting (no fedqr code on the accounting path)."""
    inner = dp_accounting.GaussianDpEvent(z)
    ev = inner if q == 1.0 else dp_accounting.PoissonSampledDpEvent(q, inner)
    return float(acct.compose(dp_accounting.SelfComposedDpEvent(ev, replies)).get_epsilon(delta))


@pytest.mark.parametrize("replies", [1, 30, 200])
@pytest.mark.parametrize("q", [0.01, 0.2, 1.0])
@pytest.mark.parametrize("eps", [0.5, 4.0])
def test_rdp_calibration_meets_target_within_1pct(replies: int, q: float, eps: float) -> None:
    z = calibrate_noise_multiplier(replies=replies, sample_rate=q, eps=eps, delta=DELTA)
    got = _dp_eps(z, q, replies, DELTA, RdpAccountant())
    assert got <= eps
    assert got >= 0.99 * eps
    # smallest: 1 % less noise breaks the target
    assert _dp_eps(0.99 * z, q, replies, DELTA, RdpAccountant()) > eps


def test_pld_calibration_and_comparison_with_rdp() -> None:
    z_pld = calibrate_noise_multiplier(
        replies=100, sample_rate=0.01, eps=1.0, delta=DELTA, accountant=Accountant.PLD
    )
    z_rdp = calibrate_noise_multiplier(replies=100, sample_rate=0.01, eps=1.0, delta=DELTA)
    acct = PLDAccountant(value_discretization_interval=PLD_VALUE_DISCRETIZATION_INTERVAL)
    got = _dp_eps(z_pld, 0.01, 100, DELTA, acct)
    assert 0.99 <= got <= 1.0
    assert z_rdp == pytest.approx(1.0802, abs=1e-3)  # value the authors' RDP setup gives
    assert z_pld == pytest.approx(0.902, abs=2e-3)
    # The coarser grid (1e-3 instead of dp-accounting's 1e-4) costs < 1e-3 in eps
    fine = _dp_eps(z_pld, 0.01, 100, DELTA, PLDAccountant(value_discretization_interval=1e-4))
    assert abs(fine - got) < 1e-3


@pytest.mark.parametrize(("replies", "q", "near"), [(40, 0.5, 1.0), (7, 0.05, 3.0)])
def test_pld_calibration_from_a_start_near_the_rdp_answer(replies: int, q: float,
                                                         near: float) -> None:
    """A start below the answer (40 replies) or above it (7) gives the same calibration to
    dp-accounting's tolerance, within the budget and the smallest such."""
    kw: dict[str, Any] = {"replies": replies, "sample_rate": q, "eps": 2.0, "delta": DELTA,
                          "accountant": Accountant.PLD}
    plain = calibrate_noise_multiplier(**kw)
    started = calibrate_noise_multiplier(**kw, near=near)
    assert started == pytest.approx(plain, abs=3e-6)
    acct = PLDAccountant(value_discretization_interval=PLD_VALUE_DISCRETIZATION_INTERVAL)
    assert _dp_eps(started, q, replies, DELTA, acct) <= 2.0
    acct = PLDAccountant(value_discretization_interval=PLD_VALUE_DISCRETIZATION_INTERVAL)
    assert _dp_eps(started - 1e-4, q, replies, DELTA, acct) > 2.0


@pytest.mark.parametrize("near", [0.0, -1.0, math.inf, math.nan])
def test_a_start_that_is_not_a_noise_multiplier_is_refused(near: float) -> None:
    with pytest.raises(ValueError, match=rf"near must be > 0 and finite, got near={near!r}"):
        calibrate_noise_multiplier(replies=3, sample_rate=0.1, eps=1.0, delta=DELTA,
                                   accountant=Accountant.PLD, near=near)


def test_calibration_is_memoised_and_zero_replies() -> None:
    kw: dict[str, Any] = {"replies": 17, "sample_rate": 0.05, "eps": 1.3, "delta": DELTA}
    assert calibrate_noise_multiplier(**kw) == calibrate_noise_multiplier(**kw)
    assert calibrate_noise_multiplier(replies=0, sample_rate=0.05, eps=1.0, delta=DELTA) == 0.0


def test_eps_grows_with_replies_and_sample_rate() -> None:
    z = 1.2
    by_r = [
        epsilon_spent(
            {gaussian_event(noise_multiplier=z, sample_rate=0.05): r},
            delta=DELTA,
            accountant=Accountant.RDP,
        )
        for r in (1, 10, 100, 1000)
    ]
    assert by_r == sorted(by_r) and len(set(by_r)) == 4
    by_q = [
        epsilon_spent(
            {gaussian_event(noise_multiplier=z, sample_rate=q): 50},
            delta=DELTA,
            accountant=Accountant.RDP,
        )
        for q in (0.001, 0.01, 0.1, 1.0)
    ]
    assert by_q == sorted(by_q) and len(set(by_q)) == 4


def test_epsilon_spent_matches_dp_accounting_and_accepts_lists() -> None:
    ev = gaussian_event(noise_multiplier=1.1, sample_rate=0.02)
    ref = _dp_eps(1.1, 0.02, 40, DELTA, RdpAccountant())
    assert epsilon_spent({ev: 40}, delta=DELTA, accountant=Accountant.RDP) == pytest.approx(
        ref, rel=1e-12
    )
    assert epsilon_spent([ev] * 40, delta=DELTA, accountant=Accountant.RDP) == pytest.approx(
        ref, rel=1e-12
    )
    assert epsilon_spent({}, delta=DELTA, accountant=Accountant.RDP) == 0.0
    assert epsilon_spent({ev: 0}, delta=DELTA, accountant=Accountant.PLD) == 0.0
    # composition order does not matter
    ev2 = gaussian_event(noise_multiplier=2.0, sample_rate=1.0)
    a = composed_event({ev: 3, ev2: 2})
    b = composed_event({ev2: 2, ev: 3})
    assert a == b


@settings(max_examples=60, deadline=None)
@given(
    replies=st.integers(1, 10_000),
    clip=st.floats(1e-3, 1e3),
    num_samples=st.integers(1, 100_000),
    eps=st.floats(1e-3, 100.0),
)
def test_laplace_pure_composition_is_exact(
    replies: int, clip: float, num_samples: int, eps: float
) -> None:
    b = laplace_scale(replies=replies, clip=clip, num_samples=num_samples, eps=eps)
    assert b == pytest.approx(2 * replies * clip / (num_samples * eps), rel=1e-12)
    ev = laplace_event(scale=b, clip=clip, num_samples=num_samples)
    assert epsilon_spent({ev: replies}, delta=0.0, accountant=Accountant.PURE) == pytest.approx(
        eps, rel=1e-12
    )
    acct = PureDpAccountant()
    for _ in range(min(replies, 50)):
        acct.compose(ev)
    assert acct.get_epsilon(0.0) == pytest.approx(min(replies, 50) * eps / replies, rel=1e-12)


@pytest.mark.parametrize(("replies", "eps"), [(1, 1.0), (10, 1.0), (50, 5.0), (3, 0.5)])
def test_pure_cross_checked_by_pld_and_rdp(replies: int, eps: float) -> None:
    ev = laplace_event(
        scale=laplace_scale(replies=replies, clip=1.0, num_samples=100, eps=eps),
        clip=1.0,
        num_samples=100,
    )
    pure = epsilon_spent({ev: replies}, delta=0.0, accountant=Accountant.PURE)
    sc = dp_accounting.SelfComposedDpEvent(ev, replies)
    vdi = 1e-4
    pld = PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE, vdi).compose(sc).get_epsilon(1e-10)
    assert pld <= pure + replies * vdi  # pessimistic discretisation adds <= vdi per event
    # RDP with growing max order tends to the pure bound from above for a single release;
    # for several releases it is at most the basic-composition bound.
    errs = [
        RdpAccountant(orders=np.geomspace(1.01, top, 300)).compose(sc).get_epsilon(1e-10) - pure
        for top in (1e2, 1e4, 1e7)
    ]
    assert errs[-1] <= 1e-5 * pure
    if replies == 1:
        assert errs[0] > errs[1] > errs[2] >= 0.0


def test_pure_accountant_interface() -> None:
    acct = PureDpAccountant()
    assert acct.neighboring_relation is NeighboringRelation.REPLACE_ONE
    assert acct.get_epsilon(0.0) == 0.0
    lap = dp_accounting.LaplaceDpEvent(4.0)
    nested = dp_accounting.ComposedDpEvent(
        [dp_accounting.SelfComposedDpEvent(lap, 3), dp_accounting.NoOpDpEvent(), lap]
    )
    acct.compose(nested, 2)
    assert acct.get_epsilon(1e-5) == pytest.approx(2.0)  # 2 * (3 + 1) / 4
    assert acct.get_delta(2.0) == 0.0
    assert acct.get_delta(1.9) == 1.0
    assert not acct.supports(dp_accounting.GaussianDpEvent(1.0))
    assert not acct.supports(dp_accounting.PoissonSampledDpEvent(0.1, lap))
    assert not acct.supports(dp_accounting.LaplaceDpEvent(0.0))
    with pytest.raises(dp_accounting.UnsupportedEventError):
        acct.compose(dp_accounting.GaussianDpEvent(1.0))
    acct.compose(dp_accounting.NonPrivateDpEvent())
    assert acct.get_epsilon(0.0) == math.inf
    with pytest.raises(ValueError, match="target_delta must be in"):
        acct.get_epsilon(-0.1)
    with pytest.raises(ValueError, match="target_epsilon must be >= 0"):
        acct.get_delta(-1.0)


def test_make_accountant() -> None:
    assert isinstance(make_accountant(Accountant.RDP), RdpAccountant)
    pld = make_accountant(Accountant.PLD)
    assert isinstance(pld, PLDAccountant)
    assert pld.neighboring_relation is NeighboringRelation.ADD_OR_REMOVE_ONE
    assert isinstance(make_accountant(Accountant.PURE), PureDpAccountant)
    rel = NeighboringRelation.ADD_OR_REMOVE_ONE
    assert make_accountant("pure", neighboring_relation=rel).neighboring_relation is rel


def test_paper_gaussian_sigma_closed_form() -> None:
    got = paper_gaussian_sigma(replies=50, clip=10.0, num_samples=6000, eps=1.0, delta=1e-5, c2=1.0)
    assert got == pytest.approx(10.0 * math.sqrt(50 * math.log(1e5)) / 6000)
    assert (
        paper_gaussian_sigma(replies=0, clip=1.0, num_samples=1, eps=1.0, delta=0.5, c2=2.0) == 0.0
    )


def test_rdp_fast_path_is_bit_identical_to_the_accountant() -> None:
    """epsilon_spent's cached RDP curves give exactly what a fresh RdpAccountant gives."""
    import dp_accounting

    from fedqr.privacy import Accountant, epsilon_spent, gaussian_event, laplace_event
    from fedqr.privacy.accounting import composed_event

    counts = {gaussian_event(noise_multiplier=1.1, sample_rate=0.01): 37,
              gaussian_event(noise_multiplier=0.8, sample_rate=0.2): 5,
              laplace_event(scale=2.0, clip=1.0, num_samples=10): 3}
    for delta in (1e-5, 1e-3):
        fresh = dp_accounting.rdp.RdpAccountant().compose(composed_event(counts))
        assert epsilon_spent(counts, delta=delta, accountant=Accountant.RDP) == \
            fresh.get_epsilon(delta)


@pytest.mark.parametrize("delta", [0.0, 1e-9, 1e-5, 0.3])
def test_rdp_to_epsilon_is_compute_epsilon_bit_for_bit(delta: float) -> None:
    """Python floats in dp-accounting's compute_epsilon give its NumPy answer exactly:
    eps and order, over curves whose optimal order spans the grid (including eps 0)."""
    from dp_accounting.rdp import compute_epsilon

    from fedqr.privacy import RDP_ORDERS, rdp_to_epsilon, single_step_rdp

    orders_seen = set()
    for z, q in [(0.3, 0.01), (1.1, 0.01), (0.8, 0.2), (5.0, 1.0), (40.0, 0.5)]:
        curve = single_step_rdp(gaussian_event(noise_multiplier=z, sample_rate=q))
        for count in (1, 7, 100, 4_321, 250_000):
            rdp = count * curve
            eps, order = compute_epsilon(RDP_ORDERS, rdp, delta)
            got = rdp_to_epsilon(rdp, delta=delta)
            assert got == (float(eps), float(order))
            orders_seen.add(got[1])
    assert len(orders_seen) > 3 or delta == 0.0  # the test reaches several optimal orders


def test_pld_calibrates_an_eps_that_rdp_cannot_resolve() -> None:
    # RDP's orders cannot reach eps = 0.03 at delta = 0.01 with 3 replies at q = 0.01; PLD
    # does, and its first guess no longer comes from (a failed) RDP calibration
    with pytest.raises(ValueError, match=r"rdp accountant .*\(or accountant pld"):
        calibrate_noise_multiplier(replies=3, sample_rate=0.01, eps=0.03, delta=0.01,
                                   accountant=Accountant.RDP)
    z = calibrate_noise_multiplier(replies=3, sample_rate=0.01, eps=0.03, delta=0.01,
                                   accountant=Accountant.PLD)
    event = composed_event({gaussian_event(noise_multiplier=z, sample_rate=0.01): 3})
    spent = make_accountant(Accountant.PLD).compose(event).get_epsilon(0.01)
    assert 0.029 < spent <= 0.03 * (1 + 1e-9)


@pytest.mark.parametrize(("eps", "delta"), [(0.3, 1e-5), (1.0, 1e-5), (8.0, 1e-6), (2.0, 0.1)])
def test_useful_orders_keep_every_epsilon_at_or_below_the_target(eps: float,
                                                                 delta: float) -> None:
    """Epsilon over the kept orders equals the full one wherever that is at most ``eps``
    (the minimiser is kept) and is never below it elsewhere; some orders are dropped."""
    from fedqr.privacy import RDP_ORDERS, rdp_to_epsilon, single_step_rdp, useful_orders

    kept = useful_orders(eps=eps, delta=delta)
    assert 0 < len(kept) < len(RDP_ORDERS)
    at = np.isin(RDP_ORDERS, kept)
    below = above = 0
    for z in np.geomspace(0.3, 30.0, 12):
        for q in (0.01, 0.2, 1.0):
            curve = single_step_rdp(gaussian_event(noise_multiplier=float(z), sample_rate=q))
            part = single_step_rdp(gaussian_event(noise_multiplier=float(z), sample_rate=q),
                                   orders=kept)
            assert np.array_equal(part, curve[at])  # the same dp-accounting numbers
            for count in (1, 10, 1_000):
                full = rdp_to_epsilon(count * curve, delta=delta)[0]
                pruned = rdp_to_epsilon(count * part, delta=delta, orders=kept)[0]
                if full <= eps:
                    assert pruned == full
                    below += 1
                else:
                    assert pruned >= full
                    above += 1
    assert below > 10 and above > 10  # both sides of the target are reached


def test_conversion_term_is_compute_epsilons_offset() -> None:
    from dp_accounting.rdp import compute_epsilon

    from fedqr.privacy import conversion_term

    for order, delta in [(1.5, 1e-5), (12.0, 1e-5), (1024.0, 1e-3)]:
        c = conversion_term(order, delta=delta)
        for r in (0.5, 3.0):
            assert compute_epsilon([order], [r], delta)[0] == pytest.approx(r + c, abs=1e-12)


@pytest.mark.parametrize(("z", "q"), [(1.3, 0.3), (0.7, 0.01), (2.0, 1.0)])
def test_rdp_by_order_assembles_the_curve_computed_at_once(z: float, q: float) -> None:
    """Orders asked in three overlapping calls, in another order and with repeats, give
    the curve that dp-accounting computes at once, bit for bit."""
    from fedqr.privacy import RDP_ORDERS, rdp_by_order, single_step_rdp

    event = gaussian_event(noise_multiplier=z, sample_rate=q)
    orders = tuple(float(a) for a in RDP_ORDERS)
    low, high = orders[: len(orders) // 2], orders[len(orders) // 3:]
    assert rdp_by_order(event, orders=high[::-1])[::-1].tolist() == \
        single_step_rdp(event, orders=high).tolist()
    got = rdp_by_order(event, orders=(*low, low[0]))
    assert got[:-1].tolist() == single_step_rdp(event, orders=low).tolist()
    assert got[-1] == got[0]
    whole = rdp_by_order(event, orders=orders)
    assert whole.tolist() == single_step_rdp(event).tolist()
    assert not whole.flags.writeable
