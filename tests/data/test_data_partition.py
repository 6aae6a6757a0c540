"""Partitioners: exact cover, sizes, determinism, skew, input validation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from fedqr.data import (
    Partition,
    PartitionKind,
    make_partition,
    partition_dirichlet,
    partition_iid,
    partition_two_digits,
)

PROPS = settings(max_examples=60, deadline=None)


def assert_exact_cover(p: Partition, n: int) -> None:
    """Every index 0..n-1 in exactly one client; arrays sorted int64; no empty client."""
    for ix in p.indices:
        assert ix.dtype == np.int64
        assert ix.ndim == 1
        assert np.all(np.diff(ix) > 0)
    allidx = np.concatenate(p.indices)
    assert allidx.size == n
    np.testing.assert_array_equal(np.sort(allidx), np.arange(n))
    assert p.sizes.dtype == np.int64
    assert int(p.sizes.sum()) == n == p.num_samples
    assert np.all(p.sizes >= 1)


@st.composite
def labels_and_clients(draw: st.DrawFn, *, per_client: int = 1) -> tuple[NDArray[np.int64], int]:
    num_classes = draw(st.integers(1, 12))
    n = draw(st.integers(per_client, 400))
    labels = np.asarray(
        draw(st.lists(st.integers(0, num_classes - 1), min_size=n, max_size=n)), dtype=np.int64
    )
    num_clients = draw(st.integers(1, n // per_client))
    return labels, num_clients


seeds = st.integers(0, 2**32 - 1)


@PROPS
@given(st.integers(1, 2000), st.data(), seeds)
def test_iid_exact_cover_and_balanced(n: int, data: st.DataObject, seed: int) -> None:
    k = data.draw(st.integers(1, n))
    p = partition_iid(num_samples=n, num_clients=k, rng=np.random.default_rng(seed))
    assert p.num_clients == k
    assert_exact_cover(p, n)
    assert int(p.sizes.max() - p.sizes.min()) <= 1


@PROPS
@given(labels_and_clients(per_client=2), seeds)
def test_two_digits_exact_cover(lk: tuple[NDArray[np.int64], int], seed: int) -> None:
    labels, k = lk
    p = partition_two_digits(labels=labels, num_clients=k, rng=np.random.default_rng(seed))
    assert p.num_clients == k
    assert_exact_cover(p, labels.size)
    # two shards each of size n // 2k or n // 2k + 1
    assert int(p.sizes.max() - p.sizes.min()) <= 2


@PROPS
@given(labels_and_clients(), st.floats(0.05, 100.0), seeds)
def test_dirichlet_exact_cover(lk: tuple[NDArray[np.int64], int], alpha: float, seed: int) -> None:
    labels, k = lk
    try:
        p = partition_dirichlet(
            labels=labels, num_clients=k, alpha=alpha, rng=np.random.default_rng(seed)
        )
    except ValueError as exc:  # allowed only as the documented "no valid draw" outcome
        assert "at least one sample" in str(exc)
        return
    assert p.num_clients == k
    assert_exact_cover(p, labels.size)


def test_dirichlet_succeeds_when_easy() -> None:
    labels = np.repeat(np.arange(10), 100)
    for seed in range(20):
        p = partition_dirichlet(
            labels=labels, num_clients=10, alpha=1.0, rng=np.random.default_rng(seed)
        )
        assert_exact_cover(p, labels.size)


def test_two_digits_sorted_shards_give_two_labels_when_aligned() -> None:
    # 10 classes of 60 samples, 5 clients -> 10 shards of 60: each shard is one class.
    labels = np.repeat(np.arange(10), 60)
    shuffled = np.random.default_rng(4).permutation(labels)
    p = partition_two_digits(labels=shuffled, num_clients=5, rng=np.random.default_rng(5))
    counts = p.label_counts(shuffled, num_classes=10)
    assert np.all(p.sizes == 120)
    assert np.all((counts > 0).sum(axis=1) <= 2)
    assert np.all(np.isin(counts, [0, 60, 120]))


@pytest.mark.parametrize("kind", list(PartitionKind))
def test_deterministic_from_seed(kind: PartitionKind) -> None:
    labels = np.random.default_rng(0).integers(0, 10, size=500)
    alpha = 0.5 if kind is PartitionKind.DIRICHLET else None
    writers = np.random.default_rng(1).integers(0, 40, size=500)

    def run(seed: int) -> Partition:
        return make_partition(
            kind, labels=labels, num_clients=7, rng=np.random.default_rng(seed), alpha=alpha,
            writers=writers,
        )

    a, b, c = run(11), run(11), run(12)
    assert all(np.array_equal(x, y) for x, y in zip(a.indices, b.indices, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a.indices, c.indices, strict=True))


def test_make_partition_accepts_strings() -> None:
    labels = np.arange(40) % 4
    rng = np.random.default_rng(0)
    assert make_partition("iid", labels=labels, num_clients=4, rng=rng).num_clients == 4
    assert make_partition("two-digits", labels=labels, num_clients=4, rng=rng).num_clients == 4
    p = make_partition("dirichlet", labels=labels, num_clients=4, rng=rng, alpha=10.0)
    assert p.num_clients == 4


def _mean_distinct_labels(alpha: float) -> float:
    labels = np.repeat(np.arange(10), 200)
    out = []
    for seed in range(10):
        p = partition_dirichlet(
            labels=labels, num_clients=10, alpha=alpha, rng=np.random.default_rng(seed)
        )
        counts = p.label_counts(labels, num_classes=10)
        # "effective number of classes" per client: 1 / sum(q^2) of its label shares
        shares = counts / counts.sum(axis=1, keepdims=True)
        out.append(float(np.mean(1.0 / (shares**2).sum(axis=1))))
    return float(np.mean(out))


def test_dirichlet_small_alpha_more_skewed() -> None:
    skewed, mild, flat = (_mean_distinct_labels(a) for a in (0.1, 1.0, 100.0))
    assert skewed < mild < flat
    assert skewed < 3.0  # few classes per client
    assert flat > 9.0  # nearly all 10 classes, in nearly equal shares


def test_partition_is_immutable() -> None:
    p = partition_iid(num_samples=10, num_clients=2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="read-only"):
        p.indices[0][0] = 5
    with pytest.raises(AttributeError):
        p.indices = ()  # type: ignore[misc]


def test_partition_validates_its_arrays() -> None:
    with pytest.raises(ValueError, match="sorted"):
        Partition(indices=(np.array([2, 1]),))
    with pytest.raises(ValueError, match="1-D integer"):
        Partition(indices=(np.array([0.5]),))
    with pytest.raises(ValueError, match="at least 1 client"):
        Partition(indices=())


# --- bad input -------------------------------------------------------------------------


def test_num_clients_range_messages() -> None:
    rng = np.random.default_rng(0)
    labels = np.arange(10) % 2
    with pytest.raises(ValueError, match=r"num_clients must be >= 1, got num_clients=0"):
        partition_iid(num_samples=10, num_clients=0, rng=rng)
    with pytest.raises(ValueError, match=r"num_clients must be in \[1, 10\].*num_clients=11"):
        partition_iid(num_samples=10, num_clients=11, rng=rng)
    with pytest.raises(ValueError, match=r"num_clients must be in \[1, 5\].*num_clients=6"):
        partition_two_digits(labels=labels, num_clients=6, rng=rng)
    with pytest.raises(ValueError, match=r"num_clients must be in \[1, 10\].*num_clients=11"):
        partition_dirichlet(labels=labels, num_clients=11, alpha=1.0, rng=rng)
    with pytest.raises(TypeError, match="num_clients must be an integer"):
        partition_iid(num_samples=10, num_clients=2.0, rng=rng)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_samples must be >= 1, got num_samples=0"):
        partition_iid(num_samples=0, num_clients=1, rng=rng)


@pytest.mark.parametrize("alpha", [0.0, -1.0, float("nan"), float("inf")])
def test_alpha_must_be_positive(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha must be a finite number > 0"):
        partition_dirichlet(
            labels=np.arange(10) % 2, num_clients=2, alpha=alpha, rng=np.random.default_rng(0)
        )


def test_labels_validation() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"labels must be 1-D, got labels.shape=\(2, 5\)"):
        partition_two_digits(labels=np.zeros((2, 5), dtype=int), num_clients=1, rng=rng)
    with pytest.raises(ValueError, match="labels must hold integers"):
        partition_two_digits(labels=np.zeros(10), num_clients=1, rng=rng)
    with pytest.raises(ValueError, match="labels must hold at least 1 sample"):
        partition_dirichlet(labels=np.array([], dtype=int), num_clients=1, alpha=1.0, rng=rng)


def test_rng_must_be_generator() -> None:
    with pytest.raises(TypeError, match=r"rng must be a numpy\.random\.Generator"):
        partition_iid(num_samples=10, num_clients=2, rng=0)  # type: ignore[arg-type]


def test_make_partition_bad_kind_and_missing_alpha() -> None:
    rng = np.random.default_rng(0)
    labels = np.arange(10) % 2
    with pytest.raises(ValueError, match=r"kind must be one of 'two-digits', 'iid', 'dirichlet'"):
        make_partition("pathological", labels=labels, num_clients=2, rng=rng)
    with pytest.raises(ValueError, match="alpha is required"):
        make_partition(PartitionKind.DIRICHLET, labels=labels, num_clients=2, rng=rng)


def test_dirichlet_gives_up_with_clear_message() -> None:
    labels = np.zeros(5, dtype=np.int64)  # one class, tiny alpha: almost surely one client
    with pytest.raises(ValueError, match=r"at least one sample in 3 draws.*increase alpha"):
        partition_dirichlet(
            labels=labels, num_clients=5, alpha=1e-3, rng=np.random.default_rng(0), max_draws=3
        )


def test_dirichlet_refuses_a_concentration_its_draw_cannot_hold() -> None:
    y = np.arange(100) % 5
    huge = partition_dirichlet(labels=y, num_clients=4, alpha=1e100, rng=np.random.default_rng(0))
    assert sorted(np.concatenate(huge.indices).tolist()) == list(range(100))
    with pytest.raises(ValueError, match=r"alpha must be at most 1e\+100 .* got alpha=1e\+308"):
        partition_dirichlet(labels=y, num_clients=4, alpha=1e308, rng=np.random.default_rng(0))
