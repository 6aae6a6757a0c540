"""One data recipe: every entry point builds the same client data from the same options."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedqr.cli import app
from fedqr.data import (
    ClientData,
    DatasetName,
    DataSpec,
    PartitionKind,
    load_dataset,
    make_partition,
)
from fedqr.data.datasets import stratified_subset
from fedqr.experiments.runs import prepare_data
from fedqr.flower.config import FlowerRunConfig

SPECS = [
    DataSpec(dataset=DatasetName.DIGITS, fraction=0.5, partition=PartitionKind.DIRICHLET,
             alpha=0.3, num_clients=5, seed=3),
    DataSpec(dataset=DatasetName.DIGITS, fraction=1.0, partition=PartitionKind.TWO_DIGITS,
             num_clients=4, seed=7),
    DataSpec(dataset=DatasetName.DIGITS, fraction=0.3, partition=PartitionKind.IID,
             num_clients=3, seed=11),
]


def _same(a: ClientData, b: ClientData) -> None:
    np.testing.assert_array_equal(a.dataset.x_train, b.dataset.x_train)
    np.testing.assert_array_equal(a.dataset.y_train, b.dataset.y_train)
    np.testing.assert_array_equal(a.dataset.x_test, b.dataset.x_test)
    assert len(a.partition.indices) == len(b.partition.indices)
    for ia, ib in zip(a.partition.indices, b.partition.indices, strict=True):
        np.testing.assert_array_equal(ia, ib)


def _cli_spec(monkeypatch: pytest.MonkeyPatch, args: list[str], tmp: Path) -> DataSpec:
    """The DataSpec that ``fedqr run`` builds for ``args`` (the run itself is stopped there)."""
    seen: list[DataSpec] = []

    def spy(self: DataSpec) -> ClientData:
        seen.append(self)
        raise ValueError("stop after the data recipe")

    monkeypatch.setattr(DataSpec, "build", spy)
    res = CliRunner().invoke(app, ["run", *args, "--out", str(tmp / "r")])
    assert res.exit_code == 2 and "stop after the data recipe" in res.output
    return seen[0]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.partition_kind.value}-{s.fraction}")
def test_every_entry_point_builds_the_same_client_data(
    spec: DataSpec, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    reference = spec.build()
    ds, part = prepare_data(spec.dataset, fraction=spec.fraction, partition=spec.partition_kind,
                            seed=spec.seed, num_clients=spec.num_clients, alpha=spec.alpha)
    _same(reference, ClientData(dataset=ds, partition=part))
    flower = FlowerRunConfig(dataset=spec.dataset, fraction=spec.fraction,
                             partition=spec.partition_kind, alpha=spec.alpha,
                             num_clients=spec.num_clients, clients_per_round=1, seed=spec.seed)
    ds, part = flower.load_data()
    _same(reference, ClientData(dataset=ds, partition=part))
    cli = _cli_spec(monkeypatch, [
        "--dataset", spec.dataset.value, "--fraction", str(spec.fraction),
        "--partition", spec.partition_kind.value,  # --alpha only where it is used
        *(["--alpha", str(spec.alpha)] if spec.partition_kind is PartitionKind.DIRICHLET
          else []),
        "--num-clients", str(spec.num_clients), "--clients-per-round", "1",
        "--seed", str(spec.seed)], tmp_path)
    assert cli.identity() == spec.identity()


def test_the_documented_draws() -> None:
    """Share from default_rng([seed, 1]), partition from default_rng(seed) (CHANGELOG)."""
    spec = DataSpec(dataset=DatasetName.DIGITS, fraction=0.4, partition=PartitionKind.IID,
                    num_clients=3, seed=5)
    full = load_dataset(DatasetName.DIGITS)
    keep = stratified_subset(full.y_train, fraction=0.4, rng=np.random.default_rng([5, 1]))
    built = spec.build()
    np.testing.assert_array_equal(built.dataset.y_train, full.y_train[keep])
    part = make_partition(PartitionKind.IID, labels=built.dataset.y_train, num_clients=3,
                          rng=np.random.default_rng(5))
    for a, b in zip(built.partition.indices, part.indices, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"fraction": 0.0}, "fraction"), ({"fraction": 1.5}, "fraction"),
    ({"alpha": 0.0}, "alpha"), ({"num_clients": 0}, "num_clients"),
    ({"seed": -1}, "seed"), ({"seed": 2**64}, "seed"),
])
def test_bad_spec_names_the_parameter(kwargs: dict[str, float], name: str) -> None:
    with pytest.raises(ValueError, match=f"{name} must be"):
        DataSpec(**kwargs)  # type: ignore[arg-type]


def test_by_writer_needs_writers() -> None:
    spec = DataSpec(dataset=DatasetName.DIGITS, partition=PartitionKind.BY_WRITER)
    with pytest.raises(ValueError, match="by-writer needs a data set with writers"):
        spec.build()


def _rewrite(path: Path, data: bytes) -> None:
    """Write ``data`` and put the modification time back: only size or change time tell."""
    st = path.stat()
    path.write_bytes(data)
    import os

    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_femnist_identity_stamps_the_files_it_reads_and_mnist_s_does_not(tmp_path: Path) -> None:
    """FEMNIST's files are not checked against canonical digests, so the recipe's identity
    (the planner's and the estimate's cache keys) stamps the file found: another file of the
    same name and modification time is another identity; MNIST's (md5-verified) and the
    digits' identities name no files."""
    from fedqr.data.spec import files_stamp

    folder = tmp_path / "femnist"
    folder.mkdir()
    npz = folder / "femnist_leaf_writers.npz"
    npz.write_bytes(b"one")
    spec = DataSpec(dataset=DatasetName.FEMNIST, num_clients=3, data_dir=folder)
    first = spec.identity()
    assert first["files"] == files_stamp(DatasetName.FEMNIST, data_dir=folder)
    assert spec.identity() == first
    _rewrite(npz, b"two")  # same size, same mtime: the change time moves
    assert spec.identity()["files"] != first["files"]
    assert "files" not in DataSpec(dataset=DatasetName.DIGITS).identity()
    assert files_stamp(DatasetName.MNIST, data_dir=folder) is None
