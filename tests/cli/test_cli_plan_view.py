"""The one renderer of a twin plan (:mod:`fedqr.cli.plan_view`), from its JSON document."""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import pytest
from rich.console import Console

from fedqr.cli.plan_view import plan_view


def _doc(*, sample_rate: float | None, reads_private: bool) -> dict[str, Any]:
    preds = [{"rounds": t, "clients_per_round": 2, "sample_rate": 0.5,
              "predicted_test_loss": 0.5 + t / 1000, "stderr": 0.01, "fitted": t > 40}
             for t in (10, 20, 30, 40, 50, 60, 70)]
    return {"recommended": {
        "rounds": 10, "clients_per_round": 2, "sample_rate": sample_rate, "useful": True,
        "message": "predicted test loss 0.5100", "privacy_cost": {"note": "no guarantee"},
        "data_used": {"kind": "clear-proxy", "rows": 90, "reads_private_data": reads_private,
                      "warning": "read WITHOUT differential privacy"},
        "proxy_shift": {"proxy_std": 0.02, "range": [0.49, 0.53], "alternatives": [1, 2],
                        "recommended_still_best": "2 of 2"}},
        "untrained_test_loss": 0.6931, "predictions": preds, "simulated_rounds": 15,
        "wall_time_s": 1.25, "from_cache": False}


def _text(lines: tuple[Any, ...]) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    for line in lines:
        console.print(line)
    return console.export_text()


def test_the_view_shows_every_part_of_the_document() -> None:
    doc = _doc(sample_rate=0.5, reads_private=True)
    view = plan_view(doc)
    assert view.warnings == ("[yellow]warning:[/] read WITHOUT differential privacy",)
    text = _text(view.lines)
    assert "plan: T=10, b=2, q=0.5  (predicted test loss 0.5100)" in text
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert len(rows) == 6  # the best six of seven
    cells = [[c.strip() for c in row.split("│")[1:-1]] for row in rows]
    assert cells[0] == ["1", "10", "2", "0.5", "0.5100", "0.0100", "twin"]
    assert cells[-1] == ["6", "60", "2", "0.5", "0.5600", "0.0100", "fit"]
    assert "proxy shift: +- 0.0200 over 2 other draws of the proxy (range 0.4900 to " \
           "0.5300); the schedule is the best of the candidates on 2 of these 2 draws" in text
    assert "untrained model: 0.6931; data used: clear-proxy (90 rows); privacy cost of " \
           "planning: no guarantee; 15 twin rounds in 1.2 s" in text
    assert json.loads(view.text) == doc


def test_no_q_without_sampling_and_no_warning_for_public_data() -> None:
    view = plan_view(_doc(sample_rate=None, reads_private=False))
    assert view.warnings == ()
    assert "plan: T=10, b=2  (" in _text(view.lines)


@pytest.mark.parametrize(("path", "value"), [
    (("recommended", "rounds"), "ten"), (("recommended", "useful"), "yes"),
    (("predictions",), None), (("wall_time_s",), "fast"), (("recommended", "data_used"), [])])
def test_a_damaged_document_raises_before_anything_is_printed(path: tuple[str, ...],
                                                              value: Any) -> None:
    doc = copy.deepcopy(_doc(sample_rate=0.5, reads_private=True))
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises((KeyError, TypeError, ValueError, AttributeError)):
        plan_view(doc)


def test_a_plan_that_does_not_beat_the_label_frequencies_is_a_warning() -> None:
    doc = _doc(sample_rate=None, reads_private=False)
    doc["recommended"]["predicted_test_loss"] = {"mean": 0.51, "stderr": 0.01}
    doc["label_prior_test_loss"] = 0.064
    doc["recommended"]["beats_label_prior"] = False
    assert plan_view(doc).warnings == (
        "[yellow]warning:[/] the plan's predicted test loss 0.5100 does not beat predicting "
        "the label frequencies (0.0640): under this budget the model learns less than the "
        "class shares (the plan's message says what may help)",)
    doc["recommended"]["beats_label_prior"] = True
    assert plan_view(doc).warnings == ()
    del doc["recommended"]["beats_label_prior"]  # an answer cached before the flag
    assert plan_view(doc).warnings == ()


def test_the_untrained_model_is_one_row_whatever_b() -> None:
    doc = _doc(sample_rate=None, reads_private=False)
    zero = [{"rounds": 0, "clients_per_round": b, "sample_rate": 1.0,
             "predicted_test_loss": 0.6931, "stderr": 0.0, "fitted": False} for b in (1, 2)]
    doc["predictions"] = [*doc["predictions"][:3], *zero, *doc["predictions"][3:]]
    text = _text(plan_view(doc).lines)
    cells = [[c.strip() for c in row.split("│")[1:-1]]
             for row in text.splitlines() if row.startswith("│")]
    assert [c[1] for c in cells] == ["10", "20", "30", "0", "40", "50"]
    assert "the search's predictions" in text
