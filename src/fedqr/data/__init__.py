"""Data: MNIST, digits and FEMNIST as plain NumPy arrays, and client partitioners.

Loaders
    :func:`load_dataset` returns a normalised, flattened :class:`Dataset`;
    :func:`load_mnist_arrays`, :func:`load_digits_arrays` and :func:`load_femnist_arrays`
    return the raw images (FEMNIST with writers).
Partitioners
    :func:`partition_two_digits`, :func:`partition_iid`, :func:`partition_dirichlet`,
    :func:`partition_by_writer` and the dispatcher :func:`make_partition` return a
    :class:`Partition`.
Federated data
    :class:`FederatedData`: rows, labels and the client of each row, from arrays, a data
    file (``.npz``, ``.csv``, ``.parquet``; see :mod:`fedqr.data.tabular`) or a built-in
    :class:`ClientData`; :class:`EmptyClassWarning` when its labels leave a class of
    ``0..k-1`` without a training row, :class:`FeatureScaleWarning` when standardised test
    features lie far outside the training rows'.

Names are imported on first use (as in :mod:`fedqr`), so a module that needs one
submodule (a SuperNode reading its rows) does not import torch and dp-accounting with the
rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedqr._lazy import lazy_names

_EXPORTS = {
    "ChecksumError": "fedqr.data._files",
    "ClientData": "fedqr.data.spec",
    "DataNotFoundError": "fedqr.data._files",
    "DataSpec": "fedqr.data.spec",
    "Dataset": "fedqr.data.datasets",
    "DatasetName": "fedqr.data.datasets",
    "EmptyClassWarning": "fedqr.data._labels",
    "FeatureScaleWarning": "fedqr.data._prepare",
    "FederatedData": "fedqr.data.federated",
    "FemnistFormatError": "fedqr.data.femnist",
    "IdxFormatError": "fedqr.data.idx",
    "MNIST_MIRRORS": "fedqr.data.mnist",
    "Partition": "fedqr.data.partition",
    "PartitionKind": "fedqr.data.partition",
    "RawData": "fedqr.data.raw",
    "Standardization": "fedqr.data.federated",
    "default_partition": "fedqr.data.spec",
    "load_dataset": "fedqr.data.datasets",
    "load_digits_arrays": "fedqr.data.digits",
    "load_femnist_arrays": "fedqr.data.femnist",
    "load_mnist_arrays": "fedqr.data.mnist",
    "locate_femnist": "fedqr.data.femnist",
    "locate_mnist_files": "fedqr.data.mnist",
    "make_partition": "fedqr.data.partition",
    "mnist_cache_dir": "fedqr.data.mnist",
    "mnist_search_dirs": "fedqr.data.mnist",
    "partition_by_writer": "fedqr.data.writers",
    "partition_dirichlet": "fedqr.data.partition",
    "partition_iid": "fedqr.data.partition",
    "partition_two_digits": "fedqr.data.partition",
    "restrict_test_to_train_writers": "fedqr.data.writers",
}

__all__ = [
    "MNIST_MIRRORS",
    "ChecksumError",
    "ClientData",
    "DataNotFoundError",
    "DataSpec",
    "Dataset",
    "DatasetName",
    "EmptyClassWarning",
    "FeatureScaleWarning",
    "FederatedData",
    "FemnistFormatError",
    "IdxFormatError",
    "Partition",
    "PartitionKind",
    "RawData",
    "Standardization",
    "default_partition",
    "load_dataset",
    "load_digits_arrays",
    "load_femnist_arrays",
    "load_mnist_arrays",
    "locate_femnist",
    "locate_mnist_files",
    "make_partition",
    "mnist_cache_dir",
    "mnist_search_dirs",
    "partition_by_writer",
    "partition_dirichlet",
    "partition_iid",
    "partition_two_digits",
    "restrict_test_to_train_writers",
]

if TYPE_CHECKING:
    from fedqr.data._files import ChecksumError, DataNotFoundError
    from fedqr.data._labels import EmptyClassWarning
    from fedqr.data._prepare import FeatureScaleWarning
    from fedqr.data.datasets import Dataset, DatasetName, load_dataset
    from fedqr.data.digits import load_digits_arrays
    from fedqr.data.federated import FederatedData, Standardization
    from fedqr.data.femnist import FemnistFormatError, load_femnist_arrays, locate_femnist
    from fedqr.data.idx import IdxFormatError
    from fedqr.data.mnist import (
        MNIST_MIRRORS,
        load_mnist_arrays,
        locate_mnist_files,
        mnist_cache_dir,
        mnist_search_dirs,
    )
    from fedqr.data.partition import (
        Partition,
        PartitionKind,
        make_partition,
        partition_dirichlet,
        partition_iid,
        partition_two_digits,
    )
    from fedqr.data.raw import RawData
    from fedqr.data.spec import ClientData, DataSpec, default_partition
    from fedqr.data.writers import partition_by_writer, restrict_test_to_train_writers


__getattr__ = lazy_names("fedqr.data", _EXPORTS, globals())
