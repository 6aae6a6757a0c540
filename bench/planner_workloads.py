"""The real deployments of ``bench/planner_suite_models.py`` and their public proxies.

Every workload is built from the real files of ``$FEDQR_DATA`` exactly as a user would give
them to ``fedqr plan --data FILE``/``--dataset``: heart disease by
``examples/heart_disease/prepare.py`` (FLamby's four hospitals; ``heart3``: Hungary,
Switzerland and VA without Cleveland, whose file is the public proxy), Adult by
``examples/adult/prepare.py`` (20 clients, Dirichlet 0.5 over education; ``adult30``: 30
clients, Dirichlet 0.3 over occupation, split seed 1), MNIST and FEMNIST
by their built-in recipes. Public proxies: Cleveland's ``hospital_cleveland.npz`` (its own
test rows), and FEMNIST's digits (classes 0-9 of the whole LEAF subset) for MNIST.
"""

from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from fedqr.data import DatasetName, DataSpec, FederatedData, PartitionKind
from fedqr.data.source import DataSource, OwnData

ROOT = Path(__file__).resolve().parents[1]
PREPARED = ROOT / "runs" / "data"


def data_dir() -> Path:
    """``$FEDQR_DATA`` (default ``/work/shared/data``)."""
    return Path(os.environ.get("FEDQR_DATA", "/work/shared/data"))


def _prepare(example: str, out: Path, *args: str) -> None:
    if out.is_dir() and any(out.iterdir()):
        return
    sub = {"heart_disease": "heart-disease", "adult": "adult"}[example]
    subprocess.run([sys.executable, str(ROOT / "examples" / example / "prepare.py"),
                    "--data-dir", str(data_dir() / sub), "--out", str(out), *args],
                   check=True, capture_output=True)


def heart_files() -> Path:
    """The prepared heart files, with ``three.csv``/``three_test.csv`` (no Cleveland)."""
    out = PREPARED / "heart"
    _prepare("heart_disease", out)
    for suffix in ("", "_test"):
        target = out / f"three{suffix}.csv"
        if target.is_file():
            continue
        lines: list[str] = []
        for name in ("hungary", "switzerland", "va"):
            rows = (out / f"hospital_{name}{suffix}.csv").read_text().splitlines()
            lines += rows if not lines else rows[1:]
        target.write_text("\n".join(lines) + "\n")
    return out


@functools.cache
def deployment(name: str) -> DataSource:
    """The clients' data of workload ``name``."""
    if name == "heart4":
        h = heart_files()
        return OwnData(data=FederatedData.from_file(h / "heart_all.csv",
                                                    test_path=h / "heart_all_test.csv"))
    if name == "heart3":
        h = heart_files()
        return OwnData(data=FederatedData.from_file(h / "three.csv",
                                                    test_path=h / "three_test.csv"))
    if name == "adult":
        out = PREPARED / "adult"
        _prepare("adult", out, "--num-clients", "20", "--attribute", "education",
                 "--alpha", "0.5")
        return OwnData(data=FederatedData.from_file(out / "adult.npz"))
    if name == "adult30":  # another split: 30 clients, Dirichlet 0.3 over occupation
        out = PREPARED / "adult30"
        _prepare("adult", out, "--num-clients", "30", "--attribute", "occupation",
                 "--alpha", "0.3", "--seed", "1")
        return OwnData(data=FederatedData.from_file(out / "adult.npz"))
    kind, frac = name.split("-")
    fraction = float(frac.removeprefix("f"))
    if kind.startswith("mnist"):
        part = PartitionKind.TWO_DIGITS if kind == "mnist_two" else PartitionKind.IID
        return DataSpec(dataset=DatasetName.MNIST, fraction=fraction, partition=part,
                        num_clients=10, data_dir=data_dir() / "mnist")
    if kind == "femnist":
        return DataSpec(dataset=DatasetName.FEMNIST, fraction=fraction,
                        partition=PartitionKind.BY_WRITER, num_clients=10,
                        data_dir=data_dir() / "femnist")
    raise ValueError(f"unknown workload {name!r}")


@functools.cache
def public_proxy(name: str) -> OwnData:
    """A public proxy: ``cleveland`` (its file, as ``--proxy-data``) or ``femnist-digits``
    (``--proxy-dataset femnist --proxy-classes 0-9``)."""
    if name == "cleveland":
        h = heart_files()
        return OwnData(data=FederatedData.from_file(h / "hospital_cleveland.npz"), seed=1)
    if name == "femnist-digits":
        pool = FederatedData.from_client_data(DataSpec(
            dataset=DatasetName.FEMNIST, partition=PartitionKind.IID, num_clients=1, seed=1,
            data_dir=data_dir() / "femnist").build())
        return OwnData(data=pool.select_classes(list(range(10))), seed=1)
    raise ValueError(f"unknown public proxy {name!r}")


def groupnorm_mlp(hidden: int) -> Callable[[tuple[int, ...], int], torch.nn.Module]:
    """The factory of Flatten, Linear(p, hidden), GroupNorm(4, hidden), Tanh, Linear(hidden,
    k): the README's advice for normalisation (GroupNorm, not batch normalisation), as a
    user's ``--model FILE.py:FUNCTION`` would give it."""
    def factory(input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(
            math.prod(input_shape), hidden), torch.nn.GroupNorm(4, hidden), torch.nn.Tanh(),
            torch.nn.Linear(hidden, num_classes))
    return factory
