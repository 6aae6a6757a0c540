"""Shared fixtures: where the real data live, and a fixed torch thread count."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)  # tests run under xdist on 2 cores: one thread per worker


def real_data_dir() -> Path | None:
    """``$FEDQR_DATA``, falling back to ``../shared/data`` beside the checkout."""
    env = os.environ.get("FEDQR_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[2] / "shared" / "data")
    for c in candidates:
        if (c / "mnist" / "train-images-idx3-ubyte.gz").is_file():
            return c
    return None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real-data folder; a hard failure in CI (FEDQR_REQUIRE_DATA=1) when missing."""
    found = real_data_dir()
    if found is None:
        msg = "real data not found: set FEDQR_DATA to the folder holding mnist/ and femnist/"
        if os.environ.get("FEDQR_REQUIRE_DATA") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return found


@pytest.fixture(scope="session")
def femnist_dir(data_dir: Path) -> Path:
    """The real FEMNIST folder (``femnist_leaf_writers.npz``); a hard failure in CI."""
    from fedqr.data.femnist import FEMNIST_NPZ

    folder = data_dir / "femnist"
    if not (folder / FEMNIST_NPZ).is_file():
        msg = f"real FEMNIST missing: {folder / FEMNIST_NPZ}"
        if os.environ.get("FEDQR_REQUIRE_DATA") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules holding a test marked ``slow`` first, each module's tests kept together and in
    order (module fixtures are built once): under ``-n 2 --dist worksteal`` the long tests
    start at once and the short ones fill in around them, so both workers end together
    instead of one finishing a long test alone at the end."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)  # stable
