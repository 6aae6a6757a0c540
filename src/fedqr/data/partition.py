"""Partitioners: split ``n`` training samples among ``N`` clients.

Every partitioner returns a :class:`Partition` in which each sample index
``0..n-1`` belongs to exactly one client and each client holds at least one sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedqr._enums import PartitionKind as PartitionKind
from fedqr.data._validate import (
    check_int,
    check_labels,
    check_positive_float,
    check_rng,
    parse_enum,
)

#: How many Dirichlet draws :func:`partition_dirichlet` makes before giving up.
DIRICHLET_MAX_DRAWS = 100


@dataclass(frozen=True, eq=False)
class Partition:
    """Sample indices held by each client.

    Attributes
    ----------
    indices : tuple of numpy.ndarray
        One read-only, ascending ``int64`` index array per client.
    """

    indices: tuple[NDArray[np.int64], ...]

    def __post_init__(self) -> None:
        if len(self.indices) == 0:
            raise ValueError("indices must hold at least 1 client, got 0")
        frozen: list[NDArray[np.int64]] = []
        for i, ix in enumerate(self.indices):
            arr: NDArray[Any] = np.asarray(ix)
            if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
                raise ValueError(
                    f"indices[{i}] must be a 1-D integer array, got shape={arr.shape}, "
                    f"dtype={arr.dtype}"
                )
            out = arr.astype(np.int64, copy=True)
            if out.size > 1 and bool(np.any(out[1:] < out[:-1])):
                raise ValueError(f"indices[{i}] must be sorted ascending")
            out.setflags(write=False)
            frozen.append(out)
        object.__setattr__(self, "indices", tuple(frozen))

    @property
    def num_clients(self) -> int:
        """Number of clients."""
        return len(self.indices)

    @property
    def sizes(self) -> NDArray[np.int64]:
        """Number of samples of each client, ``int64 [num_clients]``."""
        return np.array([ix.size for ix in self.indices], dtype=np.int64)

    @property
    def num_samples(self) -> int:
        """Total number of samples over all clients."""
        return int(self.sizes.sum())

    def label_counts(self, labels: ArrayLike, *, num_classes: int) -> NDArray[np.int64]:
        """Per-client class histogram, ``int64 [num_clients, num_classes]``.

        Parameters
        ----------
        labels : array_like
            1-D integer labels in ``0..num_classes-1`` of all samples.
        num_classes : int
            Number of classes.
        """
        y = check_labels(labels)
        k = check_int("num_classes", num_classes, low=1)
        if int(y.min()) < 0 or int(y.max()) >= k:
            raise ValueError(
                f"labels must lie in [0, {k - 1}], got labels in [{int(y.min())}, {int(y.max())}]"
            )
        return np.stack([np.bincount(y[ix], minlength=k) for ix in self.indices]).astype(np.int64)


def _finish(parts: Sequence[NDArray[Any]]) -> Partition:
    return Partition(indices=tuple(np.sort(np.asarray(p, dtype=np.int64)) for p in parts))


def _check_num_clients(num_clients: object, num_samples: int, *, per_client: int = 1) -> int:
    """Check ``1 <= num_clients`` and ``per_client * num_clients <= num_samples``."""
    k = check_int("num_clients", num_clients, low=1)
    if per_client * k > num_samples:
        need = f"{per_client} * num_clients" if per_client > 1 else "num_clients"
        raise ValueError(
            f"num_clients must be in [1, {num_samples // per_client}] ({need} <= "
            f"num_samples={num_samples}), got num_clients={k}"
        )
    return k


def partition_iid(*, num_samples: int, num_clients: int, rng: np.random.Generator) -> Partition:
    """Split a random permutation of ``0..num_samples-1`` into nearly equal parts.

    Parameters
    ----------
    num_samples : int
        Number of samples ``n >= 1``.
    num_clients : int
        Number of clients, ``1 <= num_clients <= num_samples``.
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    Partition
        Client sizes differ by at most 1.
    """
    n = check_int("num_samples", num_samples, low=1)
    k = _check_num_clients(num_clients, n)
    gen = check_rng(rng)
    return _finish(np.array_split(gen.permutation(n), k))


def partition_two_digits(
    *, labels: ArrayLike, num_clients: int, rng: np.random.Generator
) -> Partition:
    """The pathological non-iid split: each client gets two shards of label-sorted samples.

    The samples are sorted by label (ties in random order), cut into ``2 * num_clients``
    contiguous shards of nearly equal size (``np.array_split``), and the shards are dealt
    out in random order, two per client. With MNIST and 10 clients each client holds
    6,000 samples, mostly of two digits (a shard may straddle a label boundary).

    Parameters
    ----------
    labels : array_like
        1-D integer labels of all ``n`` samples.
    num_clients : int
        Number of clients, ``1 <= num_clients <= n // 2``.
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    Partition
        Client sizes differ by at most 2.
    """
    y = check_labels(labels)
    k = _check_num_clients(num_clients, y.size, per_client=2)
    gen = check_rng(rng)
    shuffled = gen.permutation(y.size)
    by_label = shuffled[np.argsort(y[shuffled], kind="stable")]
    shards = np.array_split(by_label, 2 * k)
    deal = gen.permutation(2 * k)
    return _finish(
        [np.concatenate((shards[deal[2 * i]], shards[deal[2 * i + 1]])) for i in range(k)]
    )


MAX_ALPHA = 1e100
"""The largest Dirichlet concentration :func:`partition_dirichlet` takes (NumPy's gamma draws
overflow near 1e300)."""


def partition_dirichlet(
    *,
    labels: ArrayLike,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
    max_draws: int = DIRICHLET_MAX_DRAWS,
) -> Partition:
    """Label-skewed split: each class is shared out by Dirichlet(alpha) proportions.

    For each class, proportions ``p ~ Dirichlet(alpha * ones(num_clients))`` are drawn
    and the class's samples, shuffled, are cut at ``floor(cumsum(p) * n_c)``. Small
    ``alpha`` gives each client few classes; large ``alpha`` approaches an iid split.
    The whole draw is repeated until every client holds at least one sample.

    Parameters
    ----------
    labels : array_like
        1-D integer labels of all ``n`` samples.
    num_clients : int
        Number of clients, ``1 <= num_clients <= n``.
    alpha : float
        Dirichlet concentration, ``> 0``.
    rng : numpy.random.Generator
        Source of randomness.
    max_draws : int, optional
        Draws tried before giving up, ``>= 1``.

    Returns
    -------
    Partition
        Every client holds at least one sample.

    Raises
    ------
    ValueError
        If an argument is out of range, or no draw out of ``max_draws`` left every
        client at least one sample.
    """
    y = check_labels(labels)
    k = _check_num_clients(num_clients, y.size)
    a = check_positive_float("alpha", alpha)
    if a > MAX_ALPHA:  # the Dirichlet draw overflows to NaN proportions long before 1e308
        raise ValueError(f"alpha must be at most {MAX_ALPHA:g} (far below it every client gets "
                         f"the same share of each class, as --partition iid deals), got "
                         f"alpha={a!r}")
    draws = check_int("max_draws", max_draws, low=1)
    gen = check_rng(rng)
    members = [np.flatnonzero(y == c) for c in np.unique(y)]
    clients = np.arange(k)
    owner = np.empty(y.size, dtype=np.int64)
    for _ in range(draws):
        for idx in members:
            p = gen.dirichlet(np.full(k, a))
            bounds = np.clip(np.floor(np.cumsum(p) * idx.size), 0, idx.size).astype(np.int64)
            bounds[-1] = idx.size  # the last client takes the rest, whatever the rounding
            counts = np.diff(bounds, prepend=0)
            owner[gen.permutation(idx)] = np.repeat(clients, counts)
        sizes = np.bincount(owner, minlength=k)
        if int(sizes.min()) > 0:
            by_client = np.argsort(owner, kind="stable")  # stable: ascending within a client
            return _finish(np.split(by_client, np.cumsum(sizes)[:-1]))
    raise ValueError(
        f"partition_dirichlet could not give every client at least one sample in "
        f"{draws} draws (num_clients={k}, num_samples={y.size}, alpha={a!r}): "
        "increase alpha or reduce num_clients"
    )


def make_partition(
    kind: PartitionKind | str,
    *,
    labels: ArrayLike,
    num_clients: int,
    rng: np.random.Generator,
    alpha: float | None = None,
    writers: ArrayLike | None = None,
) -> Partition:
    """Dispatch to the partitioner named by ``kind``.

    Parameters
    ----------
    kind : PartitionKind or str
        ``"two-digits"``, ``"iid"``, ``"dirichlet"`` or ``"by-writer"``
        (:func:`fedqr.data.writers.partition_by_writer`).
    labels : array_like
        1-D integer labels of all ``n`` samples (``iid`` uses only their number).
    num_clients : int
        Number of clients.
    rng : numpy.random.Generator
        Source of randomness.
    alpha : float or None, optional
        Dirichlet concentration: required for ``dirichlet``, ignored otherwise.
    writers : array_like or None, optional
        Writer of every sample (``Dataset.writer_train``): required for ``by-writer``,
        ignored otherwise.

    Returns
    -------
    Partition
        The partition.

    Raises
    ------
    ValueError
        If ``kind`` is unknown, ``alpha`` is missing for ``dirichlet``, ``writers`` is
        missing for ``by-writer`` or does not match ``labels``, or another argument is out
        of range.
    """
    part_kind = parse_enum(PartitionKind, "kind", kind)
    y = check_labels(labels)
    if part_kind is PartitionKind.IID:
        return partition_iid(num_samples=y.size, num_clients=num_clients, rng=rng)
    if part_kind is PartitionKind.TWO_DIGITS:
        return partition_two_digits(labels=y, num_clients=num_clients, rng=rng)
    if part_kind is PartitionKind.BY_WRITER:
        from fedqr.data.writers import partition_by_writer  # writers imports this module

        if writers is None:
            raise ValueError("writers is required for kind='by-writer' (e.g. "
                             "Dataset.writer_train of femnist), got writers=None")
        w = check_labels(writers, name="writers")
        if w.shape != y.shape:
            raise ValueError(f"writers must have one entry per sample ({y.size}), "
                             f"got writers.shape={w.shape}")
        return partition_by_writer(writers=w, num_clients=num_clients, rng=rng)
    if alpha is None:
        raise ValueError("alpha is required for kind='dirichlet', got alpha=None")
    return partition_dirichlet(labels=y, num_clients=num_clients, alpha=alpha, rng=rng)
