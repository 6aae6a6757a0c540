"""Plans ``(T*, b*)`` for FedSGD-DPC from the convergence bounds, with budgets checked.

* :func:`plan_laplace`: Theorem 3's closed forms (:mod:`fedqr.theory.laplace`), rounded.
* :func:`plan_gaussian`: Theorem 4 with the noise of every ``(T, b)`` calibrated by an RDP
  accountant for each client's exact round-robin reply count, minimised over integers
  ``0 <= T <= T_max``, ``1 <= b <= N``.
* :func:`gaussian_paper_optimum`: the paper's Solutions 1-2 with an explicit ``c2``.
* :func:`table_one`: the paper's Table I.

Every :class:`Plan` recharges each client's events ``R_i`` times in a
:class:`~fedqr.privacy.PrivacyLedger` and reports the spent epsilon.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedqr.privacy import (
    Accountant,
    Mechanism,
    PrivacyLedger,
    calibrate_noise_multiplier,
    gaussian_event,
    gaussian_std,
    laplace_event,
    laplace_scale,
)
from fedqr.theory.bounds import (
    aggregated_noise_variance,
    gaussian_bound,
    gaussian_bound_paper,
    laplace_bound,
)
from fedqr.theory.calibration import RdpNoiseTable, round_robin_replies
from fedqr.theory.constants import ProblemConstants
from fedqr.theory.laplace import (
    JointOptimum,
    Rounding,
    alternate_convex_search,
    b_star,
    b_star_int,
    joint_optimum,
    joint_optimum_int,
    laplace_acs,
    t_star,
    t_star_int,
)

__all__ = [
    "JointOptimum",
    "Plan",
    "Rounding",
    "alternate_convex_search",
    "b_star",
    "b_star_int",
    "gaussian_paper_optimum",
    "joint_optimum",
    "joint_optimum_int",
    "laplace_acs",
    "plan_gaussian",
    "plan_laplace",
    "t_star",
    "t_star_int",
    "table_one",
]


@dataclass(frozen=True, eq=False)
class Plan:
    """A planned run and its privacy check.

    Attributes
    ----------
    mechanism
        ``Mechanism.LAPLACE`` or ``Mechanism.GAUSSIAN``.
    T, b
        Number of rounds (queries) and clients per round.
    replies
        Exact round-robin replies ``R_i`` of each client.
    predicted_U
        The bound ``U(T, b)`` at the plan.
    noise_scale
        Per-client Laplace scale (Theorem 1) or Gaussian std ``sigma_i``.
    noise_multiplier
        Per-client scale over sensitivity (Laplace) or calibrated ``z_i`` (Gaussian).
    eps_spent, eps_budget
        Per client: epsilon a ledger charged ``R_i`` times reports, and the budget.
    still_falling
        Gaussian: ``U`` still decreases at ``T_max`` for ``b*`` (a larger ``T_max`` helps).
    grid_T, grid_b, grid_U
        ``U`` over the grid (shape ``(len(grid_T), len(grid_b))``) for plotting.
    """

    mechanism: Mechanism
    T: int
    b: int
    replies: tuple[int, ...]
    predicted_U: float
    noise_scale: tuple[float, ...]
    noise_multiplier: tuple[float, ...]
    eps_spent: tuple[float, ...]
    eps_budget: tuple[float, ...]
    still_falling: bool
    grid_T: NDArray[np.float64]
    grid_b: NDArray[np.float64]
    grid_U: NDArray[np.float64]


def _frozen(a: Any) -> NDArray[np.float64]:
    out = np.array(a, dtype=np.float64)
    out.setflags(write=False)
    return out


def _spent(
    events: list[Any], replies: tuple[int, ...], c: ProblemConstants, kind: Accountant
) -> tuple[float, ...]:
    memo: dict[tuple[Any, int, float, float], float] = {}
    out = []
    for i, (ev, r) in enumerate(zip(events, replies, strict=True)):
        key = (ev, r, c.eps_i[i], c.delta_i[i])
        if key not in memo:
            if ev is None or r == 0:
                memo[key] = 0.0
            else:
                ledger = PrivacyLedger(eps=c.eps_i[i], delta=c.delta_i[i], accountant=kind)
                ledger.charge(ev, r)
                memo[key] = ledger.spent()[0]
        out.append(memo[key])
    return tuple(out)


def plan_laplace(
    constants: ProblemConstants,
    *,
    rounding: Rounding = Rounding.BEST,
    grid_T: NDArray[Any] | None = None,
) -> Plan:
    """Integer joint optimum of Theorem 3 (see :func:`joint_optimum_int`) with its privacy.

    Client i's noise is ``Lap(2 R_i xi_1 / (d_i eps_i))`` (Theorem 1 with exact replies); the
    bound uses the paper's ``bT/N``. ``grid_T`` defaults to ``0 .. max(2 T*, 10)``.
    """
    c = constants
    opt = joint_optimum_int(c, rounding=Rounding(rounding))
    t, b = int(opt.T), int(opt.b)
    replies = tuple(int(r) for r in round_robin_replies(N=c.N, b=b, T=t))
    scales = tuple(
        laplace_scale(replies=r, clip=c.xi, num_samples=di, eps=e)
        for r, di, e in zip(replies, c.d_i, c.eps_i, strict=True)
    )
    events = [
        laplace_event(scale=s, clip=c.xi, num_samples=di) if r > 0 else None
        for s, r, di in zip(scales, replies, c.d_i, strict=True)
    ]
    mult = tuple(0.0 if ev is None else float(ev.noise_multiplier) for ev in events)
    gt = np.arange(0, max(2 * t, 10) + 1) if grid_T is None else np.asarray(grid_T)
    gb = np.arange(1, c.N + 1)
    grid = laplace_bound(c, T=gt[:, None], b=gb[None, :])
    return Plan(
        mechanism=Mechanism.LAPLACE, T=t, b=b, replies=replies, predicted_U=opt.U,
        noise_scale=scales, noise_multiplier=mult,
        eps_spent=_spent(events, replies, c, Accountant.PURE), eps_budget=c.eps_i,
        still_falling=False, grid_T=_frozen(gt), grid_b=_frozen(gb), grid_U=_frozen(grid),
    )  # fmt: skip


def _z_grid(c: ProblemConstants, replies: NDArray[np.int64], ratio: float) -> NDArray[np.float64]:
    """Estimated ``z`` for every client and grid point, one table per distinct budget."""
    z = np.zeros(replies.shape, dtype=np.float64)
    budgets = sorted(set(zip(c.eps_i, c.delta_i, strict=True)))
    for eps, delta in budgets:
        table = RdpNoiseTable(sample_rate=c.q, eps=eps, delta=delta, ratio=ratio)
        cols = [i for i in range(c.N) if (c.eps_i[i], c.delta_i[i]) == (eps, delta)]
        z[..., cols] = table.noise_multipliers(replies[..., cols])
    return z


def plan_gaussian(
    constants: ProblemConstants,
    *,
    T_max: int,
    accountant: Accountant = Accountant.RDP,
    ratio: float = 1.04,
) -> Plan:
    """Minimise Theorem 4 with calibrated noise over integers ``T <= T_max``, ``b <= N``.

    For every grid point the replies ``R_i(T, b)`` are round robin's exact counts, ``z_i`` is
    estimated by :class:`~fedqr.theory.calibration.RdpNoiseTable` (distinct ``R`` only), and
    ``U`` is :func:`~fedqr.theory.bounds.gaussian_bound` with
    ``V = aggregated_noise_variance(sigma_i = z_i xi / (q d_i))``. The chosen plan is then
    calibrated exactly with ``calibrate_noise_multiplier(accountant=accountant)`` and checked
    with a ledger. Ties go to fewer replies.
    """
    c = constants
    if not isinstance(T_max, int) or T_max < 1:
        raise ValueError(f"T_max must be an integer >= 1, got T_max={T_max!r}")
    if any(dl <= 0.0 for dl in c.delta_i):
        raise ValueError(f"delta_i must be in (0, 1) for the Gaussian mechanism, got {c.delta_i}")
    gt = np.arange(T_max + 1)
    gb = np.arange(1, c.N + 1)
    replies = round_robin_replies(N=c.N, b=gb[None, :], T=gt[:, None])  # (T, b, N)
    z = _z_grid(c, replies, ratio)
    sigma = z * c.xi / (c.q * np.asarray(c.d_i, dtype=np.float64))
    v = aggregated_noise_variance(c, b=gb[None, :], sigma_i=sigma)
    grid = np.asarray(gaussian_bound(c, T=gt[:, None], b=gb[None, :], noise_variance=v))
    tt, bb = np.meshgrid(gt, gb, indexing="ij")
    i = int(np.lexsort(((bb * tt).ravel(), grid.ravel()))[0])
    t, b = int(tt.ravel()[i]), int(bb.ravel()[i])
    falling = t == T_max and grid[T_max, b - 1] < grid[T_max - 1, b - 1]
    r = tuple(int(x) for x in replies[t, b - 1])
    zs = tuple(
        calibrate_noise_multiplier(
            replies=ri, sample_rate=c.q, eps=c.eps_i[k], delta=c.delta_i[k], accountant=accountant
        )
        for k, ri in enumerate(r)
    )
    sig = tuple(
        gaussian_std(noise_multiplier=zk, clip=c.xi, sample_rate=c.q, num_samples=dk)
        for zk, dk in zip(zs, c.d_i, strict=True)
    )
    v_plan = aggregated_noise_variance(c, b=b, sigma_i=sig)
    u = float(gaussian_bound(c, T=t, b=b, noise_variance=v_plan))
    events = [
        gaussian_event(noise_multiplier=zk, sample_rate=c.q) if ri > 0 else None
        for zk, ri in zip(zs, r, strict=True)
    ]
    return Plan(
        mechanism=Mechanism.GAUSSIAN, T=t, b=b, replies=r, predicted_U=u, noise_scale=sig,
        noise_multiplier=zs, eps_spent=_spent(events, r, c, accountant), eps_budget=c.eps_i,
        still_falling=bool(falling), grid_T=_frozen(gt), grid_b=_frozen(gb), grid_U=_frozen(grid),
    )  # fmt: skip


def gaussian_paper_optimum(constants: ProblemConstants, *, c2: float, T_max: int) -> JointOptimum:
    """The paper's Gaussian solutions with explicit ``c2`` (Section V-B): ``b* = N`` and the
    better of ``T = T_max`` (Solution 1, "as large as possible") and ``T = 0`` (Solution 2)."""
    c = constants
    u = np.asarray(gaussian_bound_paper(c, T=np.array([0.0, float(T_max)]), b=c.N, c2=c2))
    k = int(np.argmin(u))
    return JointOptimum(T=float((0, T_max)[k]), b=float(c.N), U=float(u[k]))


def table_one(
    constants: ProblemConstants,
    eps_list: list[float],
    *,
    rounding: Rounding = Rounding.PAPER,
    fixed_b: tuple[int, ...] = (5, 10),
    fixed_T: tuple[int, ...] = (50,),
) -> list[dict[str, Any]]:
    """Paper Table I for each ``eps`` (same budget for every client).

    Rows ``{"eps", "T_star_fix_b": {b: T*(b)}, "b_star_fix_T": {T: b*(T)},
    "joint": {"T", "b", "U"}}`` (``b`` must be ``<= N``).
    """
    rows = []
    for eps in eps_list:
        c = constants.with_budget(eps=eps)
        joint = joint_optimum_int(c, rounding=rounding)
        rows.append({
            "eps": eps,
            "T_star_fix_b": {b: t_star_int(c, b=b, rounding=rounding) for b in fixed_b},
            "b_star_fix_T": {t: b_star_int(c, T=t, rounding=rounding) for t in fixed_T},
            "joint": {"T": int(joint.T), "b": int(joint.b), "U": joint.U},
        })  # fmt: skip
    return rows
