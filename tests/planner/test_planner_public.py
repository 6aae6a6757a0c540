"""A public proxy from another source: split like the deployment by the reported sizes."""

from __future__ import annotations

import numpy as np
import pytest

from fedqr.data import DatasetName, DataSpec, PartitionKind
from fedqr.planner.public import check_fits, split_by_sizes, split_like_deployment

LABELS = np.repeat(np.arange(4), 250)  # a pool of 1,000 rows, 4 balanced classes


def _disjoint(parts: tuple[np.ndarray, ...]) -> bool:
    rows = np.concatenate(parts)
    return len(np.unique(rows)) == len(rows)


def test_sizes_are_the_reported_ones_when_the_pool_holds_them() -> None:
    part = split_by_sizes(LABELS, np.array([100, 300, 50]), rng=np.random.default_rng(0))
    assert part.sizes.tolist() == [100, 300, 50]
    assert _disjoint(part.indices)


def test_sizes_are_scaled_down_to_a_smaller_pool() -> None:
    part = split_by_sizes(LABELS, np.array([1000, 3000, 1]), rng=np.random.default_rng(0))
    assert part.sizes.tolist() == [249, 749, 1]  # floor of d_i * 1000 / 4001, at least one
    assert _disjoint(part.indices) and part.num_samples <= len(LABELS)


def test_label_skew_spreads_the_clients_label_mixes() -> None:
    sizes = np.full(10, 90)

    def spread(alpha: float | None) -> float:
        part = split_by_sizes(LABELS, sizes, rng=np.random.default_rng(1), label_alpha=alpha)
        assert part.sizes.tolist() == sizes.tolist() and _disjoint(part.indices)
        mix = part.label_counts(LABELS, num_classes=4) / 90
        return float(mix.std(axis=0).mean())

    assert spread(0.5) > 3 * spread(None)


def test_a_pool_smaller_than_the_federation_is_refused() -> None:
    with pytest.raises(ValueError, match="3 training rows, fewer than the deployment's 4"):
        split_by_sizes(np.array([0, 1, 0]), np.array([5, 5, 5, 5]),
                       rng=np.random.default_rng(0))


def test_check_fits_names_the_option_and_both_shapes() -> None:
    spec = DataSpec(dataset=DatasetName.DIGITS, num_clients=2)
    ds = spec.build().dataset
    check_fits(ds, features=64, classes=10, option="proxy_data")
    with pytest.raises(ValueError, match=r"proxy_data must have the deployment's 784 features "
                                         r"and 10 classes .* got 64 features and 10 classes"):
        check_fits(ds, features=784, classes=10, option="proxy_data")
    with pytest.raises(ValueError, match="--proxy-classes"):
        check_fits(ds, features=64, classes=2, option="proxy_data")


def test_a_recipe_keeps_its_split_and_a_redraw_changes_it() -> None:
    spec = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.TWO_DIGITS,
                    num_clients=4, seed=3)
    sizes = np.array([10, 20, 30, 40])
    same, info = split_like_deployment(spec, sizes, seed=0)
    assert "recipe" in info["by"] and info["client_facts"] == ["N"]
    assert [a.tolist() for a in same.partition.indices] == [
        a.tolist() for a in spec.build().partition.indices]
    other, _ = split_like_deployment(spec, sizes, seed=0, draw=1)
    assert [a.tolist() for a in other.partition.indices] != [
        a.tolist() for a in same.partition.indices]
    skewed, info = split_like_deployment(spec, sizes, seed=0, label_alpha=0.5)
    assert skewed.partition.sizes.tolist() == sizes.tolist()
    assert info["client_facts"] == ["N", "sizes"] and "skewed" in info["labels"]
