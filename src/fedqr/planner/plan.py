"""``make_plan``: the twin's recommended (T, b, q) for a scenario, with what it read and cost."""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedqr.data import ClientData, Dataset
from fedqr.data.source import DataSource
from fedqr.models.factory import ModelName
from fedqr.models.logreg import Norm
from fedqr.planner.scenario import DataUse, Scenario
from fedqr.planner.search import Memo, Prediction, Searcher, SearchSettings, untrained_loss
from fedqr.planner.twin import Proxy, make_proxy, proxy_rows
from fedqr.privacy import Mechanism, mechanism_for

__all__ = ["PLANNER_VERSION", "Plan", "PlanNotUseful", "ProxyChoice", "make_plan"]

PLANNER_VERSION = 4  # 2: automatic twin repeats; 3: extend T only for a 1% gain; 4: race, fit
"""Bumped when the twin or the search change: cached simulations are then not reused."""
AUTO_PROXY_ROWS = 4000
"""With ``share=None`` a clear proxy holds about this many rows in all (all rows if fewer)."""
USEFUL_MARGIN = 0.02
"""A plan helps only if its predicted loss is this share below the untrained model's."""


@dataclass(frozen=True, kw_only=True)
class ProxyChoice:
    """Which data the twin trains on.

    Attributes
    ----------
    use:
        ``clear-proxy`` (a share of the clients' own data, read without privacy) or
        ``public-proxy`` (``public``: a data set that is not the clients').
    share:
        ``clear-proxy``: the share of each client's rows (``None``: about
        :data:`AUTO_PROXY_ROWS` rows in all).
    public:
        ``public-proxy``: the recipe of the public data set, split into N clients the way
        the deployment is (its test split is the twin's evaluation set).
    public_label:
        How the public data set is named in the plan's ``data_used``.
    """

    use: DataUse = DataUse.CLEAR_PROXY
    share: float | None = None
    public: DataSource | None = None
    public_label: str = ""

    def __post_init__(self) -> None:
        if self.share is not None and not 0 < self.share <= 1:
            raise ValueError(f"proxy_share must be in (0, 1], got proxy_share={self.share}")
        if (self.use is DataUse.PUBLIC_PROXY) != (self.public is not None):
            raise ValueError("a public proxy data set is needed for data use public-proxy "
                             "(and only then)")


class PlanNotUseful(RuntimeError):
    """The planner predicts that no schedule beats the untrained model: nothing is run."""


@dataclass(frozen=True)
class Plan:
    """The planner's answer."""

    recommended: Prediction
    predictions: list[Prediction]
    untrained_loss: float
    useful: bool
    message: str
    data_used: dict[str, Any]
    privacy_cost: dict[str, Any]
    method: str = "twin"
    simulated_rounds: int = 0
    wall_time_s: float = 0.0
    from_cache: bool = False
    settings: dict[str, Any] = field(default_factory=dict)

    def check_useful(self) -> None:
        """Raise :class:`PlanNotUseful` (with the plan's message) unless the plan helps."""
        if not self.useful:
            raise PlanNotUseful(self.message)

    def runner_ups(self, k: int = 5) -> list[Prediction]:
        """The next best schedules."""
        return self.predictions[1:1 + k]

    def recommended_dict(self, *, mechanism: Mechanism) -> dict[str, Any]:
        """The ``recommended`` object of ``fedqr plan --json`` and result.json."""
        r = self.recommended
        return {"rounds": r.rounds, "clients_per_round": r.clients_per_round,
                "sample_rate": r.sample_rate if mechanism_for(mechanism).batch_rate(0.5) < 1
                else None,
                "predicted_test_loss": {"mean": r.mean, "stderr": r.stderr,
                                        "fitted": r.fitted},
                "method": self.method, "data_used": self.data_used,
                "privacy_cost": self.privacy_cost, "useful": self.useful,
                "message": self.message,
                "runner_ups": [p.as_dict() for p in self.runner_ups()]}


def _auto_share(sizes: np.ndarray) -> float:
    return min(1.0, AUTO_PROXY_ROWS / float(sizes.sum()))


