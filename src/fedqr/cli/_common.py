"""Helpers shared by the ``fedqr`` commands: consoles, input parsing, atomic output."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

err = Console(stderr=True)
out = Console()


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` to stderr and return the exit to raise (2: bad input)."""
    err.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code)


def floats(name: str, text: str) -> tuple[float, ...]:
    """Parse ``"1"`` or ``"1,2,3"`` into floats; the error names ``name``."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(
            f"{name} must be a number or a comma-separated list of per-client numbers, "
            f"got {name}={text!r}") from None
    return values


def device(name: str) -> torch.device:
    """``auto`` (CUDA when available), ``cpu`` or ``cuda[:i]``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device must be one of auto, cpu (no CUDA here), got device={name!r}")
    if name != "cpu" and not name.startswith("cuda"):
        raise ValueError(f"device must be auto, cpu or cuda[:i], got device={name!r}")
    return torch.device(name)


def check_out_file(name: str, path: Path | None) -> None:
    """Reject an output path that is an existing folder."""
    if path is not None and path.is_dir():
        raise ValueError(f"{name} must be a file path, got {name}={str(path)!r} (a folder)")


@contextmanager
def staged(out_dir: Path) -> Iterator[Path]:
    """A staging folder beside ``out_dir``; its files move into ``out_dir`` only on success.

    A failure (an exception in the body) leaves no partial output behind.
    """
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        yield stage
        out_dir.mkdir(exist_ok=True)
        for f in sorted(stage.iterdir()):
            os.replace(f, out_dir / f.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def write_file_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` and rename ``tmp`` to ``path`` (no partial file on failure)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                    suffix=path.suffix)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def progress(label: str) -> Progress:
    """A rich progress bar on stderr (hidden when stderr is not a terminal)."""
    return Progress(TextColumn(f"[bold]{label}[/] {{task.description}}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), console=err,
                    disable=not err.is_terminal)
