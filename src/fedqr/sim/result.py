"""Results of a simulation: per-round metrics per repeat and per-client privacy figures."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedqr.data import Dataset
from fedqr.sim.config import SimConfig

if TYPE_CHECKING:
    from fedqr.sim.budget import ClientPrivacy


@dataclass(frozen=True)
class RoundMetrics:
    """Metrics of the model after ``round`` rounds, one value per repeat.

    ``train_loss`` is the regularised training objective F(theta) (cross-entropy plus
    (w/2)||theta||^2, the function the paper's bounds are about); ``test_loss`` is the plain
    test cross-entropy. ``epsilon_spent[g][i]`` is client i's spent epsilon in schedule group g
    (one group for round robin, one per repeat for random selection).
    """

    round: int
    test_loss: list[float]
    test_accuracy: list[float]
    train_loss: list[float]
    epsilon_spent: list[list[float | None]]


def jsonable(obj: Any) -> Any:
    if isinstance(obj, Enum):
        return obj.value
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    return obj


@dataclass(frozen=True)
class SimResult:
    """Everything a run produced. ``to_json()`` gives the ``result.json`` document."""

    config: SimConfig
    dataset: str
    clients: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    final_theta: np.ndarray  # (R, k, p)

    @classmethod
    def build(
        cls,
        *,
        config: SimConfig,
        dataset: Dataset,
        sizes: np.ndarray,
        setup_privacy: ClientPrivacy,
        history: list[RoundMetrics],
        stats: np.ndarray,
        theta: np.ndarray,
    ) -> SimResult:
        """Assemble per-client and per-repeat records (``stats``: clipped, snr, replies)."""
        priv = setup_privacy
        final_eps = priv.ledgers.spent_eps()
        counts = np.maximum(stats[2], 1)
        clients = []
        for i in range(config.num_clients):
            groups = range(priv.replies.shape[0])
            clients.append({
                "id": i,
                "num_samples": int(sizes[i]),
                "replies": _one_or_all([int(priv.replies[g, i]) for g in groups]),
                "epsilon_budget": priv.eps[i],
                "delta_budget": priv.delta[i],
                "epsilon_spent": _one_or_all([final_eps[g][i] for g in groups]),
                # a client that replied spends its delta_i (epsilon is reported at that
                # delta; it is 0 for pure DP and no mechanism), one that never replied none
                "delta_spent": _one_or_all([
                    priv.delta[i] if priv.replies[g, i] else 0.0 for g in groups]),
                "noise_std": _one_or_all([float(priv.noise_std[g, i]) for g in groups]),
                "noise_parameter": _one_or_all([float(priv.noise_param[g, i]) for g in groups]),
                "clipped_fraction": float((stats[0, :, i] / counts[:, i]).mean()),
                "snr": float((stats[1, :, i] / counts[:, i]).mean()),
            })
        runs = []
        for r in range(config.repeats):
            g = 0 if priv.replies.shape[0] == 1 else r
            runs.append({
                "repeat": r,
                "seed": config.seed,
                "rounds": [{
                    "round": h.round,
                    "test_loss": h.test_loss[r],
                    "test_accuracy": h.test_accuracy[r],
                    "train_loss": h.train_loss[r],
                    "epsilon_spent": h.epsilon_spent[g],
                } for h in history],
            })
        return cls(config=config, dataset=dataset.name, clients=clients, runs=runs,
                   final_theta=theta)

    def final(self, key: str) -> np.ndarray:
        """Final-round metric ``key`` per repeat."""
        return np.array([run["rounds"][-1][key] for run in self.runs])

    def to_json(self) -> dict[str, Any]:
        """The ``result.json`` document."""
        return {
            "fedqr_result": 1,
            "dataset": self.dataset,
            "config": jsonable(self.config),
            "clients": jsonable(self.clients),
            "runs": jsonable(self.runs),
            "summary": {
                "final_test_accuracy_mean": float(self.final("test_accuracy").mean()),
                "final_test_accuracy_std": float(self.final("test_accuracy").std()),
                "final_test_loss_mean": float(self.final("test_loss").mean()),
            },
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``result.json`` atomically."""
        write_json_atomic(Path(path), self.to_json())


def _one_or_all(values: list[Any]) -> Any:
    return values[0] if len(set(values)) == 1 else values


def write_json_atomic(path: Path, doc: Any) -> None:
    """Write ``doc`` as JSON to ``path`` via a temporary file and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=1, allow_nan=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
