"""The data-file options every command shares (``--data FILE`` instead of ``--dataset``)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fedqr._options import (
    ClientColumnOpt,
    HiddenOpt,
    LabelColumnOpt,
    ModelOpt,
    TestShareOpt,
)

if TYPE_CHECKING:
    from fedqr._enums import DatasetName, PartitionKind
    from fedqr.data.source import OwnData

__all__ = [
    "ClientColumnOpt",
    "DataFileOpt",
    "HiddenOpt",
    "LabelColumnOpt",
    "ModelOpt",
    "ProxyClassesOpt",
    "ProxyDataOpt",
    "ProxyShareOpt",
    "StandardizeOpt",
    "TestDataOpt",
    "TestShareOpt",
    "TwinBudgetOpt",
    "TwinRepeatsOpt",
    "check_own_data_options",
    "data_warnings",
    "load_own",
    "parse_hidden",
]

DataFileOpt = Annotated[Path | None, typer.Option(
    "--data", help="Your own federated data instead of --dataset: .npz (x, y, client, optional "
                   "x_test, y_test), .csv or .parquet (columns client, label and the features).")]
TestDataOpt = Annotated[Path | None, typer.Option(
    help="With --data: a separate test file in the same format.")]
StandardizeOpt = Annotated[bool, typer.Option(
    "--standardize/--no-standardize",
    help="With --data: standardise every feature (images [n, H, W] or [n, C, H, W]: every "
         "channel) by the training rows' mean and std (the built-in sets are standardised "
         "too); --no-standardize uses them as given.")]
ProxyDataOpt = Annotated[Path | None, typer.Option(
    help="public-proxy/private-pilot: a public data file (the --data format; its client "
         "column, or an .npz file's client array, is optional), standardised by its own statistics "
         "as the deployment's rows are (per feature, per channel of images, or not at all "
         "with --no-standardize); "
         "its rows are dealt to the N clients by their sizes, its test set (else 20% of its "
         "rows) evaluates the twin.")]
ProxyClassesOpt = Annotated[str | None, typer.Option(
    help="With a public proxy (--proxy-data or --proxy-dataset): the proxy classes kept, e.g. "
         "0-9 or 0,1,5 (relabelled 0..k-1 in that order), or MAP.json, a label map "
         "{\"proxy label\": deployment label}.")]

ProxyShareOpt = Annotated[float | None, typer.Option(
        help="Share of each client's (or the public set's) rows the twin trains on "
             "(default: about 4000 rows in all).")]

TwinRepeatsOpt = Annotated[int | None, typer.Option(
        help="Twin repeats per schedule (>= 2; default 3 on 3,000 proxy rows or more, up to "
             "12 on fewer).")]

TwinBudgetOpt = Annotated[float | None, typer.Option(
        help="Seconds (estimated) the twin of a model other than logreg and linear may "
             "simulate (default 12 per 1,000 proxy rows, 15 to 45, raised up to 300 for a "
             "model whose first race would take over 40% of it, or to follow the leading "
             "schedule whose loss still falls; a given budget is never raised). The twin of "
             "logreg and linear runs its whole search: a budget given for it is ignored, "
             "with a warning.")]


MAX_WIDTH = 1_000_000
"""The widest hidden layer ``--hidden`` takes (wider is a typo: it would not fit in memory)."""


def parse_hidden(text: str) -> tuple[int, ...]:
    """``"64,32"`` as ``(64, 32)``; a clear error naming ``hidden`` otherwise."""
    from fedqr._validate import parse_widths

    return parse_widths("hidden", text, most=MAX_WIDTH)


def load_own(path: Path, *, test_data: Path | None, test_share: float | None,
             client_column: str, label_column: str, standardize: bool, seed: int,
             classes: str | None = None) -> OwnData:
    """The :class:`~fedqr.data.source.OwnData` of a data file (and its class selection)."""
    from fedqr.data import FederatedData
    from fedqr.data.public import select_proxy_classes
    from fedqr.data.source import OwnData

    with data_warnings(path):
        data = FederatedData.from_file(path, client_column=client_column,
                                       label_column=label_column, test_path=test_data,
                                       test_share=test_share, standardize=standardize, seed=seed)
        if classes is not None:
            data = select_proxy_classes(data, classes)
    return OwnData(data=data, seed=seed)


@contextmanager
def data_warnings(path: Path | str) -> Iterator[None]:
    """Show the data layer's warnings about the file (or data set) ``path`` (a class without rows:
    :class:`~fedqr.data.EmptyClassWarning`; test features far outside the training rows':
    :class:`~fedqr.data.FeatureScaleWarning`) raised inside as one ``warning:`` line each,
    naming the command's options; other warnings as they were. Shown once the block is done
    (nothing on an error, which is shown instead)."""
    from rich.markup import escape

    from fedqr._cli_messages import name_options
    from fedqr.cli._common import err
    from fedqr.data import EmptyClassWarning, FeatureScaleWarning

    ours = (EmptyClassWarning, FeatureScaleWarning)
    with warnings.catch_warnings(record=True) as caught:
        for category in ours:
            warnings.simplefilter("always", category)
        yield
    for w in caught:
        if issubclass(w.category, ours):
            err.print(f"[yellow]warning:[/] {escape(f'{path}: {name_options(str(w.message))}')}")
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def check_own_data_options(*, dataset: DatasetName | None, partition: PartitionKind | None,
                            fraction: float, data_dir: Path | None, client_column: str,
                            label_column: str) -> None:
    """A data file brings its clients and rows: the options of a built-in recipe do not
    apply, and its client and label columns must differ."""
    given = [f"{name}={value}" for name, value in (
        ("dataset", dataset.value if dataset is not None else None),
        ("partition", partition.value if partition is not None else None),
        ("fraction", fraction if fraction != 1.0 else None),
        ("data_dir", str(data_dir) if data_dir is not None else None)) if value is not None]
    if given:
        raise ValueError(f"--data FILE brings its own clients and rows: --dataset, --partition, "
                         f"--fraction and --data-dir are for the built-in data sets, got "
                         f"{', '.join(given)} with data (leave them out)")
    from fedqr.data.tabular import check_columns

    check_columns(client_column=client_column, label_column=label_column)