def _proxy(scenario: Scenario, choice: ProxyChoice, real: ClientData | None,
           sizes: np.ndarray, norm: Norm, device: torch.device
           ) -> tuple[Proxy, dict[str, Any]]:
    rng = np.random.default_rng([scenario.data.seed, 3])
    if choice.use is DataUse.CLEAR_PROXY:
        assert real is not None  # make_plan builds the clients' data for a clear proxy
        share = _auto_share(sizes) if choice.share is None else choice.share
        rows = proxy_rows(real.partition, share=share, rng=rng)
        proxy = make_proxy(real, rows=rows, test=real.dataset, real_sizes=sizes, norm=norm,
                           device=device)
        return proxy, {"kind": DataUse.CLEAR_PROXY.value, "share": share,
                       "rows": int(proxy.proxy_sizes.sum()), "reads_private_data": True,
                       "warning": "the twin trains on a share of the clients' own data, read "
                                  "WITHOUT differential privacy (simulation only)"}
    assert choice.public is not None  # checked by ProxyChoice
    pub = choice.public.build()
    if real is not None:
        _check_compatible(pub.dataset, real.dataset)
    share = _auto_share(pub.partition.sizes) if choice.share is None else choice.share
    rows = proxy_rows(pub.partition, share=share, rng=rng)
    proxy = make_proxy(pub, rows=rows, test=pub.dataset, real_sizes=sizes, norm=norm,
                       device=device)
    return proxy, {"kind": DataUse.PUBLIC_PROXY.value, "proxy": choice.public_label
                   or str(choice.public.dataset), "rows": int(proxy.proxy_sizes.sum()),
                   "reads_private_data": False,
                   "reads_client_sizes": True}


def _check_compatible(proxy: Dataset, real: Dataset) -> None:
    if proxy.x_train.shape[1] != real.x_train.shape[1] or proxy.num_classes != real.num_classes:
        raise ValueError(
            f"proxy must have the deployment's features and classes ({real.x_train.shape[1]} "
            f"features, {real.num_classes} classes), got {proxy.x_train.shape[1]} features, "
            f"{proxy.num_classes} classes")


def _privacy_cost(use: DataUse) -> dict[str, Any]:
    if use is DataUse.PUBLIC_PROXY:
        return {"epsilon": 0.0, "delta": 0.0,
                "note": "the plan reads only public data and the clients' sizes"}
    return {"epsilon": None, "delta": None,
            "note": "no guarantee for the plan itself: it is computed from the clients' data "
                    "read without differential privacy (simulation only); the run it "
                    "recommends still spends exactly each client's budget"}


