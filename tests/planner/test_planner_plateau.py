"""The second look at arms on a plateau (fedqr.planner.plateau)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from fedqr.planner.plateau import PATIENCE, on_plateau, second_look
from fedqr.planner.search import SearchSettings

Arm = tuple[int, float]


@dataclass
class FakeSearcher:
    """Coarse curves read off fixed loss functions of T; ``budget`` doublings at most."""

    losses: dict[Arm, dict[int, float]]
    known: dict[Arm, list[int]]
    budget: int = 100
    settings: SearchSettings = field(default_factory=SearchSettings)
    cut_short: list[tuple[int, float, int]] = field(default_factory=list)
    asked: list[tuple[Arm, int]] = field(default_factory=list)

    def coarse_arms(self) -> list[Arm]:
        return list(self.known)

    def coarse_curve(self, b: int, q: float) -> list[tuple[int, float]]:
        return [(t, self.losses[(b, q)][t]) for t in sorted(self.known[(b, q)])]

    def evaluate(self, b: int, q: float, rounds: list[int], *, optional: bool = False) -> bool:
        assert optional  # the second look spends only what is left of the budget
        if len(self.asked) == self.budget:
            return False
        self.asked.append(((b, q), rounds[0]))
        self.known[(b, q)].append(rounds[0])
        return True


def curve(values: list[float], start: int = 16) -> dict[int, float]:
    """Losses at T = 0 (0.7) and start, 2 start, 4 start, ..."""
    return {0: 0.7, **{start * 2 ** i: v for i, v in enumerate(values)}}


PLATEAU_THEN_FALL = curve([0.51, 0.503, 0.512, 0.498, 0.456, 0.415, 0.42, 0.47, 0.55])
V_SHAPE = curve([0.50, 0.46, 0.52, 0.60, 0.70])  # rises by 13% past its minimum


@pytest.mark.parametrize(("points", "expected"), [
    ([(0, 0.7), (16, 0.51), (32, 0.503), (64, 0.512)], True),  # +1.8% past the best: flat
    ([(0, 0.7), (16, 0.51), (32, 0.46), (64, 0.52)], False),  # +13%: risen
    ([(0, 0.7), (16, 0.50), (32, 0.49), (64, 0.495)], True),
    ([(0, 0.7), (16, 0.40), (32, 0.405), (64, 0.406)], False),  # best two horizons back
    ([(0, 0.50), (1, 0.505), (2, 0.506)], False),  # untrained is best: nothing to resume
    ([(0, 0.7), (16, 0.51)], False),  # too short to tell
])
def test_on_plateau(points: list[tuple[int, float]], expected: bool) -> None:
    assert on_plateau(points) is expected


def test_an_arm_on_a_plateau_is_doubled_until_it_rises_and_a_v_is_left_alone() -> None:
    fake = FakeSearcher(losses={(20, 0.05): PLATEAU_THEN_FALL, (5, 0.05): V_SHAPE},
                        known={(20, 0.05): [0, 16, 32, 64], (5, 0.05): [0, 16, 32, 64]})
    assert second_look(fake) == [(20, 0.05)]  # type: ignore[arg-type]
    # 128 flat, 256 and 512 new bests, 1024 no gain (patience 1), 2048 risen beyond the
    # plateau tolerance: stop
    assert [t for _, t in fake.asked] == [128, 256, 512, 1024, 2048]
    assert fake.cut_short == []


def test_a_flat_arm_stops_after_its_patience() -> None:
    flat = curve([0.51, 0.50, 0.505, 0.502, 0.503, 0.501, 0.502, 0.503, 0.50, 0.50])
    fake = FakeSearcher(losses={(4, 1.0): flat}, known={(4, 1.0): [0, 16, 32, 64]})
    second_look(fake)  # type: ignore[arg-type]
    assert len(fake.asked) == PATIENCE + 1


def test_the_budget_ends_the_look_and_a_falling_arm_is_reported() -> None:
    fake = FakeSearcher(losses={(20, 0.05): PLATEAU_THEN_FALL},
                        known={(20, 0.05): [0, 16, 32, 64]}, budget=3)
    second_look(fake)  # type: ignore[arg-type]
    assert [t for _, t in fake.asked] == [128, 256, 512]
    assert fake.cut_short == [(20, 0.05, 512)]  # still falling where the budget ended it


def test_t_limit_is_never_passed() -> None:
    fake = FakeSearcher(losses={(20, 0.05): PLATEAU_THEN_FALL},
                        known={(20, 0.05): [0, 16, 32, 64]},
                        settings=SearchSettings(t_first=64, t_limit=256))
    second_look(fake)  # type: ignore[arg-type]
    assert [t for _, t in fake.asked] == [128, 256]
