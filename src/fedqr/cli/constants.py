"""Where the planner's constants come from: a JSON file, or an estimate on a data set (cached).

An estimate reads client data without privacy (:mod:`fedqr.theory.estimate`); the JSON it
writes says so under ``"estimate"`` along with its provenance and diagnostics.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedqr._atomic import DamagedFileError, read_json, write_json_atomic
from fedqr.cli._common import err
from fedqr.data import DatasetName, DataSpec, PartitionKind
from fedqr.models.logreg import Norm
from fedqr.privacy import Mechanism, mechanism_for
from fedqr.theory import ProblemConstants, constants_from_json, constants_to_json
from fedqr.theory.estimate import EstimatedConstants, estimate_constants

# bump when the estimators change: invalidates cached estimates (2: the proxy draw has its
# own stream, default_rng([seed, 2]), since the data recipe became fedqr.data.DataSpec)
ESTIMATE_VERSION = 2


@dataclass(frozen=True)
class EstimateSpec:
    """Everything an estimate depends on (its cache key); budgets are not part of it."""

    dataset: DatasetName
    partition: PartitionKind
    num_clients: int
    alpha: float
    mechanism: Mechanism
    clip: float
    sample_rate: float
    weight_decay: float
    proxy_fraction: float | None
    seed: int
    gd_steps: int = 20

    def __post_init__(self) -> None:
        if not mechanism_for(self.mechanism).private:
            raise ValueError(f"mechanism must be a private mechanism, got "
                             f"mechanism={self.mechanism.value!r}")
        if not self.clip > 0 or not np.isfinite(self.clip):
            raise ValueError(f"clip must be > 0 and finite, got clip={self.clip}")
        if not self.weight_decay > 0:
            raise ValueError(f"weight_decay must be > 0 (strong convexity), "
                             f"got weight_decay={self.weight_decay}")
        if self.proxy_fraction is not None and not 0 < self.proxy_fraction < 1:
            raise ValueError(f"proxy_fraction must be in (0, 1), "
                             f"got proxy_fraction={self.proxy_fraction}")

    @property
    def norm(self) -> Norm:
        """The mechanism's clipping norm (l1 for Laplace, l2 for Gaussian)."""
        return mechanism_for(self.mechanism).norm

    def key(self) -> str:
        """Stable hash of the spec and the estimator version."""
        doc = {k: (v.value if hasattr(v, "value") else v) for k, v in vars(self).items()}
        doc["version"] = ESTIMATE_VERSION
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def cache_dir() -> Path:
    """``$FEDQR_CACHE`` or ``~/.cache/fedqr``, subfolder ``constants``."""
    root = os.environ.get("FEDQR_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "fedqr"
    return base / "constants"


def estimate_document(est: EstimatedConstants, spec: EstimateSpec) -> dict[str, Any]:
    """Constants JSON plus an ``"estimate"`` section: provenance, privacy warning, diagnostics."""
    doc: dict[str, Any] = json.loads(constants_to_json(est.constants))
    doc["estimate"] = {
        "reads_private_data": est.reads_private_data,
        "warning": "estimated from the clients' data WITHOUT differential privacy"
                   + (" (a proxy share of it)" if spec.proxy_fraction else ""),
        "spec": {k: (v.value if hasattr(v, "value") else v) for k, v in vars(spec).items()},
        "mu_i": list(est.mu_i),
        "lambda_i": list(est.lambda_i),
        "gamma": est.constants.gamma,
        "F_i_star": list(est.F_i_star),
        "Y0_i": list(est.Y0_i),
        "G2_max_per_client": est.G2_trajectory.max(axis=0).tolist(),
        "clipped_fraction": {"theta_0": est.clipped_fraction[0],
                             "end_of_gd": est.clipped_fraction[1]},
        "norm_quantiles": {
            "quantiles": [0.5, 0.9, 0.99, 1.0],
            **{k: {"theta_0": v[0].tolist(), "end_of_gd": v[-1].tolist()}
               for k, v in est.norm_quantiles.items()},
        },
    }
    return doc


def estimate_for(spec: EstimateSpec, *, data_dir: Path | None, eps: float, delta: float,
                 use_cache: bool) -> dict[str, Any]:
    """The estimate document for ``spec`` (from the cache when present), budgets filled in."""
    path = cache_dir() / f"{spec.key()}.json"
    doc: dict[str, Any] | None = _cached(path) if use_cache else None
    if doc is None:
        data = DataSpec(dataset=spec.dataset, partition=spec.partition, alpha=spec.alpha,
                        num_clients=spec.num_clients, seed=spec.seed,
                        data_dir=data_dir).build()
        ds, part = data.dataset, data.partition
        rng = np.random.default_rng([spec.seed, 2])  # the proxy draw
        common: dict[str, Any] = dict(
            dataset=ds, partition=part, clip=spec.clip, norm=spec.norm, eps=eps,
            delta=delta, sample_rate=spec.sample_rate, weight_decay=spec.weight_decay,
            proxy_fraction=spec.proxy_fraction, rng=rng)
        from fedqr.models.factory import model_for

        if model_for(ds).is_network:  # the paper's CNN: local estimates
            from fedqr.sim.network_constants import estimate_network_constants

            est = estimate_network_constants(**common)
        else:
            est = estimate_constants(**common, gd_steps=spec.gd_steps)
        doc = estimate_document(est, spec)
        if use_cache:
            write_json_atomic(path, doc)
    n = doc["N"]
    doc["eps_i"], doc["delta_i"] = [eps] * n, [delta] * n
    return doc


def _cached(path: Path) -> dict[str, Any] | None:
    """The cached estimate in ``path``; ``None`` (a miss) when absent or damaged."""
    try:
        doc = read_json(path)
        constants_from_json(json.dumps(doc))
        if not isinstance(doc["estimate"], dict):
            raise TypeError("'estimate' must be an object")
    except FileNotFoundError:
        return None
    except (DamagedFileError, TypeError, KeyError, ValueError, AttributeError) as e:
        reason = str(e) if isinstance(e, DamagedFileError) else f"{path}: {e!r}"
        err.print(f"[yellow]warning:[/] damaged cached estimate, recomputing it ({reason}; "
                  "--no-cache skips the cache)")
        return None
    return doc if isinstance(doc, dict) else None


def read_constants(path: Path) -> tuple[ProblemConstants, dict[str, Any]]:
    """Parse a constants JSON file (``eps`` defaults to 1 when the file has no budget)."""
    if not path.is_file():
        raise ValueError(f"constants must be an existing JSON file, got constants={str(path)!r}")
    try:
        doc = read_json(path)
        return constants_from_json(json.dumps(doc), eps=1.0), doc
    except (DamagedFileError, TypeError, KeyError, ValueError, AttributeError) as e:
        reason = str(e) if isinstance(e, DamagedFileError | ValueError) else repr(e)
        raise ValueError(f"constants must be a constants JSON file (see fedqr estimate), "
                         f"got constants={str(path)!r}: {reason}") from None
