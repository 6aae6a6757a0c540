"""What :func:`fedqr.plan` and :func:`fedqr.simulate` return (:mod:`fedqr.api`)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedqr._atomic import check_writable_file
from fedqr.planner import Plan
from fedqr.sim.result import write_json_atomic, write_model

__all__ = ["PlanResult", "PrivateDataWarning", "SimulationResult"]


class PrivateDataWarning(UserWarning):
    """:func:`fedqr.plan` read the clients' own data WITHOUT differential privacy (the default
    ``data_use="clear-proxy"``: a simulation only; the run it recommends still spends exactly
    each client's budget). Plan with ``data_use="public-proxy"`` to read none."""


@dataclass(frozen=True)
class PlanResult:
    """The planner's answer: the recommended (T, b, q) and what ``plan --json`` holds."""

    plan: Plan
    document: dict[str, Any]

    @property
    def rounds(self) -> int:
        """T."""
        return self.plan.recommended.rounds

    @property
    def clients_per_round(self) -> int:
        """b."""
        return self.plan.recommended.clients_per_round

    @property
    def sample_rate(self) -> float:
        """q (1 for full-batch mechanisms)."""
        return self.plan.recommended.sample_rate

    @property
    def predicted_test_loss(self) -> float:
        """The twin's mean prediction for the recommended schedule."""
        return self.plan.recommended.mean

    @property
    def useful(self) -> bool:
        """Whether the plan beats the untrained model (else nothing should run)."""
        return self.plan.useful

    def __repr__(self) -> str:  # the plan, not its every prediction (``document`` has them)
        return (f"PlanResult(rounds={self.rounds}, clients_per_round={self.clients_per_round},"
                f" sample_rate={self.sample_rate:g}, predicted_test_loss="
                f"{self.predicted_test_loss:.4g}, useful={self.useful})")


@dataclass(frozen=True)
class SimulationResult:
    """A finished simulation: ``document`` is the ``result.json`` document, ``theta`` the
    final parameters of every repeat, ``(R, *param_shape)`` (softmax regression: ``(R, k,
    p)``, the biases last with an intercept; a torch model: ``(R, P)``, its trainable
    parameters in the order of ``model.parameters()``; ``None`` where not kept)."""

    document: dict[str, Any]
    theta: np.ndarray | None = field(default=None, compare=False)

    def __repr__(self) -> str:  # the outcome, not every round (``document`` has them)
        return (f"SimulationResult(final_test_loss={self.final_test_loss:.4g}, "
                f"final_test_accuracy={self.final_test_accuracy:.4g}, "
                f"diverged={self.diverged})")

    @property
    def diverged(self) -> bool:
        """Whether a repeat's parameters left the floats (inf or NaN; see ``document``'s
        ``diverged_round``): its final metrics are NaN."""
        return bool(self.document.get("diverged"))

    @property
    def final_test_accuracy(self) -> float:
        """Mean over the repeats of the last evaluation's test accuracy (NaN if diverged)."""
        return _number(self.document["summary"]["final_test_accuracy_mean"], self.diverged)

    @property
    def final_test_loss(self) -> float:
        """Mean over the repeats of the last evaluation's test loss (NaN if diverged)."""
        return _number(self.document["summary"]["final_test_loss_mean"], self.diverged)

    def save(self, path: str | Path) -> None:
        """Write ``result.json`` atomically.

        Raises
        ------
        ValueError
            If ``path`` is not a path, or not a file that can be written (a folder).
        """
        write_json_atomic(_file_path(path), self.document)

    def save_model(self, path: str | Path) -> None:
        """Write the final parameters as ``model.npz`` (array ``theta``, ``(R,
        *param_shape)``: see the class) atomically, as ``fedqr run`` and ``fedqr flower``
        write it (:func:`fedqr.sim.result.write_model`).

        Raises
        ------
        ValueError
            If this result kept no parameters.
        """
        if self.theta is None:
            raise ValueError("this result kept no parameters (theta is None)")
        write_model(_file_path(path), self.theta)


def _file_path(path: object) -> Path:
    """``path`` as a ``Path`` where a file can be written (``ValueError`` naming ``path``)."""
    if not isinstance(path, str | os.PathLike) or not str(path):
        raise ValueError(f"path must be a file path (str or os.PathLike), got path={path!r}")
    check_writable_file("path", path)
    return Path(path)


def _number(value: object, diverged: bool) -> float:
    return math.nan if diverged or value is None else float(value)  # type: ignore[arg-type]
