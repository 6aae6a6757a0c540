"""Fast RDP calibration, round-robin replies and the calibration-based Gaussian planner."""

from __future__ import annotations

import numpy as np
import pytest

from fedqr.privacy import calibrate_noise_multiplier
from fedqr.sim.config import Selection
from fedqr.sim.schedule import make_schedule, reply_counts
from fedqr.theory.calibration import RdpNoiseTable, round_robin_replies
from fedqr.theory.constants import ProblemConstants
from fedqr.theory.planner import gaussian_paper_optimum, plan_gaussian


@pytest.mark.parametrize(("eps", "replies"), [(1.0, (1, 7, 100)), (0.1, (3, 50))])
def test_table_within_one_percent_of_calibration(eps: float, replies: tuple[int, ...]) -> None:
    table = RdpNoiseTable(sample_rate=0.01, eps=eps, delta=1e-5)
    for r in replies:
        exact = calibrate_noise_multiplier(replies=r, sample_rate=0.01, eps=eps, delta=1e-5)
        assert table.noise_multiplier(r) == pytest.approx(exact, rel=0.01)
        assert table.upper(r) >= exact * (1 - 1e-6)
    assert table.noise_multiplier(0) == 0.0


@pytest.mark.parametrize(("q", "eps", "replies", "rel"), [
    (0.1, 0.3, (1, 3, 13), 3e-3), (0.5, 16.0, (2, 300), 1e-2), (0.3, 100.0, (50,), 3e-3)])
def test_table_halves_brackets_where_the_curves_bend(
        q: float, eps: float, replies: tuple[int, ...], rel: float) -> None:
    # q = 0.1, eps = 0.3: the same ratio-1.2 grid without the halving (brackets halved only
    # at cliffs) is 5.4% off at R = 1 and 1.2% at R = 3; q = 0.3, eps = 100, R = 50: 1.8% off
    # without the two halvings below z = 1 (eps is not monotone in z inside that bracket)
    table = RdpNoiseTable(sample_rate=q, eps=eps, delta=1e-5)
    for r in replies:
        exact = calibrate_noise_multiplier(replies=r, sample_rate=q, eps=eps, delta=1e-5)
        assert table.noise_multiplier(r) == pytest.approx(exact, rel=rel)
        assert table.upper(r) >= exact * (1 - 1e-6)


@pytest.mark.parametrize(("q", "eps"), [(0.01, 1.0), (0.2, 4.0), (0.5, 0.5)])
def test_table_curves_give_every_epsilon_that_meets_the_target(q: float, eps: float) -> None:
    """The table's curves (small orders that cannot give eps dropped, orders above 64 only
    where the RDP at 64 leaves them room) give dp-accounting's epsilon over every order
    wherever that meets the target, and never a smaller one elsewhere."""
    from fedqr.privacy import gaussian_event, rdp_to_epsilon, single_step_rdp

    table = RdpNoiseTable(sample_rate=q, eps=eps, delta=1e-5)
    met = missed = 0
    for z in np.geomspace(0.3, 20.0, 15):
        full = single_step_rdp(gaussian_event(noise_multiplier=float(z), sample_rate=q))
        curve = table._compute_rdp(float(z))
        for count in (1, 5, 60, 900):
            want = rdp_to_epsilon(count * full, delta=1e-5)[0]
            got = rdp_to_epsilon(count * curve, delta=1e-5, orders=table._order_list)[0]
            if want <= eps:
                assert got == want
                met += 1
            else:
                assert got >= want
                missed += 1
    assert met > 5 and missed > 5


@pytest.mark.parametrize(("n", "b", "t"), [(10, 3, 7), (10, 10, 5), (7, 4, 13), (5, 1, 0)])
def test_round_robin_replies_match_schedule(n: int, b: int, t: int) -> None:
    sched = make_schedule(num_clients=n, clients_per_round=b, rounds=t,
                          selection=Selection.ROUND_ROBIN, repeats=1,
                          rng=np.random.default_rng(0))  # fmt: skip
    np.testing.assert_array_equal(round_robin_replies(N=n, b=b, T=t), reply_counts(sched, n)[0])


def test_plan_gaussian_spends_budget() -> None:
    c = ProblemConstants.uniform(
        N=4, d=4000, p=100, mu=0.5, lam=1.0, G=2.0, Gamma=0.1, Y0=5.0, xi=1.0, eps=1.0,
        delta=1e-5, q=0.1, Lambda2=1.0,
    )  # fmt: skip
    plan = plan_gaussian(c, T_max=30)
    assert plan.grid_U.shape == (31, 4)
    assert plan.predicted_U == pytest.approx(plan.grid_U[plan.T, plan.b - 1], rel=0.02)
    assert plan.grid_U.min() == pytest.approx(plan.grid_U[plan.T, plan.b - 1])
    assert sum(plan.replies) == plan.T * plan.b
    for spent, r in zip(plan.eps_spent, plan.replies, strict=True):
        if r:
            assert spent == pytest.approx(1.0, rel=1e-4)
            assert spent <= 1.0 * (1 + 1e-9)
    assert plan.still_falling == (plan.T == 30)
    opt = gaussian_paper_optimum(c, c2=1.0, T_max=30)
    assert opt.b == 4.0 and opt.T in (0.0, 30.0)