def cache_dir() -> Path:
    """``$FEDQR_CACHE/plans`` (default ``~/.cache/fedqr/plans``)."""
    root = os.environ.get("FEDQR_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "fedqr") / "plans"


def _cache_key(scenario: Scenario, choice: ProxyChoice, settings: SearchSettings,
               sizes: np.ndarray | None = None) -> str:
    from fedqr.sim.result import jsonable

    doc = {"version": PLANNER_VERSION, "data": scenario.data.identity(),
           "sizes": None if sizes is None else [int(v) for v in sizes],
           "scenario": jsonable({k: v for k, v in vars(scenario).items()
                                 if k not in ("data", "kernel")}),
           "kernel": None if scenario.kernel is None else scenario.kernel.describe(),
           "proxy": {"use": choice.use.value, "share": choice.share,
                     "public": None if choice.public is None else choice.public.identity()},
           "settings": asdict(settings)}
    text = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


_INF_JSON = 1e308  # a diverged twin run's loss in the cache file (strict JSON has no inf)


def _load_memo(path: Path) -> Memo | None:
    try:
        rows = json.loads(path.read_text())["memo"]
        return {(int(b), float(q), int(t)): tuple(math.inf if float(v) >= _INF_JSON else float(v)
                                                  for v in losses)
                for b, q, t, losses in rows}
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def _save_memo(path: Path, memo: Memo) -> None:
    from fedqr.sim.result import write_json_atomic

    rows = [[b, q, t, [v if math.isfinite(v) else _INF_JSON for v in losses]]
            for (b, q, t), losses in sorted(memo.items())]
    write_json_atomic(path, {"version": PLANNER_VERSION, "memo": rows})


def make_plan(scenario: Scenario, *, proxy: ProxyChoice | None = None,
              settings: SearchSettings | None = None, device: str | torch.device = "cpu",
              use_cache: bool = True, progress: Any = None,
              sizes: np.ndarray | None = None) -> Plan:
    """Predict the final test loss of every schedule with the twin and pick the best.

    Parameters
    ----------
    scenario:
        The deployment (data recipe, N, mechanism, budgets, clip, learning rate); its
        ``rounds``/``clients_per_round``/``sample_rate`` fix what the plan must not change.
    proxy:
        What data the twin trains on (default: an automatic clear-proxy share).
    settings:
        Search effort and the twin's seed.
    use_cache:
        Reuse (and store) the simulated losses of an identical earlier plan.
    progress:
        ``progress(label, simulated_rounds)`` while simulating.
    sizes:
        The clients' sizes ``d_i`` as they reported them, for a planner that never sees their
        data (a Flower federation): only with a ``public-proxy``; the scenario's data recipe
        then names the proxy's data set (the model) and N, and is not built.

    Returns
    -------
    Plan
        The recommended schedule, every prediction, and what the plan read and cost. The
        plan itself spends no privacy budget: each predicted schedule's noise is calibrated
        to spend each client's whole budget, and ``fedqr run`` charges it.
    """
    started = time.perf_counter()
    choice = proxy or ProxyChoice()
    st = settings or SearchSettings(seed=scenario.data.seed)
    dev = torch.device(device)
    model = scenario.model_name  # the model factory owns the default
    if model is not ModelName.LOGREG:
        name = scenario.kernel.name if scenario.kernel is not None else model.value
        raise ValueError(f"the twin planner simulates logistic regression, got "
                         f"model={name}; "
                         "plan with --model logreg, or use --method bound")
    if sizes is None:
        real: ClientData | None = scenario.data.build()
        assert real is not None
        real_sizes = real.partition.sizes
    else:
        real_sizes = np.asarray(sizes, dtype=np.int64)
        if choice.use is not DataUse.PUBLIC_PROXY:
            raise ValueError("sizes are given only to plan from a public proxy (the planner "
                             "then never reads the clients' data)")
        if real_sizes.shape != (scenario.num_clients,) or (real_sizes < 1).any():
            raise ValueError(f"sizes must be {scenario.num_clients} positive client sizes, "
                             f"got {real_sizes.tolist()}")
        real = None
    norm = scenario.spec.norm
    twin, data_used = _proxy(scenario, choice, real, real_sizes, norm, dev)
    key = _cache_key(scenario, choice, st, sizes)
    path = cache_dir() / f"{key}.json"
    memo = (_load_memo(path) if use_cache and path.is_file() else None)
    cached = memo is not None
    searcher = Searcher(scenario=scenario, proxy=twin, settings=st, device=dev,
                        memo=memo or {}, progress=progress)
    predictions = searcher.run()
    if use_cache and searcher.simulated_rounds:
        _save_memo(path, searcher.memo)
    best = predictions[0]
    base = untrained_loss(twin)
    useful = best.rounds > 0 and best.mean < (1 - USEFUL_MARGIN) * base
    message = (f"predicted test loss {best.mean:.4f} +- {best.stderr:.4f} at T={best.rounds}, "
               f"b={best.clients_per_round}" if useful else
               f"no schedule is predicted to help: the best predicted test loss "
               f"{best.mean:.4f} is not {USEFUL_MARGIN:.0%} below the untrained model's "
               f"{base:.4f}; the budget is too small for even one useful reply at this clip "
               f"(raise eps, lower the clip, or use more data per client)")
    return Plan(recommended=best, predictions=predictions, untrained_loss=base, useful=useful,
                message=message, data_used=data_used,
                privacy_cost=_privacy_cost(choice.use),
                simulated_rounds=searcher.simulated_rounds,
                wall_time_s=time.perf_counter() - started, from_cache=cached and
                searcher.simulated_rounds == 0,
                settings={**asdict(st), "repeats": searcher.repeats})
