"""A run's sorted tensors and CSR copies are reused by the next run on the same data, and never
when the data, the partition or the device differ or the arrays changed in place."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from fedqr.data import Dataset, Partition
from fedqr.privacy import Mechanism
from fedqr.sim import setup_memo
from fedqr.sim.config import PrivacyConfig, SimConfig
from fedqr.sim.engine import simulate
from fedqr.sim.setup_memo import sorted_tensors

CPU = torch.device("cpu")


def _images(seed: int, n: int = 240) -> Dataset:
    """Sparse 'images' (a background value almost everywhere): their CSR copies pay."""
    rng = np.random.default_rng(seed)
    def rows(m: int) -> np.ndarray:
        ink = rng.random((m, 64)) * (rng.random((m, 64)) < 0.15)
        return ((ink - 0.13) / 0.31).astype(np.float32)
    return Dataset(name="images", x_train=rows(n), y_train=rng.integers(0, 3, n),
                   x_test=rows(60), y_test=rng.integers(0, 3, 60), num_classes=3)


def _partition(n: int, clients: int, seed: int) -> Partition:
    order = np.random.default_rng(seed).permutation(n)
    return Partition(indices=tuple(np.sort(c) for c in np.array_split(order, clients)))


def _config(mechanism: Mechanism) -> SimConfig:
    privacy = (PrivacyConfig(mechanism=Mechanism.LAPLACE, eps=5.0, clip=20.0, sample_rate=1.0)
               if mechanism is Mechanism.LAPLACE else
               PrivacyConfig(mechanism=Mechanism.GAUSSIAN, eps=2.0, delta=1e-5, clip=5.0,
                             sample_rate=0.3))
    return SimConfig(num_clients=4, clients_per_round=2, rounds=4, repeats=2, privacy=privacy,
                     seed=5)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    setup_memo.clear()


def _order(part: Partition) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate(part.indices), np.asarray(part.sizes)


def test_the_same_data_and_partition_get_the_same_tensors_and_caches() -> None:
    ds, part = _images(0), _partition(240, 4, 1)
    first, caches = sorted_tensors(ds, *_order(part), CPU)
    again, caches_again = sorted_tensors(ds, *_order(part), CPU)
    assert all(a is b for a, b in zip(first, again, strict=True)) and caches is caches_again
    torch.testing.assert_close(first[0], torch.as_tensor(ds.x_train[_order(part)[0]]),
                               rtol=0, atol=0)
    other, other_caches = sorted_tensors(ds, *_order(_partition(240, 4, 2)), CPU)
    assert other[0] is not first[0] and other_caches is not caches  # another partition
    rows = np.arange(240)  # the same order of rows, dealt to clients of other sizes
    split_60 = Partition(indices=(rows[:60], rows[60:]))
    split_100 = Partition(indices=(rows[:100], rows[100:]))
    assert sorted_tensors(ds, *_order(split_60), CPU)[1] is not sorted_tensors(
        ds, *_order(split_100), CPU)[1]


def test_an_array_changed_in_place_is_sorted_again() -> None:
    ds, part = _images(0), _partition(240, 4, 1)
    first, _ = sorted_tensors(ds, *_order(part), CPU)
    ds.x_train[7, 3] += 1.0
    again, _ = sorted_tensors(ds, *_order(part), CPU)
    assert again[0] is not first[0]
    torch.testing.assert_close(again[0], torch.as_tensor(ds.x_train[_order(part)[0]]),
                               rtol=0, atol=0)
    moved = ds.x_train.copy()
    ds.x_train[[0, 1]] = moved[[1, 0]]  # rows swapped: the same sums, other positions
    assert sorted_tensors(ds, *_order(part), CPU)[0][0] is not again[0]


def test_entries_are_bounded_and_dropped_with_their_data() -> None:
    sets = [_images(s) for s in range(setup_memo.MEMO_SIZE + 1)]
    part = _partition(240, 4, 1)
    for ds in sets:
        sorted_tensors(ds, *_order(part), CPU)
    assert len(setup_memo._MEMO) == setup_memo.MEMO_SIZE  # the oldest left
    del sets, ds
    gc.collect()
    assert not setup_memo._MEMO  # forgotten with the training arrays


@pytest.mark.parametrize("mechanism", [Mechanism.LAPLACE, Mechanism.GAUSSIAN])
def test_a_run_after_another_equals_a_run_alone(mechanism: Mechanism) -> None:
    ds, part = _images(3), _partition(240, 4, 1)
    simulate(ds, part, _config(Mechanism.GAUSSIAN if mechanism is Mechanism.LAPLACE
                                else Mechanism.LAPLACE))  # builds and keeps the setup
    warm = simulate(ds, part, _config(mechanism))
    setup_memo.clear()
    alone = simulate(ds, part, _config(mechanism))
    np.testing.assert_array_equal(warm.final_theta, alone.final_theta)
    assert [r["test_loss"] for r in warm.runs[0]["rounds"]] == [
        r["test_loss"] for r in alone.runs[0]["rounds"]]


def test_rows_with_an_intercept_are_made_once_and_runs_stay_equal() -> None:
    import fedqr

    ds = _images(4)
    client = np.random.default_rng(0).integers(0, 4, ds.x_train.shape[0])
    data = fedqr.FederatedData.from_arrays(x=ds.x_train, y=ds.y_train, client=client,
                                           test_share=0.2, seed=0)
    run = dict(data=data, model="linear", mechanism="laplace", eps=5.0, clip=20.0, rounds=3,
               clients_per_round=2, seed=1)
    first = fedqr.simulate(**run)
    (entry,) = setup_memo._MEMO.values()
    made = dict(entry[2]._derived)
    assert made  # the training and test rows with the intercept's column
    again = fedqr.simulate(**run)
    assert all(entry[2]._derived[k][1] is v[1] for k, v in made.items())  # not made again
    np.testing.assert_array_equal(first.theta, again.theta)
    setup_memo.clear()
    np.testing.assert_array_equal(fedqr.simulate(**run).theta, first.theta)


def _coded_images(seed: int, n: int = 240) -> Dataset:
    """Images of 256 grey levels (the mixed arithmetic's integer coding applies)."""
    rng = np.random.default_rng(seed)
    def rows(m: int) -> np.ndarray:
        ink = rng.integers(0, 256, (m, 64)) / 255 * (rng.random((m, 64)) < 0.3)
        return ((ink - 0.13) / 0.31).astype(np.float32)
    return Dataset(name="coded", x_train=rows(n), y_train=rng.integers(0, 3, n),
                   x_test=rows(60), y_test=rng.integers(0, 3, 60), num_classes=3)


def test_a_layouts_client_blocks_are_built_once_per_rows_split_and_coding() -> None:
    from fedqr.models.logreg import Norm
    from fedqr.models.logreg_coded import code_rows
    from fedqr.models.logreg_pass import ClientBlock, client_layout
    from fedqr.models.sparse_rows import SparseCaches

    ds = _coded_images(7)
    x, y = torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train)
    coding = code_rows(ds.x_train)
    assert coding is not None
    caches = SparseCaches()

    def blocks(offsets: list[int], *, coded: bool = True,
               chunk_rows: int = 64) -> tuple[ClientBlock | None, ...] | None:
        return client_layout(x, y, offsets=np.asarray(offsets, dtype=np.int64), num_classes=3,
                             norm=Norm.L1, coding=coding if coded else None,
                             chunk_rows=chunk_rows, caches=caches).blocks

    first = blocks([0, 100, 240])
    assert blocks([0, 100, 240]) is first  # the same rows, split and coding: kept
    assert blocks([0, 120, 240]) is not first  # another split
    assert blocks([0, 100, 240], coded=False) is not first  # float32 blocks
    assert blocks([0, 100, 240], chunk_rows=32) is not first  # another chunk size
    alone = client_layout(x, y, offsets=np.asarray([0, 100, 240]), num_classes=3,
                          norm=Norm.L1, coding=coding, chunk_rows=64).blocks  # no caches
    assert alone is not None and first is not None
    for a, b in zip(alone, first, strict=True):
        assert a is not None and b is not None and a.coded is not None and b.coded is not None
        assert torch.equal(a.x, b.x) and torch.equal(a.cols, b.cols)
        assert all(torch.equal(c, d) for c, d in zip(a.coded.codes_t, b.coded.codes_t,
                                                      strict=True))


def test_a_mixed_run_after_another_equals_a_run_alone() -> None:
    from fedqr._precision import Arithmetic

    ds, part = _coded_images(8), _partition(240, 4, 2)
    cfg = SimConfig(num_clients=4, clients_per_round=4, rounds=4, repeats=3,
                    arithmetic=Arithmetic.MIXED, seed=3,
                    privacy=PrivacyConfig(mechanism=Mechanism.LAPLACE, eps=5.0, clip=20.0,
                                          sample_rate=1.0))
    first = simulate(ds, part, cfg)
    (entry,) = setup_memo._MEMO.values()
    kept = {k: v[1] for k, v in entry[2]._derived.items() if k[1].startswith("blocks/coded")}
    assert len(kept) == 1  # the coded blocks of the run's layout
    warm = simulate(ds, part, cfg)
    assert all(entry[2]._derived[k][1] is v for k, v in kept.items())  # not built again
    setup_memo.clear()
    alone = simulate(ds, part, cfg)
    for run in (first, warm):
        np.testing.assert_array_equal(run.final_theta, alone.final_theta)
        assert [r["test_loss"] for r in run.runs[0]["rounds"]] == [
            r["test_loss"] for r in alone.runs[0]["rounds"]]
