"""Files the ServerApp hands to whoever started the run: result, model, reports, or error."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from fedqr._atomic import write_json_atomic
from fedqr.sim.result import finite_json, write_model

RESULT, MODEL, ERROR, PROGRESS = "result.json", "model.npz", "error.json", "progress.jsonl"
REPORTS = "reports.json"  # a survey run: the clients' sizes and budgets


def write_result(out: Path, *, doc: dict[str, Any], theta: np.ndarray) -> None:
    """``model.npz`` (``theta``, shape ``(1, *param_shape)``: ``fedqr run``'s layout with its
    one repeat, written by its writer :func:`fedqr.sim.result.write_model`), then
    ``result.json``: both atomically, the result last, so a reader that sees ``result.json``
    also finds the model."""
    write_model(out / MODEL, theta)
    write_json_atomic(out / RESULT, finite_json(doc))


def write_error(out: Path, exc: BaseException) -> None:
    """``error.json``: the message a failed run ends with."""
    with contextlib.suppress(OSError):
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / ERROR, {"error": str(exc), "type": type(exc).__name__})


def read_progress(out: Path) -> list[dict[str, Any]]:
    """The rounds finished so far (one JSON object per line; a torn last line is skipped)."""
    path = out / PROGRESS
    if not path.is_file():
        return []
    lines = []
    for text in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            lines.append(json.loads(text))
    return lines
