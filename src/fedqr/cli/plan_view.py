"""How ``fedqr plan`` (twin) shows a plan: from its JSON document, the one renderer.

A plan is shown from the document ``fedqr plan --json`` prints
(:func:`fedqr.api.plan_document`), not from the planner's objects, so that an answer stored
by :mod:`fedqr.cli.plan_cache` is shown exactly as a fresh one without importing the planner
(torch). :func:`plan_view` builds everything first and raises on a document it cannot show
(a damaged cache file), before anything is printed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rich.console import RenderableType
from rich.table import Table

from fedqr.cli._common import err, out

__all__ = ["PlanView", "plan_view", "show_plan"]

_TOP = 6
"""Schedules in the table of the best ones."""


@dataclass(frozen=True)
class PlanView:
    """A plan ready to print: ``warnings`` for stderr, ``lines`` for stdout (or ``text``,
    the ``--json`` document)."""

    warnings: tuple[str, ...]
    lines: tuple[RenderableType, ...]
    text: str


def plan_view(doc: dict[str, Any]) -> PlanView:
    """The warnings, tables and lines that show the plan document ``doc``.

    Raises
    ------
    KeyError, TypeError, ValueError, IndexError, AttributeError
        When ``doc`` lacks a field or holds one of the wrong type.
    """
    rec = doc["recommended"]
    used, shift = rec["data_used"], rec["proxy_shift"]
    warnings: tuple[str, ...] = ((f"[yellow]warning:[/] {used['warning']}",)
                                 if used.get("reads_private_data") else ())
    useful = _bool(rec["useful"])
    prior = doc.get("label_prior_test_loss")  # absent in answers cached before it
    if useful and rec.get("beats_label_prior") is False:
        warnings += (f"[yellow]warning:[/] the plan's predicted test loss "
                     f"{rec['predicted_test_loss']['mean']:.4f} does not beat predicting the "
                     f"label frequencies ({prior:.4f}): under this budget the model learns "
                     f"less than the class shares (the plan's message says what may help)",)
    colour = "green" if useful else "red"
    q = rec["sample_rate"]
    head = (f"[bold {colour}]{'plan' if useful else 'no useful plan'}:[/] "
            f"T={_int(rec['rounds'])}, b={_int(rec['clients_per_round'])}"
            + ("" if q is None else f", q={q:g}") + f"  ({rec['message']})")
    table = Table(title="best schedules (the search's predictions; the plan's figure is the "
                        "re-simulation of its schedule)")
    for col in ("rank", "T", "b", "q", "test loss", "+-", "from"):
        table.add_column(col, justify="right")
    rows = [p for i, p in enumerate(doc["predictions"])  # T = 0 is one model, whatever b
            if _int(p["rounds"]) > 0 or not any(_int(o["rounds"]) == 0
                                                 for o in doc["predictions"][:i])]
    for i, p in enumerate(rows[:_TOP]):
        table.add_row(str(i + 1), str(_int(p["rounds"])), str(_int(p["clients_per_round"])),
                      "-" if p["sample_rate"] is None else f"{p['sample_rate']:g}",
                      f"{p['predicted_test_loss']:.4f}",
                      f"{p['stderr']:.4f}", "fit" if _bool(p["fitted"]) else "twin")
    lines: list[RenderableType] = [head, table]
    if shift.get("proxy_std") is not None:
        lo, hi = shift["range"]
        still = shift["recommended_still_best"]
        lines.append(f"proxy shift: +- {shift['proxy_std']:.4f} over "
                     f"{len(shift['alternatives'])} other draws of the proxy (range {lo:.4f} "
                     f"to {hi:.4f})" + ("" if still is None else
                                        f"; the schedule is the best of the candidates "
                                        f"on {still.replace(' of ', ' of these ')} "
                                        f"draws"))
    lines.append(f"untrained model: {doc['untrained_test_loss']:.4f}"
                 + ("" if prior is None else f"; label frequencies: {prior:.4f}")
                 + "; data used: "
                 f"{used['kind']} ({used['rows']} rows); privacy cost of planning: "
                 f"{rec['privacy_cost']['note']}; {_int(doc['simulated_rounds'])} twin rounds "
                 f"in {doc['wall_time_s']:.1f} s"
                 f"{' (cached)' if _bool(doc['from_cache']) else ''}")
    return PlanView(warnings=warnings, lines=tuple(lines), text=json.dumps(doc, indent=2))


def show_plan(view: PlanView, *, as_json: bool) -> None:
    """Print ``view``'s warnings (stderr: that the plan read the clients' data without
    privacy is said in JSON mode too, beside ``data_used.warning``), then the JSON document
    or the tables (stdout)."""
    for w in view.warnings:
        err.print(w)
    if as_json:
        import typer

        typer.echo(view.text)
        return
    for line in view.lines:
        out.print(line)


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected an integer, got {v!r}")
    return v


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"expected true or false, got {v!r}")
    return v
