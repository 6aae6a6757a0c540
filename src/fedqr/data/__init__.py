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
    ``0..k-1`` without a training row.
"""

from fedqr.data._files import ChecksumError, DataNotFoundError
from fedqr.data._labels import EmptyClassWarning
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

__all__ = [
    "MNIST_MIRRORS",
    "ChecksumError",
    "ClientData",
    "DataNotFoundError",
    "DataSpec",
    "Dataset",
    "DatasetName",
    "EmptyClassWarning",
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
