"""The data-file options every command shares (``--data FILE`` instead of ``--dataset``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from fedqr.data.source import OwnData

__all__ = [
    "ClientColumnOpt",
    "DataFileOpt",
    "HiddenOpt",
    "LabelColumnOpt",
    "ModelOpt",
    "ProxyClassesOpt",
    "ProxyDataOpt",
    "StandardizeOpt",
    "TestDataOpt",
    "TestShareOpt",
    "load_own",
    "parse_hidden",
]

DataFileOpt = Annotated[Path | None, typer.Option(
    "--data", help="Your own federated data instead of --dataset: .npz (x, y, client, optional "
                   "x_test, y_test), .csv or .parquet (columns client, label and the features).")]
TestDataOpt = Annotated[Path | None, typer.Option(
    help="With --data: a separate test file in the same format.")]
TestShareOpt = Annotated[float | None, typer.Option(
    help="With --data and no test set: the share of each client's rows held out for testing "
         "(stratified by label), in (0, 1).")]
ClientColumnOpt = Annotated[str, typer.Option(help="With --data (csv/parquet): client column.")]
LabelColumnOpt = Annotated[str, typer.Option(help="With --data (csv/parquet): label column.")]
StandardizeOpt = Annotated[bool, typer.Option(
    "--standardize/--no-standardize",
    help="With --data: standardise every feature by the training rows' mean and std (the "
         "built-in sets are standardised too); --no-standardize uses them as given.")]
ModelOpt = Annotated[str | None, typer.Option(
    help="logreg, mlp (see --hidden), cnn (the paper's CNN, square images) or FILE.py:FUNCTION "
         "(a factory (input_shape, num_classes) -> torch.nn.Module). Default: the data set's "
         "paper model (cnn for femnist), else logreg.")]
HiddenOpt = Annotated[str, typer.Option(help="mlp: hidden widths, comma-separated.")]
ProxyDataOpt = Annotated[Path | None, typer.Option(
    help="public-proxy/private-pilot: a public data file (the --data format), standardised by "
         "its own statistics.")]
ProxyClassesOpt = Annotated[str | None, typer.Option(
    help="With a public proxy: the proxy classes kept, e.g. 0-9 or 0,1,5 (relabelled "
         "0..k-1 in that order).")]


def parse_hidden(text: str) -> tuple[int, ...]:
    """``"64,32"`` as ``(64, 32)``; a clear error naming ``hidden`` otherwise."""
    try:
        widths = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        widths = ()
    if not widths or min(widths) < 1:
        raise ValueError(f"hidden must be comma-separated widths >= 1, got hidden={text!r}")
    return widths


def parse_classes(text: str) -> list[int]:
    """``"0-9"`` or ``"0,1,5"`` as a list of class ids."""
    classes: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",") if p.strip()):
            lo, sep, hi = part.partition("-")
            classes += list(range(int(lo), int(hi) + 1)) if sep else [int(part)]
    except ValueError:
        raise ValueError(f"proxy_classes must look like 0-9 or 0,1,5, got "
                         f"proxy_classes={text!r}") from None
    if not classes:
        raise ValueError(f"proxy_classes selects no class, got proxy_classes={text!r}")
    return classes


def load_own(path: Path, *, test_data: Path | None, test_share: float | None,
             client_column: str, label_column: str, standardize: bool, seed: int,
             classes: str | None = None) -> OwnData:
    """The :class:`~fedqr.data.source.OwnData` of a data file (and its class selection)."""
    from fedqr.data import FederatedData
    from fedqr.data.source import OwnData

    data = FederatedData.from_file(path, client_column=client_column,
                                   label_column=label_column, test_path=test_data,
                                   test_share=test_share, standardize=standardize, seed=seed)
    if classes is not None:
        data = data.select_classes(parse_classes(classes))
    return OwnData(data=data, seed=seed)
