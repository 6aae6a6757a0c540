"""Partition by writer: whole writers go to clients, balancing the clients' sample counts.

Used for FEMNIST (LEAF), where each client of the paper's experiments holds the data of
several writers, about 70,000 samples on N = 10 clients.
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np
from numpy.typing import ArrayLike

from fedqr.data._validate import check_int, check_labels, check_rng
from fedqr.data.datasets import Dataset
from fedqr.data.partition import Partition


def partition_by_writer(
    *, writers: ArrayLike, num_clients: int, rng: np.random.Generator
) -> Partition:
    """Give each writer's samples to one client, balancing sample counts greedily.

    Writers are taken largest first (writers with equal counts in random order) and each
    goes to the client holding the fewest samples so far (ties broken by a random order of
    the clients fixed once): the longest-processing-time rule, so the largest client
    exceeds the mean by less than the largest writer's count.

    Parameters
    ----------
    writers : array_like
        1-D integer writer id of every training sample.
    num_clients : int
        Number of clients, ``1 <= num_clients <= number of distinct writers``.
    rng : numpy.random.Generator
        Source of randomness (tie-breaking only).

    Returns
    -------
    Partition
        Every client holds at least one writer; no writer is split.
    """
    w = check_labels(writers, name="writers")
    gen = check_rng(rng)
    uniq, inverse, counts = np.unique(w, return_inverse=True, return_counts=True)
    k = check_int("num_clients", num_clients, low=1, high=uniq.size)
    order = gen.permutation(uniq.size)
    order = order[np.argsort(-counts[order], kind="stable")]  # largest first
    heap = [(0, int(tie), c) for c, tie in enumerate(gen.permutation(k))]
    heapq.heapify(heap)
    owner_of_writer = np.empty(uniq.size, dtype=np.int64)
    for wi in order:
        load, tie, client = heapq.heappop(heap)
        owner_of_writer[wi] = client
        heapq.heappush(heap, (load + int(counts[wi]), tie, client))
    owner = owner_of_writer[inverse]
    by_client = np.argsort(owner, kind="stable")  # ascending sample index within a client
    sizes = np.bincount(owner, minlength=k)
    return Partition(indices=tuple(np.split(by_client, np.cumsum(sizes)[:-1])))


def restrict_test_to_train_writers(dataset: Dataset) -> Dataset:
    """Keep only the test samples of writers that also have training samples.

    LEAF splits each writer's samples 90/10 into train and test, so its test set holds the
    training writers. In the compact FEMNIST subset 314 writers have only their LEAF test
    part (their train files were not available): their 9,773 test samples come from writers
    never seen in training and with another class mix (29-48% digits against 71% in the
    training set). This returns the 6,601 test samples of the 396 training writers.

    Raises
    ------
    ValueError
        If ``dataset`` has no writers.
    """
    if dataset.writer_train is None or dataset.writer_test is None:
        raise ValueError(f"dataset {dataset.name!r} has no writers (writer_train/writer_test "
                         "are None)")
    keep = np.isin(dataset.writer_test, dataset.writer_train)
    return dataclasses.replace(dataset, x_test=dataset.x_test[keep],
                               y_test=dataset.y_test[keep],
                               writer_test=dataset.writer_test[keep])
