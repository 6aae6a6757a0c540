"""Search (T, b, q) with the twin: coarse grids, extension while the loss falls, refinement.

1. For every b (all of 1..N when N <= 12, else a log grid) and every q (the given one, or a
   log grid for ``--sample-rate auto``), simulate the horizons T = 0, 1, 2, 4, ... up to
   ``t_first`` as one batch; while the best T of a (b, q) is the largest simulated, extend
   that (b, q) to four times the horizon (up to ``t_limit``).
2. Refine b between the best b and its evaluated neighbours, and q by geometric midpoints.
3. For the best few (b, q), simulate T on a fine log grid (neighbours at most 1.25 apart)
   from T*/2 to 2 T*.
4. Recommend the schedule with the lowest predicted mean test loss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from numpy.typing import NDArray

from fedqr.planner.grids import b_grid, log_grid, q_grid, refine_b, refine_q
from fedqr.planner.noise import NoiseBook
from fedqr.planner.scenario import Scenario
from fedqr.planner.twin import Proxy, TwinRun, simulate_columns

__all__ = ["Prediction", "SearchSettings", "Searcher"]

Progress = Callable[[str, int], None]


@dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """How hard the twin searches.

    Attributes
    ----------
    repeats:
        Twin repeats per schedule (the prediction is their mean, its uncertainty the
        standard error); ``None``: :func:`auto_repeats` of the proxy's size.
    t_first, t_limit:
        Largest T of the first coarse pass; largest T ever simulated.
    coarse_ratio, fine_ratio:
        Ratios between neighbouring T of the coarse and the fine grid (<= 1.25).
    finalists:
        How many of the best (b, q) get the fine T grid.
    min_gain:
        The coarse grid is extended to larger T only while its largest T beats the one below
        by more than this share of the loss.
    seed:
        Seed of the twin's draws.
    """

    repeats: int | None = None
    t_first: int = 64
    t_limit: int = 4096
    coarse_ratio: float = 2.0
    fine_ratio: float = 1.25
    finalists: int = 3
    min_gain: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        if self.repeats is not None and self.repeats < 2:
            raise ValueError(f"repeats must be >= 2 (for an uncertainty), got {self.repeats}")
        if not 1 <= self.t_first <= self.t_limit:
            raise ValueError(f"need 1 <= t_first <= t_limit, got t_first={self.t_first}, "
                             f"t_limit={self.t_limit}")
        if not 1 < self.fine_ratio <= 1.25:
            raise ValueError(f"fine_ratio must be in (1, 1.25], got {self.fine_ratio}")


@dataclass(frozen=True)
class Prediction:
    """Predicted final test loss of one schedule."""

    rounds: int
    clients_per_round: int
    sample_rate: float
    mean: float
    stderr: float

    def as_dict(self) -> dict[str, float | int]:
        """JSON-ready."""
        return {"rounds": self.rounds, "clients_per_round": self.clients_per_round,
                "sample_rate": self.sample_rate, "predicted_test_loss": self.mean,
                "stderr": self.stderr}


Memo = dict[tuple[int, float, int], tuple[float, ...]]


@dataclass
class Searcher:
    """Runs the search for one scenario on one proxy; simulated losses are memoised in
    ``memo`` (a re-plan with the same memo simulates nothing)."""

    scenario: Scenario
    proxy: Proxy
    settings: SearchSettings
    device: torch.device
    memo: Memo = field(default_factory=dict)
    progress: Progress | None = None
    simulated_rounds: int = 0

    def __post_init__(self) -> None:
        self._noise = NoiseBook(scenario=self.scenario, sizes=self.proxy.real_sizes,
                                num_params=self.proxy.num_params)
        self._gen = torch.Generator(device=self.device).manual_seed(self.settings.seed)
        self.repeats = self.settings.repeats or auto_repeats(int(self.proxy.proxy_sizes.sum()))
        self._coarse_keys: set[tuple[int, float, int]] = set()  # what steps 1-2 asked for

    # -- simulation ---------------------------------------------------------------------
    def evaluate(self, b: int, q: float, rounds: list[int]) -> None:
        """Simulate the horizons of ``rounds`` not yet in the memo (one batch)."""
        self._coarse_keys.update((b, q, int(t)) for t in rounds)
        todo = sorted({t for t in rounds if (b, q, t) not in self.memo})
        if not todo:
            return
        s = self.scenario
        run = TwinRun(mechanism=s.mechanism, clients_per_round=b, sample_rate=q, clip=s.clip,
                      lr=s.lr, weight_decay=s.weight_decay, aggregation=s.aggregation,
                      repeats=self.repeats)
        hs = np.asarray(todo, dtype=np.int64)
        std = self._noise.std(b=b, rounds=hs, sample_rate=q)
        label = f"b={b}" + (f" q={q:g}" if s.poisson else "") + f" T<={hs.max()}"
        done = self.simulated_rounds

        def tick(t: int) -> None:
            if self.progress is not None:
                self.progress(label, done + t)

        losses = simulate_columns(self.proxy, run, horizons=hs, std=std, generator=self._gen,
                                  on_round=tick)
        self.simulated_rounds += int(hs.max())
        for t, row in zip(todo, losses, strict=True):
            self.memo[(b, q, t)] = tuple(float(v) for v in row)

    def predictions(self, keys: set[tuple[int, float, int]] | None = None) -> list[Prediction]:
        """Every simulated schedule (or those of ``keys``), best first."""
        out = []
        for (b, q, t), losses in self.memo.items():
            if keys is not None and (b, q, t) not in keys:
                continue
            arr = np.asarray(losses)
            finite = np.isfinite(arr).all()
            mean = float(arr.mean()) if finite else float("inf")
            se = float(arr.std(ddof=1) / np.sqrt(len(arr))) if finite else float("inf")
            out.append(Prediction(rounds=t, clients_per_round=b, sample_rate=q, mean=mean,
                                  stderr=se))
        return sorted(out, key=lambda p: (p.mean, p.rounds, p.clients_per_round))

    def _best(self, b: int, q: float,
              keys: set[tuple[int, float, int]] | None = None) -> Prediction:
        return min((p for p in self.predictions(keys)
                    if p.clients_per_round == b and p.sample_rate == q),
                   key=lambda p: (p.mean, p.rounds))

    # -- the search ---------------------------------------------------------------------
    def run(self) -> list[Prediction]:
        """Search and return every prediction, best first."""
        s, st = self.scenario, self.settings
        n = s.num_clients
        bs = [s.clients_per_round] if s.clients_per_round else [int(b) for b in b_grid(n)]
        if not s.poisson:
            qs = [1.0]
        elif s.sample_rate is not None:
            qs = [s.sample_rate]
        else:
            qs = [float(q) for q in q_grid(int(self.proxy.real_sizes.min()))]
        if s.rounds is not None:
            for b in bs:
                for q in qs:
                    self.evaluate(b, q, [0, s.rounds])
            self._refine_b_q(bs, qs, fixed_t=s.rounds)
            return self.predictions()
        coarse = [0, *[int(t) for t in log_grid(1, st.t_first, ratio=st.coarse_ratio)]]
        for b in bs:
            for q in qs:
                self._coarse(b, q, coarse)
        self._refine_b_q(bs, qs, fixed_t=None)
        self._fine()
        return self.predictions()

    def _coarse(self, b: int, q: float, grid: list[int]) -> None:
        st = self.settings
        self.evaluate(b, q, grid)
        hi = max(grid)
        # extend while the loss still falls at the largest T by more than min_gain
        while self._still_falling(b, q, hi) and hi < st.t_limit:
            new_hi = min(st.t_limit, 4 * hi)
            self.evaluate(b, q, [int(t) for t in log_grid(hi, new_hi, ratio=st.coarse_ratio)])
            hi = new_hi

    def _still_falling(self, b: int, q: float, hi: int) -> bool:
        """Whether T = hi is the best coarse horizon of (b, q) and beats the one below by
        more than ``min_gain`` (relative): more rounds for a negligible gain are not worth
        their communication."""
        curve = sorted((p.rounds, p.mean) for p in self.predictions(self._coarse_keys)
                       if p.clients_per_round == b and p.sample_rate == q)
        best_t = min(curve, key=lambda tm: (tm[1], tm[0]))[0]
        if best_t < hi or len(curve) < 2:
            return False
        below, top = curve[-2][1], curve[-1][1]
        return below - top > self.settings.min_gain * abs(top)

    def _refine_b_q(self, bs: list[int], qs: list[float], *, fixed_t: int | None) -> None:
        s, st = self.scenario, self.settings
        best = self.predictions(self._coarse_keys)[0]
        grid = [0, fixed_t] if fixed_t else [0, *[int(t) for t in log_grid(
            1, st.t_first, ratio=st.coarse_ratio)]]
        if s.clients_per_round is None:
            for b in refine_b(best.clients_per_round, set(bs), s.num_clients):
                if fixed_t:
                    self.evaluate(b, best.sample_rate, grid)
                else:
                    self._coarse(b, best.sample_rate, grid)
        if s.poisson and s.sample_rate is None:
            best = self.predictions(self._coarse_keys)[0]
            for q in refine_q(best.sample_rate, np.asarray(qs)):
                if fixed_t:
                    self.evaluate(best.clients_per_round, q, grid)
                else:
                    self._coarse(best.clients_per_round, q, grid)

    def _fine(self) -> None:
        st = self.settings
        coarse = set(self._coarse_keys)  # a re-plan from a full memo takes the same path
        firsts: list[tuple[int, float]] = []
        for p in self.predictions(coarse):
            key = (p.clients_per_round, p.sample_rate)
            if key not in firsts:
                firsts.append(key)
            if len(firsts) == st.finalists:
                break
        for b, q in firsts:
            t_best = max(1, self._best(b, q, coarse).rounds)
            lo, hi = max(1, t_best // 2), min(st.t_limit, 2 * t_best)
            self.evaluate(b, q, [int(t) for t in log_grid(lo, max(lo, hi),
                                                          ratio=st.fine_ratio)])


AUTO_REPEAT_ROWS = 9000
"""Automatic twin repeats: 3 on proxies of 3,000 rows or more, up to 12 on smaller ones
(a repeat costs in proportion to the rows, and small clients are the noisiest)."""


def auto_repeats(rows: int) -> int:
    """Twin repeats for a proxy of ``rows`` rows: ``clip(ceil(9000 / rows), 3, 12)``."""
    return int(min(12, max(3, -(-AUTO_REPEAT_ROWS // max(rows, 1)))))


def untrained_loss(proxy: Proxy) -> float:
    """Test loss of theta = 0 (the uniform prediction): ``log k``."""
    return float(np.log(proxy.layout.num_classes))


def rank_of(predictions: list[Prediction], rounds: int, b: int) -> int:
    """1-based rank of a schedule among the predictions (for reports)."""
    for i, p in enumerate(predictions):
        if p.rounds == rounds and p.clients_per_round == b:
            return i + 1
    return len(predictions) + 1


def as_array(predictions: list[Prediction]) -> NDArray[np.float64]:
    """``(rounds, b, q, mean, stderr)`` rows."""
    return np.asarray([[p.rounds, p.clients_per_round, p.sample_rate, p.mean, p.stderr]
                       for p in predictions], dtype=np.float64)
