"""The planner's cache: simulated losses of a plan, keyed by everything they depend on."""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from fedqr._cache import PLANNER_VERSION, cache_home
from fedqr._precision import Products
from fedqr.models.kernel import Kernel
from fedqr.planner.budget import TWIN_COST_VERSION
from fedqr.planner.kernels import kernel_identity
from fedqr.planner.scenario import Scenario
from fedqr.planner.search import Memo, SearchSettings

__all__ = ["PLANNER_VERSION", "cache_dir", "cache_key", "load_memo", "save_memo"]

_INF_JSON = 1e308  # a diverged twin run's loss in the cache file (strict JSON has no inf)


def cache_dir() -> Path:
    """``$FEDQR_CACHE/plans`` (default ``~/.cache/fedqr/plans``)."""
    return cache_home() / "plans"


def cache_key(scenario: Scenario, proxy: dict[str, Any], settings: SearchSettings, *,
              sizes: np.ndarray | None = None, kernel: Kernel | None = None,
              products: Products | None = None) -> str:
    """The cache key of a plan: the planner's version, the data source, the reported sizes,
    the scenario, the proxy, the search settings and the model: ``kernel``, the one the
    kernel twin simulates (:func:`fedqr.planner.kernels.kernel_identity`, with the version of
    the cost model its budget is spent on), else the scenario's own kernel's description
    (``None``: none given), and the logistic twin's product format (:mod:`fedqr._precision`;
    ``None`` for the kernel twin)."""
    from fedqr.sim.result import jsonable

    doc: dict[str, Any] = {
        "version": PLANNER_VERSION, "data": scenario.data.identity(),
        "sizes": None if sizes is None else [int(v) for v in sizes],
        "scenario": jsonable({k: v for k, v in vars(scenario).items()
                              if k not in ("data", "kernel")}),
        "kernel": {**kernel_identity(kernel), "cost_version": TWIN_COST_VERSION}
        if kernel is not None else (
            None if scenario.kernel is None else scenario.kernel.describe()),
        "proxy": proxy, "products": products, "settings": {k: v for k, v in asdict(settings).items()
                                     if v is not None or k == "repeats"}}
    text = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def load_memo(path: Path) -> Memo | None:
    """The memo stored at ``path`` (``None``: missing or unreadable)."""
    try:
        rows = json.loads(path.read_text())["memo"]
        return {(int(b), float(q), int(t)): tuple(math.inf if float(v) >= _INF_JSON else float(v)
                                                  for v in losses)
                for b, q, t, losses in rows}
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def save_memo(path: Path, memo: Memo) -> bool:
    """Write ``memo`` atomically; whether it was written. The cache is best effort: a folder
    that cannot be written (a read-only home, ``FEDQR_CACHE`` naming a file) is reported once
    per folder on the ``fedqr`` logger and the plan goes on without it."""
    from fedqr.sim.result import write_json_atomic

    rows = [[b, q, t, [v if math.isfinite(v) else _INF_JSON for v in losses]]
            for (b, q, t), losses in sorted(memo.items())]
    try:
        write_json_atomic(path, {"version": PLANNER_VERSION, "memo": rows})
    except OSError as e:
        if path.parent not in _UNWRITABLE:
            _UNWRITABLE.add(path.parent)
            _LOG.warning("warning: could not write the planner cache in %s (%s): planning "
                         "without it; set FEDQR_CACHE to a writable folder or pass --no-cache",
                         path.parent, e.strerror or e)
        return False
    return True


_UNWRITABLE: set[Path] = set()
_LOG = logging.getLogger("fedqr.planner.cache")
