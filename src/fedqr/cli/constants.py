"""Where the planner's constants come from: a JSON file, or an estimate of a workload (cached).

An estimate reads client data without privacy (:mod:`fedqr.theory.estimate`); the JSON it
writes says so under ``"estimate"`` along with its provenance and diagnostics. The workload is
a built-in data set with its partition or a user's data file (``--data``), and a model kernel
(the data set's paper model, or ``--model``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedqr._atomic import DamagedFileError, read_json, write_json_atomic
from fedqr.cli._common import err
from fedqr.data import ClientData, DatasetName, DataSpec, PartitionKind
from fedqr.data.spec import files_stamp
from fedqr.models.kernel import Kernel
from fedqr.models.logreg import Norm
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.privacy import Mechanism, mechanism_for
from fedqr.privacy.spec import check_private
from fedqr.theory import ProblemConstants, constants_from_json, constants_to_json
from fedqr.theory.estimate import EstimatedConstants, EstimateSettings, estimate_constants

# bump when the estimators change: invalidates cached estimates (2: the proxy draw has its
# own stream, default_rng([seed, 2]), since the data recipe became fedqr.data.DataSpec)
ESTIMATE_VERSION = 3  # 3: a user's data defaults to linear (was logreg)

_OPTIONAL = ("model", "hidden", "data", "files")
"""Fields left out of the key while ``None``: the keys of the built-in data sets' paper models
stay those of the estimates cached before these fields existed."""


@dataclass(frozen=True)
class EstimateSpec:
    """Everything an estimate depends on (its cache key); budgets are not part of it.

    A built-in workload names ``dataset``, ``partition`` and ``alpha``; a user's data leaves
    them ``None`` and gives ``data``, the sha256 of its arrays. ``model`` is ``None`` for the
    data's default model (the paper's, or ``linear`` for a user's data), else its name
    (``hidden``: an ``mlp``'s widths). ``gd_steps`` is the length of softmax regression's GD
    run (a torch model's is its own default).
    """

    dataset: DatasetName | None
    partition: PartitionKind | None
    num_clients: int
    alpha: float | None
    mechanism: Mechanism
    clip: float
    sample_rate: float
    weight_decay: float
    proxy_fraction: float | None
    seed: int
    gd_steps: int = 20
    model: str | None = None
    hidden: str | None = None
    data: str | None = None
    files: str | None = None  # a built-in set's files_stamp (FEMNIST: its files are unverified)

    def __post_init__(self) -> None:
        if (self.dataset is None) == (self.data is None):
            raise ValueError("an estimate needs exactly one of a built-in dataset or a data "
                             f"file's digest, got dataset={self.dataset}, data={self.data}")
        check_private(self.mechanism)
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

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON values (enums by value)."""
        return {k: (v.value if hasattr(v, "value") else v) for k, v in vars(self).items()}

    def key(self) -> str:
        """Stable hash of the spec and the estimator version."""
        doc = {k: v for k, v in self.to_json().items() if k not in _OPTIONAL or v is not None}
        doc["version"] = ESTIMATE_VERSION
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def cache_dir() -> Path:
    """``$FEDQR_CACHE`` or ``~/.cache/fedqr``, subfolder ``constants``."""
    root = os.environ.get("FEDQR_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "fedqr"
    return base / "constants"


def estimate_document(est: EstimatedConstants, spec: EstimateSpec, *,
                      model: dict[str, object] | None = None,
                      data: dict[str, Any] | None = None) -> dict[str, Any]:
    """Constants JSON plus an ``"estimate"`` section: provenance (the spec, the model's
    description, a data file's identity), privacy warning, diagnostics."""
    doc: dict[str, Any] = json.loads(constants_to_json(est.constants))
    doc["estimate"] = {
        "reads_private_data": est.reads_private_data,
        "warning": "estimated from the clients' data WITHOUT differential privacy"
                   + (" (a proxy share of it)" if spec.proxy_fraction else ""),
        "spec": spec.to_json(),
        **({"model": model} if model is not None else {}),
        **({"data": data} if data is not None else {}),
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
                 use_cache: bool, workload: tuple[ClientData, Kernel] | None = None,
                 identity: dict[str, Any] | None = None) -> dict[str, Any]:
    """The estimate document for ``spec`` (from the cache when present), budgets filled in.

    ``workload``: the client data and kernel ``spec`` describes when the caller holds them
    (a data file's, with its ``identity`` for the document); built from ``spec`` otherwise.
    """
    if spec.dataset is not None and spec.files is None:  # other FEMNIST files: another key
        spec = replace(spec, files=files_stamp(spec.dataset, data_dir=data_dir))
    path = cache_dir() / f"{spec.key()}.json"
    doc: dict[str, Any] | None = _cached(path) if use_cache else None
    if doc is None:
        data, kernel = workload if workload is not None else _workload(spec, data_dir)
        est = estimate_constants(
            dataset=data.dataset, partition=data.partition, clip=spec.clip, norm=spec.norm,
            eps=eps, delta=delta, sample_rate=spec.sample_rate,
            weight_decay=spec.weight_decay, kernel=kernel,
            proxy_fraction=spec.proxy_fraction, rng=np.random.default_rng([spec.seed, 2]),
            settings=EstimateSettings(
                gd_steps=spec.gd_steps if isinstance(kernel, LogRegKernel) else None))
        doc = estimate_document(est, spec, model=kernel.describe(), data=identity)
        if use_cache:
            try:
                write_json_atomic(path, doc)
            except OSError as e:  # the cache is best effort
                err.print(f"[yellow]warning:[/] could not cache the estimate in {path.parent} "
                          f"({e.strerror or e}): set FEDQR_CACHE to a writable folder or pass "
                          "--no-cache")
    n = doc["N"]
    doc["eps_i"], doc["delta_i"] = [eps] * n, [delta] * n
    return doc


def _workload(spec: EstimateSpec, data_dir: Path | None) -> tuple[ClientData, Kernel]:
    """A built-in spec's client data and its model kernel."""
    from fedqr.cli.data_options import parse_hidden
    from fedqr.models.workload import kernel_for

    if spec.dataset is None or spec.partition is None or spec.alpha is None:
        raise ValueError("a data file's estimate needs its workload (the spec holds only "
                         "its digest)")
    data = DataSpec(dataset=spec.dataset, partition=spec.partition, alpha=spec.alpha,
                    num_clients=spec.num_clients, seed=spec.seed, data_dir=data_dir).build()
    kernel = kernel_for(spec.model, data.dataset, preset=spec.dataset,
                        hidden=parse_hidden(spec.hidden) if spec.hidden else (64,))
    return data, kernel


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
