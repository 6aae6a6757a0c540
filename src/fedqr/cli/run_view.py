"""What ``fedqr run`` writes and prints after a run: result.json and its plot, the clients' table
and the final metrics."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from fedqr.cli._common import out

if TYPE_CHECKING:
    from fedqr.api_results import SimulationResult

__all__ = ["RUN_FILES", "add_pilot_spend", "pilot_spent", "print_run_summary", "write_run"]

RUN_FILES = ("result.json", "training.png", "model.npz")
"""The files ``fedqr run`` writes into its ``--out`` folder (:func:`write_run`)."""


def print_run_summary(doc: dict[str, object], elapsed: float, out_dir: Path) -> None:
    """The clients' table (the first 12; a data file's own client ids, which per-client
    ``--eps`` lists follow), the final test metrics and the files written."""
    summary = doc["summary"]
    assert isinstance(summary, dict)
    clients = doc["clients"]
    assert isinstance(clients, list)
    table = Table(title="clients", show_lines=False)
    for col in ("id", "d_i", "replies", "eps spent", "noise std", "clipped", "SNR"):
        table.add_column(col, justify="right")
    for c in clients[:12]:  # a data file's own client ids (name), which --eps lists follow
        table.add_row(str(c.get("name", c["id"])), str(c["num_samples"]), str(c["replies"]),
                      _fmt(c["epsilon_spent"]), _fmt(c["noise_std"]),
                      f"{c['clipped_fraction']:.1%}", _fmt(c["snr"]))
    out.print(table)
    config = doc.get("config")
    repeats = config.get("repeats", 1) if isinstance(config, dict) else 1
    several = isinstance(repeats, int) and repeats > 1
    spread = (f" +- {_fmt(summary['final_test_accuracy_std'])} (std) over {repeats} repeats"
              if several else " (one repeat: no spread)")
    loss_std = summary.get("final_test_loss_std")  # absent from result.json files before it
    loss_spread = f" +- {_fmt(loss_std)}" if several and loss_std is not None else ""
    out.print(f"final test accuracy {_fmt(summary['final_test_accuracy_mean'])}{spread}, "
              f"test loss {_fmt(summary['final_test_loss_mean'])}{loss_spread}  "
              f"({elapsed:.1f} s)")
    out.print(f"wrote {out_dir / 'result.json'}, {out_dir / 'training.png'} and "
              f"{out_dir / 'model.npz'}")


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v[:3]) + (", ...]" if len(v) > 3 else "]")
    return "-" if v is None else str(v)


def pilot_spent(cost: dict[str, Any]) -> str | None:
    """What a private pilot spent of the clients' budgets and what it left for the run, as
    one line (``None``: no pilot ran). ``cost``: the plan's ``privacy_cost``."""
    left = cost.get("budget_left_for_run")
    if not isinstance(left, dict):
        return None
    return (f"private pilot: spent eps {_each(cost.get('epsilon'))} of the clients' budgets on "
            f"their data; the run spends the rest, eps {_each(left.get('eps'))} (result.json's "
            f"budgets are these; its clients' total_epsilon_spent adds the pilot's)")


def add_pilot_spend(doc: dict[str, Any], plan_doc: dict[str, object]) -> None:
    """Each client's spend on a private pilot, and pilot plus run, in ``doc["clients"]``
    (nothing without a pilot): the run's own budgets and spend are its share only."""
    cost = plan_doc.get("privacy_cost")
    if not isinstance(cost, dict) or not isinstance(cost.get("budget_left_for_run"), dict):
        return
    for c, eps, delta in zip(doc["clients"], cost["epsilon"], cost["delta"], strict=True):
        delta = float(delta) if c.get("delta_budget") else 0.0  # pure DP: no delta at all
        c["pilot_epsilon_spent"], c["pilot_delta_spent"] = float(eps), delta
        run_eps, run_delta = c.get("epsilon_spent"), c.get("delta_spent")
        c["total_epsilon_spent"] = None if run_eps is None else float(eps) + run_eps
        c["total_delta_spent"] = None if run_delta is None else delta + run_delta


def _each(values: object, shown: int = 12) -> str:
    """Per-client values: one number where all are equal, else the list (the first
    ``shown``)."""
    if not isinstance(values, list) or not values:
        return _fmt(values)
    if len(set(values)) == 1:
        return f"{_fmt(values[0])} each"
    more = f", ... ({len(values)} in all)" if len(values) > shown else ""
    return "[" + ", ".join(_fmt(v) for v in values[:shown]) + more + "]"


def write_run(result: SimulationResult, *, plan_doc: dict[str, object] | None,
              out_dir: Path) -> None:
    """Write result.json, the plot and model.npz together (a failure leaves no partial
    output)."""
    from fedqr.cli._common import staged, warn_diverged, write_json_atomic
    from fedqr.experiments.plots import plot_training

    doc = result.document
    if plan_doc is not None:
        doc["plan"] = {**plan_doc,
                       "achieved_test_loss": doc["summary"]["final_test_loss_mean"]}
        add_pilot_spend(doc, plan_doc)
    warn_diverged(doc)
    with staged(out_dir) as stage:
        write_json_atomic(stage / "result.json", doc)
        plot_training(doc, stage / "training.png")
        result.save_model(stage / "model.npz")
    print_run_summary(doc, doc["wall_time_s"], out_dir)
    if plan_doc is not None:
        pred = plan_doc["predicted_test_loss"]
        if isinstance(pred, dict):
            used = plan_doc.get("data_used")
            public = isinstance(used, dict) and used.get("kind") != "clear-proxy"
            out.print(f"planned test loss {pred['mean']:.4f} +- {pred['stderr']:.4f}, "
                      f"achieved {doc['plan']['achieved_test_loss']:.4f}" + (
                          " (planned on the public proxy's own test rows, achieved on your "
                          "test set: the plan's loss is a guide to the schedule, not a "
                          "promise of the loss)" if public else ""))
