"""The data and model options of ``fedqr flower simulate | deploy | run``, checked.

``--data FILE`` is read as ``fedqr run --data`` reads it (pooled standardisation, the same
hold-out seed), so a Flower run and ``fedqr run`` train on the same rows; every process of the
run reads the file again from its absolute path. The model is checked on the data's shape
before any process starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedqr.flower.cli_options import FlowerOptions

if TYPE_CHECKING:
    from fedqr.data import FederatedData
    from fedqr.flower.config import FlowerRunConfig

__all__ = ["check_model", "data_fields", "own_data"]


def own_data(opts: FlowerOptions, *, remote: bool) -> FederatedData | None:
    """The ``--data`` file as ``fedqr run --data`` reads it (``None``: a built-in data set)."""
    from fedqr.data import FederatedData

    for name, path in (("data", opts.data), ("test_data", opts.test_data)):
        if path is not None and not path.is_file():
            what = "a folder, not a file" if path.is_dir() else "no such file"
            raise ValueError(f"{name} must be an existing .npz, .csv or .parquet file, got "
                             f"{name}={str(path)!r} ({what})")
    if opts.data is None:
        if opts.test_share is not None:
            raise ValueError(f"test_share needs --data FILE, got test_share={opts.test_share}")
        if opts.test_data is not None and not remote:
            raise ValueError(f"test_data needs --data FILE (run: it is the server's test set), "
                             f"got test_data={str(opts.test_data)!r}")
        return None
    if remote:
        raise ValueError("fedqr flower run: the SuperNodes hold the rows (fedqr flower "
                         "supernode --data), the server none; give its test set with "
                         f"--test-data, got --data {str(opts.data)!r}")
    from fedqr._cli_checks import given

    typed = [f"--{n.replace('_', '-')}" for n in ("dataset", "partition", "fraction", "alpha",
                                                  "data_dir") if given(n)]
    if typed:
        raise ValueError(f"--data FILE brings its own clients and rows: {', '.join(typed)} "
                         f"are for the built-in data sets (leave them out), got them with "
                         f"--data {str(opts.data)!r}")
    own = FederatedData.from_file(opts.data, client_column=opts.client_column,
                                  label_column=opts.label_column, test_path=opts.test_data,
                                  test_share=opts.test_share, standardize=opts.standardize,
                                  seed=opts.seed)
    if opts.num_clients is not None and opts.num_clients != own.num_clients:
        raise ValueError(f"num_clients must match the clients of --data ({own.num_clients}), "
                         f"got num_clients={opts.num_clients}")
    return own


def data_fields(opts: FlowerOptions) -> dict[str, Any]:
    """FlowerRunConfig's data-file and model fields (paths absolute: every process reads
    them)."""
    from fedqr.flower.config import parse_widths

    parse_widths(opts.hidden)
    model = opts.model or ""
    path, sep, func = model.rpartition(":")
    if sep and path.endswith(".py"):
        model = f"{Path(path).resolve()}:{func}"
    return {"data_file": str(opts.data.resolve()) if opts.data else "",
            "test_data": str(opts.test_data.resolve()) if opts.test_data else "",
            "test_share": opts.test_share or 0.0, "client_column": opts.client_column,
            "label_column": opts.label_column, "standardize": opts.standardize,
            "model": model, "hidden": opts.hidden}


def check_model(cfg: FlowerRunConfig, own: FederatedData | None) -> None:
    """Load the run's data (before any process starts) and check its model on them."""
    from fedqr._cli_checks import check_hidden_applies
    from fedqr.flower.client_data import input_shape, run_kernel
    from fedqr.flower.server_logic import server_dataset

    check_hidden_applies(cfg.model_name, cfg.hidden)

    if own is not None:
        ds = own.to_client_data().dataset
    elif cfg.client_data:
        ds = server_dataset(cfg)  # the server's evaluation data
    else:
        ds = cfg.load_data()[0]
    run_kernel(cfg.model_name, input_shape=input_shape(ds), num_classes=ds.num_classes,
               hidden=cfg.hidden_widths)
