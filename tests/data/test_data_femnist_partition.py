"""partition_by_writer: whole writers per client, sample counts balanced greedily."""

from __future__ import annotations

import numpy as np
import pytest

from fedqr.data import make_partition, partition_by_writer


def _writers(counts: list[int], rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(np.repeat(np.arange(len(counts)) * 7 + 3, counts))  # sparse ids


def test_writers_are_never_split_and_clients_balanced() -> None:
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 300, size=200).tolist()
    writers = _writers(counts, rng)
    part = partition_by_writer(writers=writers, num_clients=10, rng=np.random.default_rng(1))
    assert part.num_clients == 10 and part.num_samples == writers.size
    seen = np.concatenate(part.indices)
    assert np.array_equal(np.sort(seen), np.arange(writers.size))
    client_of = {}
    for c, idx in enumerate(part.indices):
        for w in np.unique(writers[idx]):
            assert client_of.setdefault(int(w), c) == c
    assert part.sizes.max() - part.sizes.min() <= max(counts)
    assert part.sizes.max() <= writers.size / 10 + max(counts)


def test_greedy_largest_first_into_lightest() -> None:
    writers = np.repeat([0, 1, 2, 3, 4], [5, 4, 3, 3, 1])
    part = partition_by_writer(writers=writers, num_clients=2, rng=np.random.default_rng(0))
    # 5 | 4 -> 4 + 3 = 7 | 5 + 3 = 8 -> 7 + 1 = 8: both clients hold 8
    assert sorted(part.sizes.tolist()) == [8, 8]


def test_seeded_and_every_client_holds_a_writer() -> None:
    writers = np.repeat(np.arange(6), 10)  # all ties: the rng decides
    a = partition_by_writer(writers=writers, num_clients=6, rng=np.random.default_rng(5))
    b = partition_by_writer(writers=writers, num_clients=6, rng=np.random.default_rng(5))
    assert all(np.array_equal(x, y) for x, y in zip(a.indices, b.indices, strict=True))
    assert a.sizes.tolist() == [10] * 6
    others = [partition_by_writer(writers=writers, num_clients=6, rng=np.random.default_rng(s))
              for s in range(6, 12)]
    assert any(not np.array_equal(o.indices[0], a.indices[0]) for o in others)


def test_make_partition_dispatch_and_errors() -> None:
    writers = np.repeat(np.arange(4), 3)
    labels = np.zeros(12, dtype=np.int64)
    part = make_partition("by-writer", labels=labels, writers=writers, num_clients=2,
                          rng=np.random.default_rng(0))
    assert part.sizes.tolist() == [6, 6]
    with pytest.raises(ValueError, match="writers is required for kind='by-writer'"):
        make_partition("by-writer", labels=labels, num_clients=2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"writers must have one entry per sample \(12\)"):
        make_partition("by-writer", labels=labels, writers=writers[:5], num_clients=2,
                       rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"num_clients must be in \[1, 4\], got num_clients=5"):
        partition_by_writer(writers=writers, num_clients=5, rng=np.random.default_rng(0))
    with pytest.raises(TypeError, match=r"rng must be a numpy\.random\.Generator"):
        partition_by_writer(writers=writers, num_clients=2, rng=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="writers must hold integers"):
        partition_by_writer(writers=np.array([0.5, 1.5]), num_clients=1,
                            rng=np.random.default_rng(0))
