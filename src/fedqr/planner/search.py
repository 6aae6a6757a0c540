"""Search (T, b, q) with the twin: coarse grids, extension while the loss falls, refinement.

1. A race of the arms (b, q): every b (a log grid of 1..N) and every q (the given one, or a
   log grid for ``--sample-rate auto``) simulates the horizons T = 0, 1, 2, 4, ... up to
   ``t_first`` as one batch. Then, while an arm's loss still falls at its largest T (by more
   than ``min_gain``), it is extended to twice the horizon (up to ``t_limit``), but only if
   it is among the best half of the arms at that horizon and within ``race_margin`` of the
   best of them: a doubling costs as much as everything before it, so it is spent on the
   arms that can still win.
2. Refine b between the best b and its evaluated neighbours, and q by geometric midpoints
   (a race of the new arms against those already run).
3. For the best few arms, T on a fine log grid (neighbours at most 1.25 apart) from T*/2 to
   2 T*: simulated where T* <= ``fine_simulate_up_to``; beyond, each repeat's coarse curve
   (common random numbers make it smooth) is fitted by a parabola in log T and read on the
   fine grid, which costs nothing and is as precise as the twin's repeats there (the loss is
   flat near a large T*; docs/planner.md).
4. Models other than softmax regression: a second look at the arms left on a plateau, on
   what is left of the time budget (:mod:`fedqr.planner.plateau`); then, where a default
   budget stopped the leading arm while its loss fell, that arm is followed on a raised
   budget (:mod:`fedqr.planner.follow`).
5. Recommend the schedule with the lowest predicted mean test loss.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from numpy.typing import NDArray

from fedqr.planner.budget import CostModel
from fedqr.planner.fit import parabola_in_log_t
from fedqr.planner.follow import follow_leader
from fedqr.planner.grids import log_grid, refine_b, refine_q
from fedqr.planner.noise import NoiseBook
from fedqr.planner.plateau import second_look
from fedqr.planner.scenario import Scenario
from fedqr.planner.settings import (
    AUTO_REPEAT_ROWS,
    Memo,
    Prediction,
    SearchSettings,
    auto_repeats,
    first_arms,
    first_grid,
)
from fedqr.planner.twin import Proxy, TwinRun, simulate_stacked
from fedqr.planner.twin_kernel import KernelProxy, TwinWork, simulate_columns_kernel

__all__ = ["AUTO_REPEAT_ROWS", "Memo", "Prediction", "SearchSettings", "Searcher", "auto_repeats",
           "first_arms", "first_grid"]

Progress = Callable[[str, int], None]


@dataclass
class Searcher:
    """Runs the search for one scenario on one proxy; simulated losses are memoised in
    ``memo`` (a re-plan with the same memo simulates nothing)."""

    scenario: Scenario
    proxy: Proxy | KernelProxy
    settings: SearchSettings
    device: torch.device
    memo: Memo = field(default_factory=dict)
    fitted: Memo = field(default_factory=dict)  # read off fitted curves, not simulated
    progress: Progress | None = None
    cost: CostModel | None = None  # with budget_s: skip optional batches beyond the budget
    budget_s: float | None = None
    follow_budget_s: float | None = None  # raised budget for the leader (fedqr.planner.follow)
    simulated_rounds: int = 0
    column_rounds: int = 0  # rounds summed over every simulated column (horizon x repeat)
    columns: int = 0  # simulated columns (horizons x repeats)
    sim_time_s: float = 0.0  # wall time spent simulating

    def __post_init__(self) -> None:
        self._noise = NoiseBook(scenario=self.scenario, sizes=self.proxy.real_sizes,
                                num_params=self.proxy.num_params)
        self._gen = torch.Generator(device=self.device).manual_seed(self.settings.seed)
        self.repeats = self.settings.repeats or auto_repeats(int(self.proxy.proxy_sizes.sum()))
        self._coarse_keys: set[tuple[int, float, int]] = set()  # what steps 1-2 asked for
        self.estimated_s = 0.0  # estimated seconds of every batch asked for (memo or not)
        self.skipped: list[tuple[int, float, list[int]]] = []  # left out for the budget
        self.cut_short: list[tuple[int, float, int]] = []  # arms the budget stopped falling
        self.at_limit: list[tuple[int, float, int]] = []  # arms still falling at t_limit
        self._charged: set[tuple[int, float, int]] = set()
        self._work = TwinWork()
        self._init = (self.proxy.initial(repeats=self.repeats, seed=self.settings.seed)
                      if isinstance(self.proxy, KernelProxy) else None)

    @property
    def row_gradients(self) -> int | None:
        """Per-sample gradients the kernel twin computed (``None``: the logistic twin)."""
        return self._work.row_gradients if isinstance(self.proxy, KernelProxy) else None

    def untrained_loss(self) -> float:
        """Test loss of the untrained model: ``log k`` for softmax regression from zero, the
        mean over the twin's initial models for any other model."""
        if isinstance(self.proxy, KernelProxy):
            assert self._init is not None  # set with a kernel proxy
            return float(self.proxy.engine.test_loss(self._init).mean())
        return untrained_loss(self.proxy)

    # -- simulation ---------------------------------------------------------------------
    def evaluate(self, b: int, q: float, rounds: list[int], *, optional: bool = False,
                 together: tuple[Searcher, ...] = ()) -> bool:
        """Simulate the horizons of ``rounds`` not yet in the memo (one batch); an
        ``optional`` batch is left out (``False``) when it would take the estimate over the
        budget. ``together``: searchers of the same scenario on other logistic proxies
        (:func:`fedqr.planner.twin.stackable` with this one's, none of them holding these
        horizons) simulated in the same batch, with this searcher's draws (each gets what
        its own generator, in the same state, would have given)."""
        if together and not all(isinstance(p, Proxy)
                                for p in (self.proxy, *(o.proxy for o in together))):
            raise ValueError("only logistic proxies are simulated together")
        if not self._within_budget(b, q, rounds, optional=optional):
            return False
        self._coarse_keys.update((b, q, int(t)) for t in rounds)
        todo = sorted({t for t in rounds if (b, q, t) not in self.memo})
        if not todo:
            return True
        if any((b, q, t) in o.memo for o in together for t in todo):
            raise ValueError("a searcher simulated together already holds these horizons")
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

        started = time.perf_counter()
        if isinstance(self.proxy, KernelProxy):
            assert self._init is not None  # set with a kernel proxy
            losses = simulate_columns_kernel(self.proxy, run, horizons=hs, std=std,
                                             generator=self._gen, init=self._init,
                                             on_round=tick, work=self._work)
        else:
            proxies = [self.proxy, *(o.proxy for o in together)]
            stacked = simulate_stacked([p for p in proxies if isinstance(p, Proxy)], run,
                                       horizons=hs, std=std, generator=self._gen,
                                       on_round=tick)
            for other, got in zip(together, stacked[1:], strict=True):
                other._record(b, q, todo, got, seconds=0.0)
            losses = stacked[0]
        self._record(b, q, todo, losses, seconds=time.perf_counter() - started)
        return True

    def _record(self, b: int, q: float, todo: list[int], losses: NDArray[np.float64], *,
                seconds: float) -> None:
        """Store a batch's losses and count what it simulated."""
        self.sim_time_s += seconds
        self.simulated_rounds += max(todo)
        self.column_rounds += sum(todo) * self.repeats
        self.columns += len(todo) * self.repeats
        for t, row in zip(todo, losses, strict=True):
            self.memo[(b, q, t)] = tuple(float(v) for v in row)

    def _within_budget(self, b: int, q: float, rounds: list[int], *, optional: bool) -> bool:
        """Charge the estimate of the horizons not charged before (memoised or not, so a
        re-plan from the cache takes the same path); ``False``: an optional batch that
        does not fit."""
        if self.cost is None or self.budget_s is None:
            return True
        new = sorted({int(t) for t in rounds if (b, q, int(t)) not in self._charged})
        price = self.cost.batch_s(b=b, q=q, horizons=new, repeats=self.repeats)
        if optional and new and self.estimated_s + price > self.budget_s:
            self.skipped.append((b, q, new))
            return False
        self.estimated_s += price
        self._charged.update((b, q, t) for t in new)
        return True

    def predictions(self, keys: set[tuple[int, float, int]] | None = None) -> list[Prediction]:
        """Every simulated schedule (or those of ``keys``), best first."""
        out = []
        for (b, q, t), losses in {**self.fitted, **self.memo}.items():
            if keys is not None and (b, q, t) not in keys:
                continue
            arr = np.asarray(losses)
            finite = np.isfinite(arr).all()
            mean = float(arr.mean()) if finite else float("inf")
            se = float(arr.std(ddof=1) / np.sqrt(len(arr))) if finite else float("inf")
            out.append(Prediction(rounds=t, clients_per_round=b, sample_rate=q, mean=mean,
                                  stderr=se, fitted=(b, q, t) not in self.memo))
        return sorted(out, key=lambda p: (p.mean, p.rounds, p.clients_per_round))

    def _best(self, b: int, q: float,
              keys: set[tuple[int, float, int]] | None = None) -> Prediction:
        return min((p for p in self.predictions(keys)
                    if p.clients_per_round == b and p.sample_rate == q),
                   key=lambda p: (p.mean, p.rounds))

    # -- the search ---------------------------------------------------------------------
    def run(self) -> list[Prediction]:
        """Search and return every prediction, best first."""
        s = self.scenario
        bs, qs = first_arms(s, self.proxy.real_sizes)
        if s.rounds is not None:
            for b in bs:
                for q in qs:
                    self.evaluate(b, q, [0, s.rounds])
            self._refine_b_q(bs, qs, fixed_t=s.rounds)
            return self.predictions()
        self._race([(b, q) for b in bs for q in qs], optional=False)
        self._refine_b_q(bs, qs, fixed_t=None)
        self._fine()
        if isinstance(self.proxy, KernelProxy):  # a network's loss can stall and fall again
            extended = second_look(self)
            best = self.predictions()[0]
            if (best.clients_per_round, best.sample_rate) in extended:
                self._fine([(best.clients_per_round, best.sample_rate)])
            followed = follow_leader(self)  # a default budget that stopped the leader falling
            if followed is not None:
                self._fine([followed])
        return self.predictions()

    def coarse_arms(self) -> list[tuple[int, float]]:
        """The arms (b, q) of the coarse grid, by b, then q."""
        return list(dict.fromkeys((b, q) for b, q, _ in sorted(self._coarse_keys)))

    def coarse_curve(self, b: int, q: float) -> list[tuple[int, float]]:
        """``(T, mean loss)`` of the arm's coarse horizons, by T."""
        return sorted((p.rounds, p.mean) for p in self.predictions(self._coarse_keys)
                      if p.clients_per_round == b and p.sample_rate == q)

    def _race(self, arms: list[tuple[int, float]], *, optional: bool = True) -> None:
        """Coarse horizons up to ``t_first`` for every arm, then doublings for the arms that
        still improve and can still win (module docstring, step 1)."""
        st = self.settings
        grid = first_grid(self.scenario, st)
        for b, q in arms:
            self.evaluate(b, q, grid, optional=optional)
        hi = st.t_first
        alive = [arm for arm in arms if self.still_falling(*arm, hi)]
        while alive and hi < st.t_limit:
            alive = self._survivors(alive, hi)
            new_hi = min(st.t_limit, max(hi + 1, int(hi * st.coarse_ratio)))
            for b, q in alive:
                if not self.evaluate(b, q, [new_hi], optional=True):
                    self.cut_short.append((b, q, hi))  # still falling at hi
            hi = new_hi
            alive = [arm for arm in alive if self.still_falling(*arm, hi)]
        if hi >= st.t_limit:  # the limit, not the loss, ended these arms
            self.at_limit.extend((b, q, hi) for b, q in alive)

    def _survivors(self, alive: list[tuple[int, float]], t: int) -> list[tuple[int, float]]:
        """The alive arms among the best half of every arm simulated at ``t`` and within
        ``race_margin`` of the best of them."""
        at_t = {(b, q): p.mean for p in self.predictions(self._coarse_keys)
                for b, q in [(p.clients_per_round, p.sample_rate)] if p.rounds == t}
        ranked = sorted(at_t, key=lambda arm: at_t[arm])
        keep = set(ranked[:max(1, -(-len(ranked) // 2))])
        best = at_t[ranked[0]]
        limit = best + self.settings.race_margin * abs(best)
        return [arm for arm in alive if arm in keep and at_t[arm] <= limit]

    def still_falling(self, b: int, q: float, hi: int) -> bool:
        """Whether T = hi is the best coarse horizon of (b, q) and beats the one below by
        more than ``min_gain`` (relative): more rounds for a negligible gain are not worth
        their communication."""
        curve = sorted((p.rounds, p.mean) for p in self.predictions(self._coarse_keys)
                       if p.clients_per_round == b and p.sample_rate == q)
        if not curve:  # the arm was left out for the budget
            return False
        best_t = min(curve, key=lambda tm: (tm[1], tm[0]))[0]
        if best_t < hi or len(curve) < 2:
            return False
        below, top = curve[-2][1], curve[-1][1]
        return below - top > self.settings.min_gain * abs(top)

    def _refine_b_q(self, bs: list[int], qs: list[float], *, fixed_t: int | None) -> None:
        s = self.scenario
        best = self.predictions(self._coarse_keys)[0]
        if s.clients_per_round is None:
            new_bs = refine_b(best.clients_per_round, set(bs), s.num_clients)
            if fixed_t:
                for b in new_bs:
                    self.evaluate(b, best.sample_rate, [0, fixed_t], optional=True)
            else:
                self._race([(b, best.sample_rate) for b in new_bs])
        if s.poisson and s.sample_rate is None:
            best = self.predictions(self._coarse_keys)[0]
            new_qs = refine_q(best.sample_rate, np.asarray(qs))
            if fixed_t:
                for q in new_qs:
                    self.evaluate(best.clients_per_round, q, [0, fixed_t], optional=True)
            else:
                self._race([(best.clients_per_round, q) for q in new_qs])

    def _fine(self, arms: list[tuple[int, float]] | None = None) -> None:
        """The fine T grid of ``arms`` (default: the ``finalists`` best arms)."""
        st = self.settings
        coarse = set(self._coarse_keys)  # a re-plan from a full memo takes the same path
        if arms is None:  # the arms of the best predictions, best first
            arms = list(dict.fromkeys((p.clients_per_round, p.sample_rate)
                                      for p in self.predictions(coarse)))[:st.finalists]
        for b, q in arms:
            t_best = max(1, self._best(b, q, coarse).rounds)
            lo, hi = max(1, t_best // 2), min(st.t_limit, 2 * t_best)
            fine = [int(t) for t in log_grid(lo, max(lo, hi), ratio=st.fine_ratio)]
            if t_best <= st.fine_simulate_up_to:
                self.evaluate(b, q, fine, optional=True)
            else:
                self._fit(b, q, fine, coarse)

    def _fit(self, b: int, q: float, fine: list[int],
             coarse: set[tuple[int, float, int]]) -> None:
        """Read the fine horizons off each repeat's coarse losses within a factor 4 of the
        coarse best (:func:`fedqr.planner.fit.parabola_in_log_t`)."""
        t_best = self._best(b, q, coarse).rounds
        ts = sorted(t for (bb, qq, t) in coarse if (bb, qq) == (b, q)
                    and t > 0 and t_best / 4 <= t <= 4 * t_best and (b, q, t) in self.memo)
        wanted = [t for t in fine if (b, q, t) not in self.memo]
        curves = np.asarray([self.memo[(b, q, t)] for t in ts])  # (points, repeats)
        for t, values in parabola_in_log_t(ts, curves, wanted).items():
            self.fitted[(b, q, t)] = values


def untrained_loss(proxy: Proxy) -> float:
    """Test loss of theta = 0 (the uniform prediction): ``log k``."""
    return float(np.log(proxy.layout.num_classes))
