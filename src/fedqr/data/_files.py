"""Finding, verifying and downloading data files.

A file is looked for in a list of folders; a found file must match its md5 (the
digest is computed once per process per ``(path, size, mtime)``). A missing file
is downloaded from a list of mirrors into a cache folder, written atomically
(:func:`fedqr._atomic.write_file_atomic`), and kept only when
its md5 matches.
"""

from __future__ import annotations

import hashlib
import os
import threading
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fedqr._atomic import write_file_atomic

#: Seconds to wait for a mirror before giving up on it.
DOWNLOAD_TIMEOUT_S = 30.0
_CHUNK = 1 << 20
_USER_AGENT = "fedqr-data/0.1 (+python urllib)"


class DataNotFoundError(FileNotFoundError):
    """A data file is neither on disk nor downloadable; the message says how to fix it."""


class ChecksumError(ValueError):
    """A data file on disk does not match its expected md5 digest."""


@dataclass(frozen=True)
class RemoteFile:
    """A data file known by name and md5 digest.

    Attributes
    ----------
    filename : str
        File name, both on disk and at the end of each mirror URL.
    md5 : str
        Expected md5 hex digest (lower case).
    """

    filename: str
    md5: str


_md5_cache: dict[tuple[str, int, int], str] = {}
_md5_lock = threading.Lock()


def file_md5(path: Path) -> str:
    """Return the md5 hex digest of ``path``, cached per ``(path, size, mtime)``.

    Parameters
    ----------
    path : Path
        File to hash.

    Returns
    -------
    str
        Lower-case hex digest.
    """
    resolved = path.resolve()
    st = resolved.stat()
    key = (str(resolved), st.st_size, st.st_mtime_ns)
    with _md5_lock:
        cached = _md5_cache.get(key)
    if cached is not None:
        return cached
    digest = hashlib.md5(usedforsecurity=False)
    with resolved.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    hexdigest = digest.hexdigest()
    with _md5_lock:
        _md5_cache[key] = hexdigest
    return hexdigest


def clear_md5_cache() -> None:
    """Forget every cached digest (the next verification re-reads the files)."""
    with _md5_lock:
        _md5_cache.clear()


def verify_md5(path: Path, expected: str) -> None:
    """Raise :class:`ChecksumError` unless ``path`` has md5 digest ``expected``."""
    actual = file_md5(path)
    if actual != expected.lower():
        raise ChecksumError(
            f"md5 mismatch for {path}: expected {expected.lower()}, got {actual}. "
            "The file is corrupt or not the canonical one: delete it and load again (a "
            "missing file is downloaded where a mirror is reachable) or replace it with a "
            "good copy."
        )


def check_data_dir(data_dir: Path | str | None) -> None:
    """``ValueError`` when an explicit ``data_dir`` does not exist (no silent fallback to
    ``$FEDQR_DATA`` or the cache)."""
    if data_dir is not None and not Path(data_dir).expanduser().exists():
        raise ValueError(f"data_dir must be an existing folder or file, got "
                         f"data_dir={str(data_dir)!r} (no such file or folder)")


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/fedqr`` when that variable is set, else ``~/.cache/fedqr``."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "fedqr"


def unique_dirs(dirs: Iterable[Path]) -> tuple[Path, ...]:
    """Drop repeated folders (compared after ``expanduser``), keeping the first order."""
    seen: set[Path] = set()
    out: list[Path] = []
    for d in dirs:
        p = Path(d).expanduser()
        if p not in seen:
            seen.add(p)
            out.append(p)
    return tuple(out)


def _download_one(url: str, dest: Path, expected_md5: str, timeout: float) -> None:
    """Fetch ``url`` into ``dest`` atomically; nothing is left behind on failure."""

    def fetch(tmp: Path) -> None:
        digest = hashlib.md5(usedforsecurity=False)
        request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
        with tmp.open("wb") as out, urllib.request.urlopen(request, timeout=timeout) as resp:
            while chunk := resp.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
        actual = digest.hexdigest()
        if actual != expected_md5.lower():
            raise ChecksumError(f"md5 mismatch: expected {expected_md5.lower()}, got {actual}")

    write_file_atomic(dest, fetch)


