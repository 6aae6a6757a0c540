"""Figures (the only module that imports matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def _curves(doc: dict[str, Any], key: str) -> tuple[np.ndarray, np.ndarray]:
    runs = doc["runs"]
    rounds = np.array([r["round"] for r in runs[0]["rounds"]])
    values = np.array([[r[key] for r in run["rounds"]] for run in runs], dtype=float)
    return rounds, values


def plot_training(doc: dict[str, Any], path: Path) -> None:
    """Test loss and accuracy per round (mean over repeats, band = +- one std) to ``path``."""
    cfg = doc["config"]
    priv = cfg["privacy"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, label in [(axes[0], "test_loss", "test loss"),
                           (axes[1], "test_accuracy", "test accuracy")]:
        rounds, values = _curves(doc, key)
        mean, std = values.mean(axis=0), values.std(axis=0)
        ax.plot(rounds, mean, lw=1.8)
        ax.fill_between(rounds, mean - std, mean + std, alpha=0.25)
        ax.set_xlabel("round t")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    title = (f"{doc['dataset']}: {priv['mechanism']} eps={priv['eps']}, "
             f"N={cfg['num_clients']}, b={cfg['clients_per_round']}, T={cfg['rounds']}, "
             f"{len(doc['runs'])} repeat(s)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bound_grid(panels: list[dict[str, Any]], path: Path) -> None:
    """``U`` over ``(T, b)`` per budget, the planned optimum marked, to ``path`` (PNG).

    Each panel is ``{"title", "T": (nT,), "b": (nb,), "U": (nT, nb), "opt": (T, b)}``; colours
    are ``log10 U`` (the bound spans orders of magnitude).
    """
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        t = np.asarray(panel["T"], dtype=float)
        b = np.asarray(panel["b"], dtype=float)
        u = np.log10(np.maximum(np.asarray(panel["U"], dtype=float), 1e-300))
        mesh = ax.pcolormesh(t, b, u.T, shading="nearest", cmap="viridis")
        fig.colorbar(mesh, ax=ax, label="log10 U(T, b)")
        ax.contour(t, b, u.T, levels=8, colors="white", linewidths=0.5, alpha=0.6)
        t_opt, b_opt = panel["opt"]
        ax.plot([t_opt], [b_opt], marker="*", color="red", markersize=14,
                markeredgecolor="white", label=f"T*={t_opt}, b*={b_opt}")
        ax.set_xlabel("T (queries)")
        ax.set_ylabel("b (replies per round)")
        ax.set_title(panel["title"], fontsize=10)
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_predicted_loss(predictions: list[Any], path: Path) -> None:
    """The twin's predicted test loss against T, one curve per (b, q), to ``path``.

    ``predictions`` are :class:`fedqr.planner.Prediction` (best first); the best is marked.
    """
    fig, ax = plt.subplots(figsize=(7, 4.2))
    keys = sorted({(p.clients_per_round, p.sample_rate) for p in predictions})
    cmap = plt.get_cmap("viridis")
    for i, (b, q) in enumerate(keys):
        pts = sorted((p.rounds, p.mean, p.stderr) for p in predictions
                     if (p.clients_per_round, p.sample_rate) == (b, q) and np.isfinite(p.mean))
        if not pts:
            continue
        t, m, s = (np.array(v, dtype=float) for v in zip(*pts, strict=True))
        label = f"b={b}" + ("" if q == 1 else f", q={q:g}")
        colour = cmap(i / max(1, len(keys) - 1))
        ax.plot(np.maximum(t, 0.8), m, marker=".", lw=1.2, color=colour, label=label)
        ax.fill_between(np.maximum(t, 0.8), m - s, m + s, color=colour, alpha=0.2)
    best = predictions[0]
    ax.plot([max(best.rounds, 0.8)], [best.mean], marker="*", ms=14, color="red",
            label=f"plan: T={best.rounds}, b={best.clients_per_round}")
    ax.set_xscale("log")
    ax.set_xlabel("rounds T (T = 0 drawn at 0.8)")
    ax.set_ylabel("predicted final test loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
