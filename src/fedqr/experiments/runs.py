"""Runs cached by configuration hash: an interrupted sweep resumes without losing finished runs.

A :class:`RunSpec` (data set, data fraction, partition, :class:`~fedqr.sim.config.SimConfig`)
hashes to a file ``runs/<key>.json`` in a :class:`RunStore`. Each finished run is written
atomically the moment it ends, so killing a sweep loses at most the run in progress, and a
rerun skips every stored run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedqr._atomic import DamagedFileError, read_json, write_json_atomic
from fedqr.data import (
    Dataset,
    DatasetName,
    DataSpec,
    Partition,
    PartitionKind,
)
from fedqr.sim.config import EvalTrain, SimConfig
from fedqr.sim.engine import simulate
from fedqr.sim.result import SimResult, jsonable

__all__ = ["RunSpec", "RunStore", "execute", "prepare_data", "simulate_spec"]

STORE_VERSION = 4
"""Bumped whenever the same configuration and seed would give other numbers (2: the Laplace
sampler draws from float64 uniforms, and constant columns leave the GEMMs; 3: the data recipe
:class:`fedqr.data.DataSpec` draws a training share from its own stream; 4: Gaussian noise is
drawn once for each round's aggregate, :meth:`fedqr.sim.streams.Streams.noise_sum`), so a
stored run is never mixed with runs of a newer engine."""


@dataclass(frozen=True)
class RunSpec:
    """One simulated experiment (all its repeats): what it runs on and how.

    Attributes
    ----------
    dataset, fraction
        Data set and the share of its training split used (drawn with ``data_seed``).
    partition
        How the (fractional) training split is divided among the clients.
    data_seed
        Seed of the fraction draw and of the partition.
    config
        The simulation (N, b, T, privacy, learning rate, repeats, seed, eval cadence).
    tags
        Free labels for analysis (experiment name, eps, ...); not part of the hash.
    """

    dataset: DatasetName
    fraction: float
    partition: PartitionKind
    data_seed: int
    config: SimConfig
    tags: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got fraction={self.fraction}")

    def identity(self) -> dict[str, Any]:
        """Everything the result depends on, as JSON-ready data.

        ``train_eval='every'`` is left out: runs stored before the setting existed evaluated
        the training objective at every evaluation, so they keep their keys.
        """
        config = jsonable(self.config)
        if self.config.train_eval is EvalTrain.EVERY:
            del config["train_eval"], config["train_eval_rows"]
        return {"version": STORE_VERSION, "dataset": self.dataset.value,
                "fraction": self.fraction, "partition": self.partition.value,
                "data_seed": self.data_seed, "config": config}

    def key(self) -> str:
        """Stable 20-hex-digit hash of :meth:`identity`."""
        text = json.dumps(self.identity(), sort_keys=True, allow_nan=True)
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    def tag(self, name: str, default: Any = None) -> Any:
        """The value of tag ``name``."""
        return dict(self.tags).get(name, default)


class RunStore:
    """Finished runs under ``root/runs``, one JSON file per :meth:`RunSpec.key`."""

    def __init__(self, root: Path, *, warn: Callable[[str], None] | None = None) -> None:
        self.root = Path(root)
        self.dir = self.root / "runs"
        self.warn = warn

    def path(self, spec: RunSpec) -> Path:
        """Where the run of ``spec`` is (or will be) stored."""
        return self.dir / f"{spec.key()}.json"

    def get(self, spec: RunSpec) -> dict[str, Any] | None:
        """The stored run document, or ``None``: a damaged file counts as missing (it is
        recomputed) and is named through ``warn``."""
        path = self.path(spec)
        try:
            doc = read_run(path)
        except FileNotFoundError:
            return None
        except DamagedFileError as e:
            if self.warn is not None:
                self.warn(f"{e}; recomputing it")
            return None
        return doc if doc.get("identity") == json.loads(json.dumps(spec.identity())) else None

    def put(self, spec: RunSpec, doc: dict[str, Any]) -> None:
        """Store ``doc`` for ``spec`` atomically."""
        write_json_atomic(self.path(spec), {**doc, "identity": spec.identity()})


def read_run(path: Path) -> dict[str, Any]:
    """A stored run document; :class:`DamagedFileError` naming ``path`` if it is not one."""
    doc = read_json(path)
    if not (isinstance(doc, dict) and isinstance(doc.get("runs"), list)
            and isinstance(doc.get("clients"), list) and isinstance(doc.get("summary"), dict)):
        raise DamagedFileError(f"{path} is damaged: not a run document (an object with "
                               "'runs', 'clients' and 'summary')")
    return doc


DataCache = dict[tuple[DatasetName, float, PartitionKind, int, int], tuple[Dataset, Partition]]


def prepare_data(
    dataset: DatasetName, *, fraction: float, partition: PartitionKind, seed: int,
    num_clients: int, data_dir: Path | None = None, alpha: float = 0.5,
) -> tuple[Dataset, Partition]:
    """Load ``dataset`` (a ``fraction`` of its training split) and partition it with the one
    data recipe, :class:`fedqr.data.DataSpec`."""
    data = DataSpec(dataset=dataset, fraction=fraction, partition=partition, alpha=alpha,
                    num_clients=num_clients, seed=seed, data_dir=data_dir).build()
    return data.dataset, data.partition


def simulate_spec(
    spec: RunSpec, ds: Dataset, part: Partition, *, device: str | torch.device = "cpu",
    on_round: Callable[[int], None] | None = None,
) -> SimResult:
    """Run ``spec`` with the engine of its data set: the batched logistic-regression engine
    (MNIST, digits) or the torch-model engine with the paper's CNN (FEMNIST)."""
    from fedqr.models.factory import model_for

    if model_for(ds).is_network:
        from fedqr.sim.network import simulate_network

        return simulate_network(ds, part, spec.config, device=device, on_round=on_round)
    return simulate(ds, part, spec.config, device=device, on_round=on_round)


def _data(spec: RunSpec, data_dir: Path | None, cache: DataCache) -> tuple[Dataset, Partition]:
    key = (spec.dataset, spec.fraction, spec.partition, spec.data_seed, spec.config.num_clients)
    if key not in cache:
        cache[key] = prepare_data(spec.dataset, fraction=spec.fraction,
                                  partition=spec.partition, seed=spec.data_seed,
                                  num_clients=spec.config.num_clients, data_dir=data_dir)
    return cache[key]


def execute(
    specs: Sequence[RunSpec],
    *,
    store: RunStore,
    data_dir: Path | None = None,
    device: str | torch.device = "cpu",
    extra: Callable[[RunSpec, Dataset, np.ndarray], dict[str, Any]] | None = None,
    on_run: Callable[[RunSpec, bool], None] | None = None,
    on_round: Callable[[RunSpec, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every spec not yet in ``store`` (storing each as it finishes); return all documents.

    Parameters
    ----------
    specs
        The runs, in order; duplicates (same key) run once.
    extra
        Called after a run with ``(spec, dataset, final_theta)`` (``(R, k, p)`` for logistic
        regression, ``(R, P)`` for a network); its dict is stored under ``"extra"`` (e.g. the
        distance to the optimum).
    on_run
        Called once per distinct spec with ``(spec, computed)`` (``False``: it was stored).
    on_round
        Called with ``(spec, finished rounds)`` while a run computes (progress of long runs).
    """
    cache: DataCache = {}
    docs: dict[str, dict[str, Any]] = {}
    for spec in specs:
        key = spec.key()
        if key in docs:  # a duplicate of an earlier spec of this sweep
            continue
        doc = store.get(spec)
        computed = doc is None
        if doc is None:
            ds, part = _data(spec, data_dir, cache)
            def tick(t: int, spec: RunSpec = spec) -> None:
                if on_round is not None:
                    on_round(spec, t)

            result = simulate_spec(spec, ds, part, device=device, on_round=tick)
            doc = result.to_json()
            if extra is not None:
                doc["extra"] = extra(spec, ds, result.final_theta)
            store.put(spec, doc)
        docs[key] = doc
        if on_run is not None:
            on_run(spec, computed)
    return [docs[s.key()] for s in specs]