def download(
    remote: RemoteFile, *, mirrors: Sequence[str], dest_dir: Path, timeout: float
) -> tuple[Path | None, list[str]]:
    """Try each mirror in turn until one serves ``remote`` with the right md5.

    Parameters
    ----------
    remote : RemoteFile
        The file to fetch.
    mirrors : sequence of str
        Base URLs; the file's URL is ``mirror.rstrip("/") + "/" + remote.filename``.
    dest_dir : Path
        Folder to write into (created if missing).
    timeout : float
        Seconds to wait for each mirror.

    Returns
    -------
    path : Path or None
        The written file, or ``None`` when every mirror failed.
    attempts : list of str
        One line per URL tried, with the reason it failed.
    """
    attempts: list[str] = []
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        attempts.append(f"(cannot create cache folder {dest_dir}: {exc})")
        return None, attempts
    dest = dest_dir / remote.filename
    for mirror in mirrors:
        url = mirror.rstrip("/") + "/" + remote.filename
        try:
            _download_one(url, dest, remote.md5, timeout)
        except (OSError, ValueError) as exc:  # URLError, HTTPError, timeouts are OSErrors
            attempts.append(f"{url}: {type(exc).__name__}: {exc}")
            continue
        return dest, attempts
    return None, attempts


def locate(
    remote: RemoteFile,
    *,
    search_dirs: Sequence[Path],
    download_enabled: bool,
    mirrors: Sequence[str],
    cache_dir: Path,
    timeout: float = DOWNLOAD_TIMEOUT_S,
    hint: str = "",
) -> Path:
    """Find ``remote`` in ``search_dirs`` (md5-verified), else download it into ``cache_dir``.

    Parameters
    ----------
    remote : RemoteFile
        The file to find.
    search_dirs : sequence of Path
        Folders searched in order; the first one holding the file wins.
    download_enabled : bool
        Whether to try the mirrors when the file is nowhere on disk.
    mirrors : sequence of str
        Base URLs to download from.
    cache_dir : Path
        Folder a download is written into (searched last, after ``search_dirs``).
    timeout : float, optional
        Seconds to wait for each mirror.
    hint : str, optional
        How to fix a missing file; a generic hint is used when empty.

    Returns
    -------
    Path
        A file whose md5 matches ``remote.md5``.

    Raises
    ------
    ChecksumError
        If a file found on disk has the wrong md5.
    DataNotFoundError
        If the file is nowhere on disk and could not be downloaded.
    """
    places = unique_dirs([*search_dirs, cache_dir])
    for folder in places:
        candidate = folder / remote.filename
        if candidate.is_file():
            verify_md5(candidate, remote.md5)
            return candidate
    attempts: list[str] = []
    if download_enabled:
        path, attempts = download(remote, mirrors=mirrors, dest_dir=cache_dir, timeout=timeout)
        if path is not None:
            return path
    raise DataNotFoundError(
        _not_found_message(remote, places, attempts, download_enabled=download_enabled, hint=hint)
    )


def _not_found_message(
    remote: RemoteFile,
    places: Sequence[Path],
    attempts: Sequence[str],
    *,
    download_enabled: bool,
    hint: str,
) -> str:
    lines = [f"data file {remote.filename!r} (md5 {remote.md5}) not found.", "Searched:"]
    lines += [f"  - {p / remote.filename}" for p in places]
    if download_enabled:
        lines.append("Download failed from every mirror:")
        lines += [f"  - {a}" for a in attempts] or ["  - (no mirrors given)"]
    else:
        lines.append("Download was not attempted (download=False).")
    hint = hint or (
        f"To fix: pass data_dir=... pointing at a folder holding {remote.filename}, "
        f"or copy the file into {places[-1]}/"
    )
    retry = "when the mirrors are reachable" if download_enabled else "with download=True"
    lines.append(f"{hint}; or retry {retry}.")
    return "\n".join(lines)
