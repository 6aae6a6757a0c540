"""Results of a simulation: per-round metrics per repeat and per-client privacy figures."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedqr._atomic import write_file_atomic, write_json_atomic
from fedqr.data import Dataset
from fedqr.sim.config import PrivacyConfig, SimConfig

__all__ = ["RoundMetrics", "SimResult", "finite_json", "jsonable", "name_clients",
           "write_json_atomic", "write_model"]

if TYPE_CHECKING:
    from fedqr.sim.budget import ClientPrivacy


@dataclass(frozen=True)
class RoundMetrics:
    """Metrics of the model after ``round`` rounds, one value per repeat.

    ``train_loss`` is the regularised training objective F(theta) (cross-entropy plus
    (w/2)||theta||^2, the function the paper's bounds are about); ``test_loss`` is the plain
    test cross-entropy. ``epsilon_spent[g][i]`` is client i's spent epsilon in schedule group g
    (one group for round robin, one per repeat for random selection). ``train_loss`` is
    ``None`` when the objective was not evaluated this round (``SimConfig.train_eval``);
    ``train_loss_stderr`` is the standard error of a sampled estimate (``None``: exact or
    not evaluated).
    """

    round: int
    test_loss: list[float]
    test_accuracy: list[float]
    train_loss: list[float] | None
    epsilon_spent: list[list[float | None]]
    train_loss_stderr: list[float] | None = None


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
        rows: np.ndarray | None = None,
    ) -> SimResult:
        """Assemble per-client and per-repeat records.

        Parameters
        ----------
        stats : numpy.ndarray
            ``(3, R, N)``, summed over each client's replies: the share of the reply's rows
            clipped, the gradient-to-noise ratio, and 1 (the replies).
        rows : numpy.ndarray or None, optional
            ``(2, R, N)``: the clipped rows and the sampled rows, summed over each client's
            replies; a client's ``clipped_fraction`` is then their ratio over every reply of
            every repeat (:func:`_clipped_fraction`). ``None`` (a caller that has each
            reply's share only): the mean of ``stats[0]`` per reply.
        """
        priv = setup_privacy
        final_eps = priv.ledgers.spent_eps()
        counts = np.maximum(stats[2], 1)
        clipped = (_clipped_fraction(rows) if rows is not None
                   else (stats[0] / counts).mean(axis=0))
        clients = []
        group = [0 if priv.replies.shape[0] == 1 else r for r in range(config.repeats)]
        for i in range(config.num_clients):
            per_repeat: dict[str, list[Any]] = {
                "replies": [int(priv.replies[g, i]) for g in group],
                "epsilon_spent": [final_eps[g][i] for g in group],
                # a client that replied spends its delta_i (epsilon is reported at that
                # delta; it is 0 for pure DP and no mechanism), one that never replied none
                "delta_spent": [priv.delta[i] if priv.replies[g, i] else 0.0 for g in group],
                "noise_std": [float(priv.noise_std[g, i]) for g in group],
                "noise_parameter": [float(priv.noise_param[g, i]) for g in group],
            }
            clients.append({
                "id": i,
                "num_samples": int(sizes[i]),
                "epsilon_budget": priv.eps[i],
                "delta_budget": priv.delta[i],
                # one schema whatever the selection: the largest value over the repeats here,
                # every repeat's value under "per_repeat"
                **{k: _largest(v) for k, v in per_repeat.items()},
                "per_repeat": per_repeat,
                "clipped_fraction": float(clipped[i]),
                "snr": float((stats[1, :, i] / counts[:, i]).mean()),
            })
        runs = []
        for r in range(config.repeats):
            g = 0 if priv.replies.shape[0] == 1 else r
            runs.append({
                "repeat": r,
                "seed": config.seed,
                "rounds": [_round_record(h, r, g) for h in history],
            })
        return cls(config=config, dataset=dataset.name, clients=clients, runs=runs,
                   final_theta=theta)

    def final(self, key: str) -> np.ndarray:
        """Final-round metric ``key`` per repeat."""
        return np.array([run["rounds"][-1][key] for run in self.runs])

    def to_json(self) -> dict[str, Any]:
        """The ``result.json`` document (schema: ``fedqr/sim/result.schema.json``).

        Non-finite metrics (a diverged run) are ``null``, as is a training objective that was
        not evaluated; ``diverged_round`` is the first evaluated round with a non-finite
        metric (``null``: the run stayed finite).
        """
        runs = finite_json(self.runs)
        for run in runs:  # the accuracy of a model whose loss is not finite (NaN parameters:
            for rd in run["rounds"]:  # its arg-max picks class 0) measures nothing
                if rd["test_loss"] is None:
                    rd["test_accuracy"] = None
        for run, raw in zip(runs, self.runs, strict=True):
            run["diverged_round"] = next(
                (rd["round"] for rd in raw["rounds"]
                 if any(_nonfinite(rd[k]) for k in ("test_loss", "test_accuracy"))
                 or (rd["train_loss"] is not None and _nonfinite(rd["train_loss"]))), None)
        first = [r["diverged_round"] for r in runs if r["diverged_round"] is not None]
        privacy = self.config.privacy
        used = privacy.spec.accountant(privacy.accountant)
        return {
            "fedqr_result": 1,
            "dataset": self.dataset,
            "config": jsonable(self.config),
            # what accounted the budgets: config.privacy holds the request, its delta the one
            # the run used (0 for pure eps-DP, accounted by basic composition)
            "accounting": {"accountant": used.value if used is not None else None,
                           "neighbours": privacy.spec.neighbours.value,
                           "normaliser": _normaliser(privacy),
                           "delta_applies": privacy.spec.needs_delta},
            "clients": finite_json(self.clients),
            "runs": runs,
            "diverged": bool(first),
            "diverged_round": min(first) if first else None,
            "summary": finite_json({
                "final_test_accuracy_mean": float(self._final_accuracy().mean()),
                "final_test_accuracy_std": float(self._final_accuracy().std()),
                "final_test_loss_mean": float(self.final("test_loss").mean()),
                "final_test_loss_std": float(self.final("test_loss").std()),
            }),
        }

    def _final_accuracy(self) -> np.ndarray:
        """Final test accuracy per repeat, NaN where the final test loss is not finite."""
        loss = self.final("test_loss").astype(np.float64)
        return np.where(np.isfinite(loss), self.final("test_accuracy"), np.nan)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``result.json`` atomically."""
        write_json_atomic(Path(path), self.to_json())


def write_model(path: str | os.PathLike[str], theta: np.ndarray) -> None:
    """Write ``model.npz`` atomically, as every command writes it.

    Parameters
    ----------
    path:
        The file to write (``--out``'s ``model.npz``).
    theta:
        The final parameters of every repeat, ``(R, *param_shape)``: softmax regression
        ``(R, k, p)`` (the biases last with an intercept), a torch model ``(R, P)``. A Flower
        run has one repeat, ``R = 1``. Saved as the ``.npz`` array ``theta``.
    """
    write_file_atomic(path, lambda p: np.savez(p, theta=theta))


def name_clients(doc: dict[str, Any], names: tuple[str, ...] | None) -> None:
    """Give ``clients[i]`` of a result document the user's id of client i (``names``: the
    sorted ids of a data file, which per-client eps and delta lists follow; ``None``: none)."""
    for entry, name in zip(doc["clients"], names or (), strict=False):
        entry["name"] = name


def _round_record(h: RoundMetrics, r: int, g: int) -> dict[str, Any]:
    """Repeat r's metrics after round ``h.round`` (schedule group g); ``train_loss_stderr``
    only for a sampled training objective."""
    record: dict[str, Any] = {
        "round": h.round,
        "test_loss": h.test_loss[r],
        "test_accuracy": h.test_accuracy[r],
        "train_loss": h.train_loss[r] if h.train_loss is not None else None,
        "epsilon_spent": h.epsilon_spent[g],
    }
    if h.train_loss_stderr is not None:
        record["train_loss_stderr"] = h.train_loss_stderr[r]
    return record


def _clipped_fraction(rows: np.ndarray) -> np.ndarray:
    """Each client's clipped rows over its sampled rows, pooled over every reply of every
    repeat, shape ``(N,)`` (``rows``: ``(2, R, N)`` sums; 0 where no row was sampled).

    A reply's own share would weigh an empty Poisson batch (nothing clipped, nothing
    sampled) as a reply with no row clipped, and a one-row batch as much as a full one.
    """
    clipped, sampled = rows[0].sum(axis=0), rows[1].sum(axis=0)
    share: np.ndarray = np.divide(clipped, sampled, out=np.zeros_like(clipped, dtype=np.float64),
                                  where=sampled > 0)
    return share


def _nonfinite(value: Any) -> bool:
    """Whether a metric is missing (``None``), NaN or infinite."""
    return value is None or (isinstance(value, float | int) and not math.isfinite(value))


def _largest(values: list[Any]) -> Any:
    """The largest of ``values`` (``None`` entries ignored; ``None`` if all are)."""
    known = [v for v in values if v is not None]
    return max(known) if known else None


def finite_json(obj: Any) -> Any:
    """:func:`jsonable` with every non-finite float (NaN, +-inf) as ``None`` (JSON null)."""
    obj = jsonable(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj in ("inf", "-inf") and isinstance(obj, str):
        return None
    if isinstance(obj, list):
        return [finite_json(v) for v in obj]
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    return obj


def _normaliser(privacy: PrivacyConfig) -> str:
    """What each reply's clipped sum is divided by, as the guarantee assumes it."""
    sampled = privacy.spec.denominator_rate(privacy.sample_rate) < 1
    return (f"{'q d_i' if sampled else 'd_i'}: a public constant, fixed independently of any "
            f"one record (docs/privacy.md)")
