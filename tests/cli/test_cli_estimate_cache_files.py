"""A cached estimate of a built-in data set is not served for other files of it (FEMNIST,
whose files are not checked against canonical digests)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import fedqr.cli.constants as constants
from fedqr.cli.estimate import estimate_spec
from fedqr.data import DatasetName
from fedqr.privacy import Mechanism


def test_an_estimate_of_rewritten_femnist_files_is_computed_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    computed: list[int] = []

    def fake_document(est: Any, spec: Any, **_: Any) -> dict[str, Any]:
        computed.append(1)
        return {"N": 10, "computed": len(computed)}

    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(constants, "_workload", lambda spec, data_dir: (_Data(), _Kernel()))
    monkeypatch.setattr(constants, "estimate_constants", lambda **_: None)
    monkeypatch.setattr(constants, "estimate_document", fake_document)
    monkeypatch.setattr(constants, "_cached",  # the stub's document is no estimate's
                        lambda path: json.loads(path.read_text()) if path.exists() else None)
    folder = tmp_path / "femnist"
    folder.mkdir()
    npz = folder / "femnist_leaf_writers.npz"
    npz.write_bytes(b"one")
    spec = estimate_spec(DatasetName.FEMNIST, None, 10, 0.5, Mechanism.LAPLACE, 20.0, None,
                         0.01, 0.05, 0)

    def estimate() -> int:
        doc = constants.estimate_for(spec, data_dir=folder, eps=1.0, delta=0.0,
                                     use_cache=True)
        return int(doc["computed"])

    assert estimate() == 1 and estimate() == 1  # the second from the cache
    st = npz.stat()
    npz.write_bytes(b"two")
    os.utime(npz, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert estimate() == 2


class _Data:
    dataset = partition = None


class _Kernel:
    def describe(self) -> dict[str, object]:
        return {"name": "logreg"}
