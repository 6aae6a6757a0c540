"""Figures of the MNIST reproduction, drawn from the analysis tables only (no training)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from fedqr._atomic import write_file_atomic
from fedqr.experiments.analysis import PLANNER_LABEL
from fedqr.experiments.sweep import PAPER_MECHANISMS

Row = dict[str, Any]
Headline = Callable[[str, float, int], int | None]
MECHS = tuple(m.value for m in PAPER_MECHANISMS)


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    write_file_atomic(path, lambda p: fig.savefig(p, dpi=100))
    plt.close(fig)


def _eps(rows: list[Row], mech: str) -> list[float]:
    return sorted({r["eps"] for r in rows if r["mechanism"] == mech})


def curves(rows: list[Row], headline: Headline, path: Path) -> None:
    """Fig. 1: training loss per round at each b's planned T (solid) and at T = 100 (dashed)."""
    cols = max(len(_eps(rows, m)) for m in MECHS)
    fig, axes = plt.subplots(2, cols, figsize=(4.3 * cols, 7), squeeze=False)
    for i, mech in enumerate(MECHS):
        for j, eps in enumerate(_eps(rows, mech)):
            ax = axes[i][j]
            sub = [r for r in rows if r["mechanism"] == mech and r["eps"] == eps]
            for k, b in enumerate(sorted({r["b"] for r in sub})):
                colour = f"C{k}"
                t_plan = headline(mech, eps, b)
                for T, style in ((t_plan, "-"), (100, "--")):
                    pts = sorted((r["round"], r["train_loss"], r["train_loss_se"])
                                 for r in sub if r["b"] == b and r["T"] == T)
                    if T is None or not pts or (style == "--" and T == t_plan):
                        continue  # the planned T is 100 (Gaussian): drawn once
                    x, y, se = (np.array(v) for v in zip(*pts, strict=True))
                    ax.plot(x, y, style, color=colour, label=f"b={b}, T={T}")
                    ax.fill_between(x, y - se, y + se, color=colour, alpha=0.2)
            ax.set_title(f"{mech}, eps={eps:g}", fontsize=10)
            ax.set_xlabel("round t")
            ax.set_ylabel("training loss")
            ax.set_yscale("log")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        for j in range(len(_eps(rows, mech)), cols):
            axes[i][j].axis("off")
    _save(fig, path)


def versus(rows: list[Row], *, x: str, path: Path, title: str) -> None:
    """Final training loss and test accuracy against ``x`` (b or eps), a line per group."""
    fig, axes = plt.subplots(2, 2, figsize=(9, 6.5), squeeze=False)
    group = "eps" if x == "b" else "b"
    for i, mech in enumerate(MECHS):
        sub = [r for r in rows if r["mechanism"] == mech]
        for k, g in enumerate(sorted({r[group] for r in sub})):
            pts = sorted((r[x], r["train_loss"], r["train_loss_se"], r["test_accuracy"],
                          r["test_accuracy_se"]) for r in sub if r[group] == g)
            if not pts:
                continue
            xs, loss, lse, acc, ase = (np.array(v) for v in zip(*pts, strict=True))
            label = f"{group}={g:g}"
            axes[i][0].errorbar(xs, loss, yerr=lse, marker="o", color=f"C{k}", label=label,
                                capsize=3)
            axes[i][1].errorbar(xs, acc, yerr=ase, marker="o", color=f"C{k}", label=label,
                                capsize=3)
        for j, ylab in enumerate(("final training loss", "final test accuracy")):
            axes[i][j].set_title(f"{mech}", fontsize=10)
            axes[i][j].set_xlabel(x)
            axes[i][j].set_ylabel(ylab)
            axes[i][j].grid(alpha=0.3)
            if axes[i][j].get_legend_handles_labels()[0]:
                axes[i][j].legend(fontsize=7)
        axes[i][0].set_yscale("log")
    fig.suptitle(title, fontsize=10)
    _save(fig, path)


