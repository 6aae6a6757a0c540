"""Finding, verifying and downloading files, without the network."""

from __future__ import annotations

import hashlib
import io
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from fedqr.data import (
    ChecksumError,
    DataNotFoundError,
    load_mnist_arrays,
    mnist_search_dirs,
)
from fedqr.data._files import RemoteFile, file_md5, locate
from fedqr.data.mnist import TRAIN_IMAGES

FAKE = b"fake payload " * 100


def fake_remote(payload: bytes = FAKE, name: str = "fake-file.gz") -> RemoteFile:
    return RemoteFile(name, hashlib.md5(payload).hexdigest())


def _no_partials(folder: Path) -> None:
    assert not [p for p in folder.iterdir() if p.name.endswith(".part")]


def test_download_from_file_url(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    remote = fake_remote()
    (mirror / remote.filename).write_bytes(FAKE)
    cache = tmp_path / "cache" / "sub"
    path = locate(
        remote,
        search_dirs=[tmp_path / "nowhere"],
        download_enabled=True,
        mirrors=["file:///does/not/exist/", mirror.as_uri()],
        cache_dir=cache,
    )
    assert path == cache / remote.filename
    assert path.read_bytes() == FAKE
    assert sorted(p.name for p in cache.iterdir()) == [remote.filename]
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


class _FakeResponse(io.BytesIO):
    def __init__(self, payload: bytes, *, fail_after: int | None = None) -> None:
        super().__init__(payload)
        self.fail_after = fail_after

    def read(self, size: int | None = -1) -> bytes:
        if self.fail_after is None:
            return super().read(size)
        if self.tell() >= self.fail_after:
            raise TimeoutError("connection dropped")
        return super().read(self.fail_after - self.tell())


def _fake_urlopen(
    served: dict[str, bytes], seen: list[str], fail_after: int | None = None
) -> Callable[..., _FakeResponse]:
    def urlopen(request: urllib.request.Request, timeout: float = 0) -> _FakeResponse:
        url = request.full_url
        seen.append(url)
        if url not in served:
            raise urllib.error.URLError("offline")
        return _FakeResponse(served[url], fail_after=fail_after)

    return urlopen


def test_download_with_monkeypatched_urlopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = fake_remote()
    seen: list[str] = []
    served = {"https://b.example/x/" + remote.filename: FAKE}
    monkeypatch.setattr(urllib.request, "urlopen", _fake_urlopen(served, seen))
    path = locate(
        remote,
        search_dirs=[],
        download_enabled=True,
        mirrors=["https://a.example/", "https://b.example/x"],
        cache_dir=tmp_path,
    )
    assert seen == [
        "https://a.example/" + remote.filename,
        "https://b.example/x/" + remote.filename,
    ]
    assert path.read_bytes() == FAKE
    _no_partials(tmp_path)


def test_md5_mismatch_on_download_leaves_nothing(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    remote = fake_remote(b"the expected content")
    (mirror / remote.filename).write_bytes(b"tampered content")
    cache = tmp_path / "cache"
    with pytest.raises(DataNotFoundError) as info:
        locate(
            remote,
            search_dirs=[],
            download_enabled=True,
            mirrors=[mirror.as_uri()],
            cache_dir=cache,
        )
    assert "md5 mismatch" in str(info.value)
    assert remote.md5 in str(info.value)
    assert list(cache.iterdir()) == []


def test_interrupted_download_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = fake_remote()
    served = {"https://a.example/" + remote.filename: FAKE}
    monkeypatch.setattr(urllib.request, "urlopen", _fake_urlopen(served, [], fail_after=100))
    with pytest.raises(DataNotFoundError, match="connection dropped"):
        locate(
            remote,
            search_dirs=[],
            download_enabled=True,
            mirrors=["https://a.example/"],
            cache_dir=tmp_path,
        )
    assert list(tmp_path.iterdir()) == []


def test_offline_error_names_places_urls_and_fix(
    tmp_path: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_dir = tmp_path / "env-data"
    monkeypatch.setenv("FEDQR_DATA", str(env_dir))
    seen: list[str] = []
    monkeypatch.setattr(urllib.request, "urlopen", _fake_urlopen({}, seen))
    mirrors = ["https://m1.example/mnist/", "https://m2.example/mnist/"]
    explicit = tmp_path / "explicit"
    explicit.mkdir()  # an explicit folder that does not exist is an error of its own
    with pytest.raises(DataNotFoundError) as info:
        load_mnist_arrays(data_dir=explicit, download=True, mirrors=mirrors)
    assert isinstance(info.value, FileNotFoundError)
    msg = str(info.value)
    cache = isolated_env / "fedqr" / "mnist"
    for folder in (explicit, explicit / "mnist", env_dir / "mnist", env_dir, cache):
        assert str(folder / TRAIN_IMAGES.filename) in msg
    for m in mirrors:
        assert m + TRAIN_IMAGES.filename in msg
    assert "FEDQR_DATA" in msg
    assert str(cache) in msg
    assert seen == [m + TRAIN_IMAGES.filename for m in mirrors]


def test_download_disabled_message(isolated_env: Path) -> None:
    with pytest.raises(DataNotFoundError, match=r"download=False"):
        load_mnist_arrays(download=False, mirrors=["https://never.example/"])


def test_search_order(tmp_path: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDQR_DATA", str(tmp_path / "env"))
    assert mnist_search_dirs(data_dir=tmp_path / "d") == (
        tmp_path / "d",
        tmp_path / "d" / "mnist",
        tmp_path / "env" / "mnist",
        tmp_path / "env",
        isolated_env / "fedqr" / "mnist",
    )
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("FEDQR_DATA")
    assert mnist_search_dirs() == (Path.home() / ".cache" / "fedqr" / "mnist",)


def test_found_file_with_wrong_md5_is_an_error(tmp_path: Path, isolated_env: Path) -> None:
    bad = tmp_path / TRAIN_IMAGES.filename
    bad.write_bytes(b"not mnist")
    actual = hashlib.md5(b"not mnist").hexdigest()
    with pytest.raises(ChecksumError) as info:
        load_mnist_arrays(data_dir=tmp_path, download=False)
    msg = str(info.value)
    assert str(bad) in msg and TRAIN_IMAGES.md5 in msg and actual in msg


def test_md5_cached_per_path_size_mtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "f.bin"
    f.write_bytes(b"abc")
    assert file_md5(f) == hashlib.md5(b"abc").hexdigest()
    calls: list[str] = []
    real_md5 = hashlib.md5

    def counting_md5(*args: Any, **kwargs: Any) -> Any:
        calls.append("md5")
        return real_md5(*args, **kwargs)

    monkeypatch.setattr(hashlib, "md5", counting_md5)  # _files looks up hashlib.md5 per call
    assert file_md5(f) == real_md5(b"abc").hexdigest()
    assert calls == []  # served from the cache
    f.write_bytes(b"abcd")  # new size (and mtime): recomputed
    os.utime(f, ns=(1, 1))
    assert file_md5(f) == real_md5(b"abcd").hexdigest()
    assert calls == ["md5"]


def test_first_folder_wins(
    tmp_path: Path, idx_gz_bytes: Callable[[NDArray[np.uint8]], bytes]
) -> None:
    payload = idx_gz_bytes(np.zeros((2, 28, 28), dtype=np.uint8))
    remote = fake_remote(payload, name="a.gz")
    first, second = tmp_path / "first", tmp_path / "second"
    for d in (first, second):
        d.mkdir()
        (d / "a.gz").write_bytes(payload)
    path = locate(
        remote, search_dirs=[first, second], download_enabled=False, mirrors=[], cache_dir=second
    )
    assert path == first / "a.gz"
