"""The one data recipe: which data set, which share of it, and how it is split into clients.

Every entry point (``fedqr run``, ``fedqr plan``/``estimate``, ``fedqr reproduce``, both Flower
modes and the planner's twin) builds its client data from a :class:`DataSpec`, so the same
options always give the same client data.

The draws (see CHANGELOG.md): the training share is drawn from
``numpy.random.default_rng([seed, 1])`` and the partition from ``numpy.random.default_rng(seed)``;
the two streams are independent, so the partition of the full data set does not depend on
whether a share was drawn. A ``by-writer`` partition keeps only the test samples of the
training writers (LEAF's convention).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from fedqr._validate import check_in_range, check_int_range, check_positive
from fedqr.data._validate import parse_enum
from fedqr.data.datasets import Dataset, DatasetName, load_dataset
from fedqr.data.partition import Partition, PartitionKind, make_partition
from fedqr.data.presets import default_partition

__all__ = ["ClientData", "DataSpec", "default_partition", "files_stamp"]

SEED_MAX = 2**63 - 1
"""Largest seed (NumPy and torch seeds are unsigned 64-bit; fedqr keeps them int64-safe)."""


def files_stamp(dataset: DatasetName, *, data_dir: Path | None = None) -> str | None:
    """A stamp of the files a built-in data set would be read from, where their contents are
    not checked against canonical digests (FEMNIST: any npz or LEAF folder is read); ``None``
    for MNIST (every file is md5-verified), the bundled digits, or FEMNIST not found.

    The stamp hashes each file's path, size, modification and change time (every write moves
    the change time): cached plans and estimates of other files are then not reused.
    """
    if dataset is not DatasetName.FEMNIST:
        return None
    from fedqr.data._files import DataNotFoundError
    from fedqr.data.femnist import FemnistFormatError, locate_femnist

    try:
        source = locate_femnist(data_dir=data_dir)
    except (DataNotFoundError, FemnistFormatError, OSError):
        return None
    root = source.path.resolve()
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
    return h.hexdigest()[:20]


@dataclass(frozen=True)
class ClientData:
    """A data set and its split into clients, as every party of a run sees them."""

    dataset: Dataset
    partition: Partition


@dataclass(frozen=True, kw_only=True)
class DataSpec:
    """The data recipe of a run.

    Attributes
    ----------
    dataset:
        ``mnist``, ``digits`` or ``femnist``.
    fraction:
        Share of the training set used, in ``(0, 1]`` (class-stratified).
    partition:
        How the training set is split (``None``: the paper's, see :func:`default_partition`).
    alpha:
        Dirichlet concentration (``dirichlet`` only).
    num_clients:
        N.
    seed:
        Seed of the share and of the partition.
    data_dir:
        Folder searched first for the data files; not part of :meth:`identity` (the same
        files anywhere give the same data).
    """

    dataset: DatasetName = DatasetName.MNIST
    fraction: float = 1.0
    partition: PartitionKind | None = None
    alpha: float = 0.5
    num_clients: int = 10
    seed: int = 0
    data_dir: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "dataset", parse_enum(DatasetName, "dataset", self.dataset))
        if self.partition is not None:
            object.__setattr__(self, "partition",
                               parse_enum(PartitionKind, "partition", self.partition))
        # numbers by type too (a string or a float seed failed deep inside NumPy), as plain
        # Python numbers (NumPy's accepted)
        for name, value in (
                ("fraction", check_in_range("fraction", self.fraction, 0.0, 1.0,
                                            low_open=True)),
                ("alpha", check_positive("alpha", self.alpha)),
                ("num_clients", check_int_range("num_clients", self.num_clients, 1)),
                ("seed", check_int_range("seed", self.seed, 0, SEED_MAX))):
            object.__setattr__(self, name, value)

    @property
    def partition_kind(self) -> PartitionKind:
        """The partition, with the data set's default resolved."""
        return default_partition(self.dataset) if self.partition is None else self.partition

    def identity(self) -> dict[str, Any]:
        """Everything the client data depend on, as JSON-ready data (``data_dir`` excluded;
        for a data set whose files are not checked against canonical digests, FEMNIST, the
        stamp of the files found, :func:`files_stamp`)."""
        kind = self.partition_kind
        doc: dict[str, Any] = {"dataset": self.dataset.value, "fraction": self.fraction,
                               "partition": kind.value,
                               "alpha": self.alpha if kind is PartitionKind.DIRICHLET else None,
                               "num_clients": self.num_clients, "seed": self.seed}
        stamp = files_stamp(self.dataset, data_dir=self.data_dir)
        if stamp is not None:
            doc["files"] = stamp
        return doc

    def load(self) -> Dataset:
        """The (fractional, normalised) data set, before partitioning."""
        ds = load_dataset(self.dataset, data_dir=self.data_dir, fraction=self.fraction,
                          rng=np.random.default_rng([self.seed, 1]))
        if self.partition_kind is PartitionKind.BY_WRITER:
            if ds.writer_train is None:
                raise ValueError(f"partition by-writer needs a data set with writers "
                                 f"(femnist), got dataset={self.dataset.value}")
            from fedqr.data.writers import restrict_test_to_train_writers

            ds = restrict_test_to_train_writers(ds)
        return ds

    def split(self, ds: Dataset) -> Partition:
        """Partition ``ds`` (as returned by :meth:`load`) into the N clients."""
        if self.num_clients > ds.num_train:
            raise ValueError(f"num_clients must be <= {ds.num_train} (training samples), "
                             f"got num_clients={self.num_clients}")
        return make_partition(self.partition_kind, labels=ds.y_train,
                              num_clients=self.num_clients,
                              rng=np.random.default_rng(self.seed), alpha=self.alpha,
                              writers=ds.writer_train)

    def build(self) -> ClientData:
        """Load the data and split it: the client data of every entry point.

        Raises
        ------
        ValueError
            If the partition does not fit the data set (too many clients, by-writer without
            writers, ...).
        fedqr.data.DataNotFoundError
            If the data files are missing and cannot be downloaded.
        """
        return _build(self)


@lru_cache(maxsize=1)
def _build(spec: DataSpec) -> ClientData:
    """The last spec's client data, kept: the CLI and the API ask for the same one twice (the
    model's shapes, then the run); client data are never modified."""
    ds = spec.load()
    return ClientData(dataset=ds, partition=spec.split(ds))
