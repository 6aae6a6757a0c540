"""The search's decisions: which arms the race extends, and the fine T read off a fitted curve."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from fedqr.data import DatasetName, DataSpec, PartitionKind
from fedqr.planner import DataUse, ProxyChoice, Scenario, SearchSettings, make_plan
from fedqr.planner.search import Searcher
from fedqr.planner.twin import make_proxy, proxy_rows
from fedqr.privacy import Mechanism
from fedqr.sim.config import LearningRate

SPEC = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.TWO_DIGITS, num_clients=4)
SCENARIO = Scenario(data=SPEC, mechanism=Mechanism.LAPLACE, eps=(4.0,), clip=20.0,
                    sample_rate=1.0, lr=LearningRate(eta0=0.3))


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))


def _searcher(**settings: object) -> Searcher:
    data = SPEC.build()
    rows = proxy_rows(data.partition, share=0.5, rng=np.random.default_rng(0))
    proxy = make_proxy(data, rows=rows, test=data.dataset, real_sizes=data.partition.sizes,
                       norm=SCENARIO.spec.norm, device=torch.device("cpu"))
    return Searcher(scenario=SCENARIO, proxy=proxy,
                    settings=SearchSettings(repeats=3, **settings),  # type: ignore[arg-type]
                    device=torch.device("cpu"))


def _put(s: Searcher, b: int, t: int, losses: tuple[float, ...]) -> None:
    s.memo[(b, 1.0, t)] = losses
    s._coarse_keys.add((b, 1.0, t))


def test_the_race_extends_only_the_best_half_within_the_margin() -> None:
    s = _searcher(race_margin=0.02)
    for b, loss in {1: 1.00, 2: 1.01, 3: 1.05, 4: 1.015}.items():
        _put(s, b, 64, (loss,) * 3)
    arms = [(b, 1.0) for b in (1, 2, 3, 4)]
    # best half: b = 1, 2; b = 4 is within 2% but not in the best half; b = 3 is neither
    assert s._survivors(arms, 64) == [(1, 1.0), (2, 1.0)]
    # an arm ranked against rivals that already stopped: b = 3 alone is not kept
    assert s._survivors([(3, 1.0)], 64) == []
    s2 = _searcher(race_margin=0.005)
    for b, loss in {1: 1.00, 2: 1.01}.items():
        _put(s2, b, 64, (loss,) * 3)
    assert s2._survivors([(1, 1.0), (2, 1.0)], 64) == [(1, 1.0)]  # 1% > the 0.5% margin


def test_fine_horizons_beyond_the_limit_are_read_off_a_parabola_in_log_t() -> None:
    s = _searcher(fine_simulate_up_to=16)
    coef = [(0.05, -0.5, 3.0), (0.06, -0.55, 3.1), (0.04, -0.45, 2.9)]  # one per repeat

    def curve(t: float) -> tuple[float, ...]:
        x = np.log(t)
        return tuple(a * x * x + b * x + c for a, b, c in coef)

    for t in (64, 128, 256, 512, 1024):
        _put(s, 2, t, curve(t))
    _put(s, 2, 0, (2.3,) * 3)
    s._fine()  # only (2, 1.0) is an arm; T* = 128 > 16: fitted, nothing simulated
    assert s.simulated_rounds == 0
    fine = sorted(t for (_, _, t) in s.fitted)
    assert fine and min(fine) >= 64 and max(fine) <= 256
    assert all(b / a <= 1.25 for a, b in zip([64, *fine], [*fine, 256], strict=False))
    for t in fine:
        np.testing.assert_allclose(s.fitted[(2, 1.0, t)], curve(t), rtol=1e-9)
    best = s.predictions()[0]
    assert best.fitted and best.clients_per_round == 2
    x_star = np.mean([-b / (2 * a) for a, b, _ in coef])
    assert abs(np.log(best.rounds) - x_star) < np.log(1.25)


def test_a_concave_curve_is_not_fitted() -> None:
    s = _searcher(fine_simulate_up_to=16)
    for t, v in zip((64, 128, 256, 512), (0.90, 0.98, 0.98, 0.90), strict=True):
        _put(s, 1, t, (v,) * 3)  # a hump: best T = 64, and no minimum to fit around it
    s._fine()
    assert not s.fitted and s.simulated_rounds == 0


def test_an_arm_still_falling_at_t_limit_is_recorded_and_said() -> None:
    s = _searcher(t_first=2, t_limit=4, min_gain=0.0)
    s._race([(4, 1.0)], optional=False)  # digits, eps 4: the loss falls over T = 1, 2, 4
    assert max(p.rounds for p in s.predictions()) == 4
    assert s.at_limit == [(4, 1.0, 4)]
    # nearly no noise (eps 1,000): every arm's loss falls to T = 4, the recommended one's too
    quiet = dataclasses.replace(SCENARIO, eps=(1000.0,))
    plan = make_plan(quiet, settings=SearchSettings(t_first=2, t_limit=4, min_gain=0.0),
                     use_cache=False)
    assert plan.recommended.rounds == 4
    assert "the largest T the search simulates (t_limit)" in plan.message
    assert plan.settings["simulated"]["still_falling_at_t_limit"]


def test_public_proxy_with_reported_sizes_never_reads_the_clients_data(
        monkeypatch: pytest.MonkeyPatch) -> None:
    public = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.IID, num_clients=4,
                      seed=9)
    # the deployment's recipe points at data that does not exist: building it would fail
    sc = Scenario(data=DataSpec(dataset=DatasetName.DIGITS, num_clients=4,
                                data_dir=Path("/nowhere")),
                  mechanism=Mechanism.LAPLACE, eps=(4.0,), clip=20.0, sample_rate=1.0)
    choice = ProxyChoice(use=DataUse.PUBLIC_PROXY, public=public)
    fast = SearchSettings(repeats=2, t_first=8, t_limit=16)
    small = make_plan(sc, proxy=choice, settings=fast, sizes=np.array([50, 60, 70, 80]))
    large = make_plan(sc, proxy=choice, settings=fast, sizes=np.array([500, 600, 700, 800]))
    assert small.privacy_cost["epsilon"] == 0.0
    assert not small.data_used["reads_private_data"]
    # ten times the data per client: a tenth of the noise, so a lower predicted loss
    assert large.recommended.mean < small.recommended.mean
    with pytest.raises(ValueError, match="sizes must be 4 positive"):
        make_plan(sc, proxy=choice, settings=fast, sizes=np.array([5, 6]))
    with pytest.raises(ValueError, match="public proxy"):
        make_plan(sc, settings=fast, sizes=np.array([5, 6, 7, 8]))
