"""``fedqr reproduce`` (the paper's experiments, resumable) and ``fedqr plot`` (redraw)."""

# Fast --help (0.5 s, bench/cli_startup.py): only light modules at the top (the commands
# import torch, dp-accounting and flwr when they run), and no
# "from __future__ import annotations" (typer reads the options from the annotations at
# every start; strings would cost ~1,000 compiles and evals, a tenth of the budget).
import time
from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from fedqr._precision import arithmetic_of
from fedqr._validate import check_in_range
from fedqr.cli._common import check_out_dir, err, fail, fail_on, out, progress
from fedqr.cli._common import device as _device

if TYPE_CHECKING:
    from fedqr.experiments.runs import RunSpec


class Target(StrEnum):
    """Which paper evaluation to reproduce."""

    MNIST = "mnist"
    FEMNIST = "femnist"


def reproduce(
    target: Annotated[Target, typer.Argument(help="Data set of the paper's evaluation.")],
    quick: Annotated[bool, typer.Option(
        help="Fewer repeats, a smaller (b, T, eps) grid and a proxy share for the constants "
             "(MNIST: 3 repeats, 20%; FEMNIST: 2 repeats, b in {1, 5}, 5%).")]
        = False,
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="Output folder (default runs/reproduce-<target>[-quick]).")] = None,
    fraction: Annotated[float, typer.Option(
        help="Share of the training data every run uses (1 = the paper's).")] = 1.0,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    data_dir: Annotated[Path | None, typer.Option(help="Folder with the data files.")] = None,
    arithmetic: Annotated[str, typer.Option(
        help="auto (default: mixed where the CPU has bfloat16 and int8 products), float32 "
             "or mixed: the softmax regression runs' full-batch passes with bfloat16 logits "
             "and exact integer gradient sums (the same clipping, budgets and noise; see "
             "fedqr run).")] = "auto",
) -> None:
    """Run every experiment of the paper's Section VII (cached per run: rerun to resume)."""
    from fedqr.data import DataNotFoundError
    from fedqr.experiments.report import redraw
    from fedqr.experiments.sweep import TARGETS, build_manifest, run_manifest, settings_for

    try:
        check_in_range("fraction", fraction, 0, 1, low_open=True)
        arith = arithmetic_of(arithmetic)
        dev = _device(device)
        folder = out_dir or Path(f"runs/reproduce-{target.value}{'-quick' if quick else ''}")
        check_out_dir("out_dir", folder)
    except ValueError as e:
        raise fail(str(e)) from None
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    spec = TARGETS[target.value]
    settings = replace(settings_for(spec, quick=quick), arithmetic=arith.value)
    try:
        manifest = build_manifest(folder, spec, settings, base=fraction, data_dir=data_dir,
                                  status=lambda m: err.print(f"[dim]{m}[/]"))
    except DataNotFoundError as e:
        raise fail_on(e) from None
    except ValueError as e:
        raise fail(str(e)) from None
    counts = {"computed": 0, "reused": 0}
    keys = [e["key"] for e in manifest["entries"]]
    with progress("reproduce") as bar:
        task = bar.add_task(f"{target.value}: runs", total=len(set(keys)))
        current = bar.add_task("run", total=None, visible=False)

        def on_run(run: "RunSpec", computed: bool) -> None:
            counts["computed" if computed else "reused"] += 1
            bar.advance(task)
            bar.update(current, visible=False)

        def on_round(run: "RunSpec", t: int) -> None:
            c = run.config
            eps = c.privacy.client_eps(1)[0]
            bar.update(current, visible=True, completed=t, total=c.rounds,
                       description=f"{c.privacy.mechanism.value} eps={eps:g} "
                                   f"b={c.clients_per_round} T={c.rounds}")

        run_manifest(manifest, folder, data_dir=data_dir, device=dev, on_run=on_run,
                     on_round=on_round,
                     warn=lambda m: err.print(f"[yellow]warning:[/] {escape(m)}"))
    files = _redraw(redraw, folder)
    elapsed = time.perf_counter() - started
    out.print(f"{len(manifest['entries'])} runs ({len(set(keys))} distinct): "
              f"{counts['computed']} computed now, {counts['reused']} already stored")
    out.print(f"wrote {len(files)} files under {folder} (summary: {folder / 'summary.md'})")
    out.print(f"wall time {elapsed:.1f} s")


def plot(
    result_dir: Annotated[Path, typer.Argument(help="A reproduce --out folder.")],
) -> None:
    """Redraw the figures, CSVs and summary of a reproduction from its stored runs."""
    from fedqr.experiments.report import redraw

    if not (result_dir / "manifest.json").is_file():
        raise fail(f"RESULT_DIR must be a folder that fedqr reproduce --out wrote (it holds "
                   f"manifest.json), got {str(result_dir)!r}")
    files = _redraw(redraw, result_dir)
    out.print(f"wrote {len(files)} files under {result_dir}")
    missing = _missing_runs(result_dir)
    if missing:
        err.print(f"[yellow]warning:[/] {missing} of the reproduction's runs are not stored "
                  f"under {result_dir / 'runs'}: the figures and tables leave them out "
                  f"(fedqr reproduce with the same --out computes them)")


def _missing_runs(folder: Path) -> int:
    """How many distinct runs of the manifest have no stored file."""
    from fedqr.experiments.runs import RunStore
    from fedqr.experiments.sweep import read_manifest

    manifest = read_manifest(folder / "manifest.json")
    keys = {e["key"] for e in manifest["entries"]}
    return sum(not (RunStore(folder).dir / f"{k}.json").is_file() for k in keys)


def _redraw(redraw: Callable[[Path], list[Path]], folder: Path) -> list[Path]:
    """``redraw(folder)``; a damaged stored file ends the command naming it (exit 1)."""
    from fedqr._atomic import DamagedFileError

    try:
        return redraw(folder)
    except DamagedFileError as e:
        raise fail(f"{e}; rerun fedqr reproduce to recompute it", code=1) from None
