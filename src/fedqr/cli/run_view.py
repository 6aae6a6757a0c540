"""What ``fedqr run`` prints after a run: the clients' table and the final metrics."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from fedqr.cli._common import out

__all__ = ["print_run_summary"]


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
    out.print(f"final test accuracy {_fmt(summary['final_test_accuracy_mean'])} "
              f"+- {_fmt(summary['final_test_accuracy_std'])}, test loss "
              f"{_fmt(summary['final_test_loss_mean'])}  ({elapsed:.1f} s)")
    out.print(f"wrote {out_dir / 'result.json'} and {out_dir / 'training.png'}")


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v[:3]) + (", ...]" if len(v) > 3 else "]")
    return "-" if v is None else str(v)

