"""Helpers shared by the ``fedqr`` commands: consoles, input parsing, atomic output."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape

from fedqr._atomic import (
    check_writable_dir,
    check_writable_file,
    staged_dir,
    write_file_atomic,
    write_json_atomic,
)
from fedqr._cli_messages import diverged_note, exit_code, name_options
from fedqr._warned import is_own

if TYPE_CHECKING:
    import torch
    from rich.progress import Progress

    from fedqr._enums import Mechanism
    from fedqr.privacy import NoiseMechanism

err = Console(stderr=True)
out = Console()


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` to stderr and return the exit to raise (2: bad input, a data set
    found nowhere included; 1: a fault; a library error's: :func:`fedqr._cli_messages.
    exit_code`), the library's parameter names written as the command's options
    (:func:`fedqr._cli_messages.name_options`: ``data_dir=...`` is ``--data-dir=...``)."""
    err.print(f"[bold red]error:[/] {escape(name_options(message))}")
    return typer.Exit(code)


def fail_on(exc: BaseException) -> typer.Exit:
    """:func:`fail` with a library error's message and exit status
    (:func:`fedqr._cli_messages.exit_code`: 2 for bad input and a data set found nowhere, 1
    for a fault)."""
    return fail(str(exc), exit_code(exc))


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
    """``auto`` (CUDA when available), ``cpu`` or ``cuda[:i]``
    (:func:`fedqr._device.resolve_device`)."""
    from fedqr._device import resolve_device

    return resolve_device(name)


def mechanism_for(mechanism: Mechanism) -> NoiseMechanism:
    """:func:`fedqr.privacy.mechanism_for`, imported when first called: the commands'
    modules import only light modules, so that ``fedqr <command> --help`` stays fast."""
    from fedqr.privacy import mechanism_for as spec

    return spec(mechanism)


FIGURE_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff",
                   ".webp")
"""Figure files matplotlib writes (it picks the format by the suffix)."""


def check_out_file(name: str, path: Path | None, *,
                   suffixes: tuple[str, ...] | None = None) -> None:
    """Reject, before any work, an output file path that is a folder or cannot be written,
    or (``suffixes``) does not end in one of them."""
    if path is None:
        return
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise ValueError(f"{name} must end in {', '.join(suffixes)}, got {name}={str(path)!r}")
    check_writable_file(name, path)


def check_out_dir(name: str, path: Path, *, files: tuple[str, ...] = ()) -> None:
    """Reject, before any work, an output folder that is a file, under a file or not
    writable, or that holds a folder (or other non-file) named like one of the ``files`` the
    command writes (the message names option ``name``)."""
    check_writable_dir(name, path)
    taken = [f for f in files if (path / f).exists() and not (path / f).is_file()]
    if taken:
        raise ValueError(f"{name} must be a folder where the output files can be written: "
                         f"{', '.join(taken)} in it is a folder (or other non-file), got "
                         f"{name}={str(path)!r}")


staged = staged_dir
"""Stage output files inside the output folder; they appear there only on success."""


__all__ = ["FIGURE_SUFFIXES", "check_out_dir", "check_out_file", "device", "err", "fail", "fail_on",
           "floats", "mechanism_for", "out", "progress", "recorded_warnings", "show_warnings",
           "staged", "warn_diverged", "write_file_atomic", "write_json_atomic"]


_RECORDERS: list[list[str]] = []


@contextlib.contextmanager
def recorded_warnings() -> Iterator[list[str]]:
    """The texts of fedqr's own warnings :func:`show_warnings` prints inside the block (a
    stored plan keeps them, so that its replay says them again)."""
    texts: list[str] = []
    _RECORDERS.append(texts)
    try:
        yield texts
    finally:
        _RECORDERS.remove(texts)


def show_warnings(caught: list[warnings.WarningMessage], *,
                  rewrite: Callable[[str], str] = lambda text: text) -> None:
    """Warnings recorded while a command worked, once it is done: fedqr's own as one
    ``warning:`` line on stderr naming the command's options (after the command's own
    ``rewrite`` of the text), others as Python shows them."""

    for w in caught:
        if is_own(w):
            text = name_options(rewrite(str(w.message)))
            err.print(f"[yellow]warning:[/] {escape(text)}")
            for texts in _RECORDERS:
                texts.append(text)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def warn_diverged(doc: dict[str, Any]) -> None:
    """One line on stderr when a run's metrics became non-finite (saved as null)."""
    note = diverged_note(doc)
    if note is not None:
        err.print(f"[yellow]warning:[/] {escape(note)}")


def progress(label: str) -> Progress:
    """A rich progress bar on stderr (hidden when stderr is not a terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(f"[bold]{label}[/] {{task.description}}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), console=err,
                    disable=not err.is_terminal)