def heatmaps(rows: list[Row], path: Path) -> None:
    """Test accuracy at the plan over data fraction x eps, one panel per mechanism."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), squeeze=False)
    for ax, mech in zip(axes[0], MECHS, strict=True):
        sub = [r for r in rows if r["mechanism"] == mech]
        fr = sorted({r["data_fraction"] for r in sub})
        eps = sorted({r["eps"] for r in sub})
        acc = np.full((len(eps), len(fr)), np.nan)
        for r in sub:
            acc[eps.index(r["eps"]), fr.index(r["data_fraction"])] = r["test_accuracy"]
        im = ax.imshow(acc, aspect="auto", origin="lower", cmap="viridis", vmin=0, vmax=1)
        for (a, b), v in np.ndenumerate(acc):
            ax.text(b, a, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white")
        ax.set_xticks(range(len(fr)), [f"{f:.0%}" for f in fr], fontsize=7)
        ax.set_yticks(range(len(eps)), [f"{e:g}" for e in eps])
        ax.set_xlabel("share of the training data")
        ax.set_ylabel("eps")
        ax.set_title(f"{mech}: test accuracy at the plan", fontsize=10)
        fig.colorbar(im, ax=ax)
    _save(fig, path)


def validation(rows: list[Row], plans: dict[str, Any], path: Path) -> None:
    """Final training loss over T per b for each budget; planner choices marked."""
    cols = max((len(_eps(rows, m)) for m in MECHS), default=1)
    fig, axes = plt.subplots(len(MECHS), cols, figsize=(4.3 * cols, 7.2), squeeze=False)
    for i, mech in enumerate(MECHS):
        for j in range(len(_eps(rows, mech)), cols):
            axes[i][j].axis("off")
    for ax, (mech, eps) in ((axes[i][j], (m, e)) for i, m in enumerate(MECHS)
                            for j, e in enumerate(_eps(rows, m))):
        sub = [r for r in rows if r["mechanism"] == mech and r["eps"] == eps]
        for k, b in enumerate(sorted({r["b"] for r in sub})):
            pts = sorted((r["T"], r["train_loss"], r["train_loss_se"])
                         for r in sub if r["b"] == b)
            xs, ys, se = (np.array(v) for v in zip(*pts, strict=True))
            ax.errorbar(xs, ys, yerr=se, marker=".", color=f"C{k}", label=f"b={b}", capsize=2)
        plan = plans.get(mech, {}).get(str(eps), {})
        for who, marker in (("fedqr", "X"), ("paper", "*")):
            if plan.get(who):
                T, b = plan[who]
                hit = [r["train_loss"] for r in sub if r["T"] == T and r["b"] == b]
                if hit:
                    ax.plot([T], hit, marker=marker, markersize=12, color="red",
                            linestyle="none",
                            label=f"{PLANNER_LABEL.get(who, who)} ({T}, {b})")
        ax.set_xscale("symlog", linthresh=10)
        ax.set_yscale("log")
        ax.set_title(f"{mech}, eps={eps:g}", fontsize=10)
        ax.set_xlabel("T")
        ax.set_ylabel("final training loss")
        ax.legend(fontsize=7)
    _save(fig, path)


def bound_vs_observed(rows: list[Row], path: Path) -> None:
    """The bound's U(T, b) against the observed mean ||theta_T - theta*||^2 (log-log)."""
    fig, ax = plt.subplots(figsize=(5, 4.2))
    for k, mech in enumerate(MECHS):
        sub = [r for r in rows if r["mechanism"] == mech and r.get("dist2") is not None
               and r.get("U_pred") is not None]
        if sub:
            ax.scatter([r["dist2"] for r in sub], [r["U_pred"] for r in sub], s=12,
                       color=f"C{k}", label=mech)
    lims = ax.get_xlim()
    ax.plot(lims, lims, "k:", lw=1, label="U = observed")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("observed ||theta_T - theta*||^2 (mean over repeats)")
    ax.set_ylabel("bound U(T, b)")
    ax.legend(fontsize=8)
    _save(fig, path)
