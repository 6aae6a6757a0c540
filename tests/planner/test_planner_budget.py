"""Cost control of the kernel twin: sized before the search, spent deterministically."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fedqr.data import DatasetName, DataSpec, PartitionKind
from fedqr.models.logreg import Norm
from fedqr.models.zoo import make_kernel
from fedqr.planner import Scenario, SearchSettings
from fedqr.planner.budget import (
    COARSE_SHARE,
    DEFAULT_BUDGET_MAX_S,
    MIN_T_FIRST,
    CostModel,
    TwinSize,
    default_budget_s,
    raised_budget_s,
    size_twin,
)
from fedqr.planner.proxy import ProxyChoice, build_twin
from fedqr.planner.search import Searcher, auto_repeats
from fedqr.planner.twin_kernel import KernelProxy, make_kernel_proxy
from fedqr.privacy import Mechanism
from fedqr.sim.config import LearningRate

SPEC = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.TWO_DIGITS, num_clients=4)
SIZES = np.array([15000, 15000, 15000, 15000])


GRID = {None: [0, 64], 64: [0, 1, 2, 4, 8, 16, 32, 64], 32: [0, 1, 2, 4, 8, 16, 32],
        16: [0, 1, 2, 4, 8, 16], 8: [0, 1, 2, 4, 8]}


def _size(budget: float, *, t_first: int | None = 64, num_params: int = 50890,
          flops: int = 101632, repeats: int | None = None) -> TwinSize:
    cost = CostModel(engine="stacked", num_params=num_params, num_clients=4,
                     proxy_rows=6000, real_rows=60000, test_rows=10000, features=784,
                     flops=flops)
    return size_twin(budget_s=budget, arms=[(1, 1.0), (2, 1.0), (4, 1.0)],
                     grid_of=GRID.__getitem__, t_first=t_first, cost=cost, real_sizes=SIZES,
                     share=0.1, repeats=repeats, auto_repeats=auto_repeats)


def test_the_twin_is_sized_to_its_budget() -> None:
    roomy = _size(1e4)
    assert (roomy.share, roomy.test_rows, roomy.repeats, roomy.t_first) == (0.1, 10000, 3, 64)
    tight = _size(20.0)
    assert tight.coarse_s <= COARSE_SHARE * 20.0 < roomy.coarse_s
    # fewer repeats and a shorter first race before fewer proxy rows: a small proxy is
    # learnt sooner than the clients' data (its T too short); here those two fit the budget
    assert tight.share == roomy.share and (tight.repeats, tight.t_first) < (3, 64)
    tiny = _size(1e-3)  # nothing fits: the smallest twin, still planned
    assert tiny.repeats == 2 and tiny.t_first == MIN_T_FIRST
    assert tiny.coarse_s < tight.coarse_s and tiny.share < 0.1
    # test rows are halved only while that saves: MNIST's cost, a tiny model's do not
    assert tiny.test_rows < 10000
    assert _size(1e-3, num_params=50, flops=100).test_rows == 10000
    assert _size(1e-3, repeats=5).repeats == 5
    assert _size(1e-3, t_first=None).t_first is None  # a fixed T keeps its grid
    with pytest.raises(ValueError, match="time_budget_s must be > 0"):
        _size(0.0)
    assert default_budget_s(486) == 15.0 and default_budget_s(4000) == 45.0


def test_an_expensive_model_raises_the_default_budget_for_its_first_race() -> None:
    """The smallest twin's first race gets COARSE_SHARE of a raised default (so the search
    keeps the rest for longer horizons), never more than DEFAULT_BUDGET_MAX_S."""
    smallest = _size(1e-3, num_params=110_526, flops=200_000_000)  # dearer than a CNN
    assert smallest.coarse_s > COARSE_SHARE * 45.0  # the default would go to the race
    raised = raised_budget_s(45.0, smallest.coarse_s)
    assert raised == pytest.approx(min(DEFAULT_BUDGET_MAX_S, smallest.coarse_s / COARSE_SHARE))
    again = _size(raised, num_params=110_526, flops=200_000_000)
    assert again.coarse_s <= COARSE_SHARE * raised * (1 + 1e-9)
    assert raised_budget_s(45.0, 1.0) == 45.0  # a cheap model keeps its default
    assert raised_budget_s(45.0, 1e6) == DEFAULT_BUDGET_MAX_S


def test_the_cost_model_grows_with_the_work() -> None:
    cost = CostModel(engine="stacked", num_params=1000, num_clients=4, proxy_rows=400,
                     real_rows=4000, test_rows=100, features=784, flops=2000)
    base = cost.batch_s(b=2, q=1.0, horizons=[0, 4, 8], repeats=3)
    assert cost.batch_s(b=4, q=1.0, horizons=[0, 4, 8], repeats=3) > base
    assert cost.batch_s(b=2, q=1.0, horizons=[0, 4, 16], repeats=3) > base
    assert cost.batch_s(b=2, q=1.0, horizons=[0, 4, 8], repeats=6) > base
    # Poisson batches: fewer rows; small inputs in one pass for all repeats, else one per repeat
    small = cost.counts(b=2, q=0.01, horizons=[0, 4, 8], repeats=3)
    assert small["grad"] < cost.counts(b=2, q=1.0, horizons=[0, 4, 8], repeats=3)["grad"]
    assert small["call"] == 8
    wide = dataclasses.replace(cost, features=10**6)
    assert wide.counts(b=2, q=0.01, horizons=[0, 4, 8], repeats=3)["call"] == 8 * 3
    assert cost.rows_per_round(2, 0.01) == pytest.approx(2 / 4 * 400 * 0.1)  # q sum(d)/sum(m)
    assert cost.batch_s(b=2, q=1.0, horizons=[], repeats=3) == 0.0


def _tiny_twin(eps: float) -> tuple[Scenario, KernelProxy, CostModel]:
    """An MLP twin of 40 rows a client on digits (Laplace), and its cost model."""
    data = SPEC.build()
    kernel = make_kernel("mlp", input_shape=(64,), num_classes=10, hidden=(8,))
    rows = tuple(np.asarray(i)[:40] for i in data.partition.indices)
    proxy = make_kernel_proxy(kernel, data, rows=rows, test=data.dataset,
                              real_sizes=data.partition.sizes, norm=Norm.L1,
                              device=torch.device("cpu"))
    sc = Scenario(data=SPEC, mechanism=Mechanism.LAPLACE, eps=(eps,), clip=20.0,
                  sample_rate=1.0, lr=LearningRate(eta0=0.3))
    cost = CostModel(engine=proxy.engine.name, num_params=proxy.num_params, num_clients=4,
                     proxy_rows=160, real_rows=int(data.partition.sizes.sum()), test_rows=359,
                     features=64, flops=2 * proxy.num_params)
    return sc, proxy, cost


def test_an_exhausted_budget_skips_every_optional_batch_the_same_way_twice() -> None:
    sc, proxy, cost = _tiny_twin(4.0)
    st = SearchSettings(repeats=2, t_first=8, t_limit=64)

    def searcher(memo: dict[tuple[int, float, int], tuple[float, ...]]) -> Searcher:
        return Searcher(scenario=sc, proxy=proxy, settings=st, device=torch.device("cpu"),
                        memo=memo, cost=cost, budget_s=1e-6)

    first = searcher({})
    predictions = first.run()
    assert first.skipped and first.estimated_s > 1e-6  # the first race always runs
    assert {p.rounds for p in predictions} <= {0, 1, 2, 4, 8}  # nothing beyond it
    assert not first.evaluate(1, 1.0, [16], optional=True)
    again = searcher(dict(first.memo))
    assert again.run() == predictions and again.simulated_rounds == 0
    assert again.skipped == first.skipped[:-1]  # the same path (without the call above)


def test_a_raised_default_follows_the_leader_that_the_budget_stopped() -> None:
    """With a follow budget (a default budget's), the best arm the budget stopped while its
    loss fell is doubled past the budget; a given budget (no follow budget) stops there."""
    sc, proxy, cost = _tiny_twin(40.0)
    st = SearchSettings(repeats=2, t_first=8, t_limit=64)

    def searcher(follow: float | None,
                 memo: dict[tuple[int, float, int], tuple[float, ...]] | None = None
                 ) -> Searcher:
        return Searcher(scenario=sc, proxy=proxy, settings=st, device=torch.device("cpu"),
                        memo=memo or {}, cost=cost, budget_s=1e-6, follow_budget_s=follow)

    given = searcher(None)
    stopped = given.run()[0]
    assert stopped.rounds == 8 and given.budget_s == 1e-6
    assert (stopped.clients_per_round, stopped.sample_rate, 8) in given.cut_short
    followed = searcher(1e3)
    best = followed.run()[0]
    leader = (stopped.clients_per_round, stopped.sample_rate)
    assert max(t for t, _ in followed.coarse_curve(*leader)) > 8  # doubled past the budget
    assert best.mean < stopped.mean and followed.budget_s == 1e3
    assert all((b, q) != leader or t > 8 for b, q, t in followed.cut_short)
    again = searcher(1e3, dict(followed.memo))  # a re-plan from the cache: the same path
    assert again.run() == followed.predictions() and again.simulated_rounds == 0


def test_only_a_default_budget_may_be_raised_for_the_leader() -> None:
    """The twin's sizing records the follow's raise for a default budget, none for a given
    one (the one place that tells them apart)."""
    data = SPEC.build()
    sc = Scenario(data=SPEC, mechanism=Mechanism.LAPLACE, eps=(4.0,), clip=20.0,
                  sample_rate=1.0, lr=LearningRate(eta0=0.3),
                  kernel=make_kernel("mlp", input_shape=(64,), num_classes=10, hidden=(8,)))

    def size(budget: float | None) -> TwinSize:
        twin = build_twin(sc, ProxyChoice(), data, data.partition.sizes, torch.device("cpu"),
                          SearchSettings(time_budget_s=budget))
        assert twin.size is not None
        return twin.size

    assert size(None).follow_s == DEFAULT_BUDGET_MAX_S
    given = size(5.0)
    assert given.follow_s is None and given.budget_s == 5.0
