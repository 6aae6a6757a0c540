"""Following the leading arm on a raised default budget (fedqr.planner.follow)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fedqr.planner.follow import follow_leader
from fedqr.planner.search import Prediction, SearchSettings

Arm = tuple[int, float]


@dataclass
class FakeSearcher:
    """Coarse curves read off fixed loss functions of T; a horizon T costs T seconds."""

    losses: dict[Arm, dict[int, float]]
    known: dict[Arm, list[int]]
    cut_short: list[tuple[int, float, int]]
    budget_s: float | None = 100.0
    follow_budget_s: float | None = 1000.0
    estimated_s: float = 0.0
    settings: SearchSettings = field(default_factory=SearchSettings)
    at_limit: list[tuple[int, float, int]] = field(default_factory=list)
    asked: list[int] = field(default_factory=list)

    def predictions(self) -> list[Prediction]:
        out = [Prediction(rounds=t, clients_per_round=b, sample_rate=q,
                          mean=self.losses[(b, q)][t], stderr=0.0)
               for (b, q), ts in self.known.items() for t in ts]
        return sorted(out, key=lambda p: (p.mean, p.rounds))

    def coarse_curve(self, b: int, q: float) -> list[tuple[int, float]]:
        return [(t, self.losses[(b, q)][t]) for t in sorted(self.known[(b, q)])]

    def still_falling(self, b: int, q: float, hi: int) -> bool:
        curve = self.coarse_curve(b, q)
        best_t = min(curve, key=lambda tm: (tm[1], tm[0]))[0]
        return best_t == hi and curve[-2][1] - curve[-1][1] > 0.01 * abs(curve[-1][1])

    def evaluate(self, b: int, q: float, rounds: list[int], *, optional: bool = False) -> bool:
        assert optional and self.budget_s is not None
        if self.estimated_s + rounds[0] > self.budget_s:
            return False
        self.estimated_s += rounds[0]
        self.asked.append(rounds[0])
        self.known[(b, q)].append(rounds[0])
        return True


FALLING = {0: 4.1, 8: 3.3, 16: 3.18, 32: 2.99, 64: 2.7, 128: 2.45, 256: 2.30, 512: 2.35}
OTHER = {0: 4.1, 8: 3.4, 16: 3.25}


def fake(**kw: object) -> FakeSearcher:
    args: dict[str, object] = {
        "losses": {(9, 0.05): FALLING, (4, 0.05): OTHER},
        "known": {(9, 0.05): [0, 8, 16, 32], (4, 0.05): [0, 8, 16]},
        "cut_short": [(9, 0.05, 32)], "estimated_s": 90.0}
    return FakeSearcher(**{**args, **kw})  # type: ignore[arg-type]


def test_the_leader_is_followed_until_its_loss_stops_falling() -> None:
    f = fake(follow_budget_s=2000.0)
    assert follow_leader(f) == (9, 0.05)  # type: ignore[arg-type]
    assert f.asked == [64, 128, 256, 512]  # 512 rose: stop
    assert f.cut_short == [] and f.budget_s == 2000.0  # the plan reports the raised budget


def test_the_raised_budget_still_ends_the_follow_and_the_arm_stays_cut_short() -> None:
    f = fake(follow_budget_s=300.0)
    assert follow_leader(f) == (9, 0.05)  # type: ignore[arg-type]
    assert f.asked == [64, 128]  # 256 would take 90 + 64 + 128 + 256 > 300
    assert f.cut_short == [(9, 0.05, 128)]


def test_a_given_budget_is_never_raised() -> None:
    f = fake(follow_budget_s=None)
    assert follow_leader(f) is None  # type: ignore[arg-type]
    assert f.asked == [] and f.budget_s == 100.0


def test_only_an_arm_the_budget_stopped_is_followed() -> None:
    f = fake(cut_short=[(4, 0.05, 16)])  # the leader (b = 9) stopped for its loss
    assert follow_leader(f) is None  # type: ignore[arg-type]
    assert f.asked == []


def test_nothing_bought_leaves_the_budget_as_it_was() -> None:
    f = fake(follow_budget_s=120.0)  # T = 64 does not fit 90 + 64
    assert follow_leader(f) is None  # type: ignore[arg-type]
    assert f.budget_s == 100.0 and f.cut_short == [(9, 0.05, 32)]


def test_t_limit_is_never_passed() -> None:
    f = fake(settings=SearchSettings(t_first=32, t_limit=128))
    assert follow_leader(f) == (9, 0.05)  # type: ignore[arg-type]
    assert f.asked == [64, 128]
    assert f.at_limit == [(9, 0.05, 128)] and f.cut_short == []
