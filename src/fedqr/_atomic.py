"""The one atomic writer of fedqr: write a temporary file, fsync it, rename, fsync the folder.

Every file fedqr writes (result documents, ledgers, caches, figures, data downloads) goes
through :func:`write_file_atomic` (or its JSON and bytes forms), so a crash at any point
leaves either the old file or the new one, never a partial one. The temporary file lies in
the destination's own folder (a rename never crosses a file system) and gets the mode a plain
``open()`` would give (``0o666`` less the user's umask), not ``mkstemp``'s ``0o600``.

:func:`staged_dir` stages several files *inside* the output folder and moves them in only
when all are written, so an output folder that is a mount point works too.

This module imports nothing from fedqr: every layer may use it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "DamagedFileError",
    "check_writable_dir",
    "check_writable_file",
    "fsync_dir",
    "move_into",
    "read_json",
    "staged_dir",
    "write_bytes_atomic",
    "write_file_atomic",
    "write_json_atomic",
]


class DamagedFileError(ValueError):
    """A file fedqr wrote earlier cannot be read back (truncated, not UTF-8, wrong shape)."""


def _umask() -> int:
    """The process umask, read without changing it where the platform allows."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """fsync ``folder`` so that a rename into it survives a crash (no-op where unsupported)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomic(path: str | os.PathLike[str], write: Callable[[Path], object]) -> None:
    """Call ``write(tmp)`` on a temporary path beside ``path``, then move it to ``path``.

    The temporary file keeps ``path``'s suffix (matplotlib and NumPy choose a format by it),
    is fsynced, renamed over ``path`` and the folder fsynced. On any failure the temporary
    file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the real suffix last: np.save, np.savez and savefig go by it (np.save would append .npy)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                    suffix=path.suffix or ".tmp")
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        os.close(fd)
        fd = -1
        write(tmp)
        rd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(rd)
        finally:
            os.close(rd)
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`write_file_atomic`)."""
    write_file_atomic(path, lambda p: p.write_bytes(data))


def write_json_atomic(path: str | os.PathLike[str], doc: Any, *, indent: int = 1) -> None:
    """Write ``doc`` as strict JSON (no NaN or infinity) to ``path`` atomically."""
    text = json.dumps(doc, indent=indent, allow_nan=False)
    write_bytes_atomic(path, text.encode("utf-8"))


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON document in ``path``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    DamagedFileError
        If it is not UTF-8 or not valid JSON; the message names the file.
    """
    path = Path(path)
    data = path.read_bytes()
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise DamagedFileError(f"{path} is damaged: not UTF-8 text ({e.reason} at byte "
                               f"{e.start})") from None
    except json.JSONDecodeError as e:
        raise DamagedFileError(f"{path} is damaged: not valid JSON ({e.msg} at line "
                               f"{e.lineno} column {e.colno})") from None


def move_into(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``; across file systems (``EXDEV``), copy then rename."""
    try:
        os.replace(src, dst)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        write_file_atomic(dst, lambda p: shutil.copyfile(src, p))
        src.unlink()


@contextlib.contextmanager
def staged_dir(out_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """A staging folder *inside* ``out_dir``; its files move into ``out_dir`` on success.

    Staging inside the output folder keeps every rename on one file system (``out_dir`` may
    be a mount point). On failure nothing is moved, the staging folder is removed, and so is
    ``out_dir`` if this call created it and it is still empty.
    """
    out = Path(out_dir)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    _remove_stale_stages(out)
    stage = Path(tempfile.mkdtemp(dir=out, prefix=f".stage-{os.getpid()}-"))
    ok = False
    try:
        yield stage
        files = sorted(stage.iterdir())
        taken = [out / f.name for f in files
                 if (out / f.name).exists() and not (out / f.name).is_file()]
        if taken:  # checked before anything moves: all the files, or none
            raise ValueError(f"cannot write {', '.join(str(t) for t in taken)}: a folder (or "
                             f"other non-file) of that name is in the way; move it or choose "
                             f"another output folder")
        for f in files:
            move_into(f, out / f.name)
        fsync_dir(out)
        ok = True
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if created and not ok:
            with contextlib.suppress(OSError):
                out.rmdir()


def _remove_stale_stages(out: Path) -> None:
    """Remove staging folders left in ``out`` by processes that no longer exist (killed)."""
    for stage in out.glob(".stage-*-*"):
        pid = stage.name.split("-")[1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stage, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def _existing_ancestor(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _probe(name: str, path: Path, folder: Path) -> None:
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".fedqr-probe-")
    except OSError as e:
        raise ValueError(f"{name} must be a writable location, got {name}={str(path)!r} "
                         f"(cannot create files in {str(folder)!r}: "
                         f"{e.strerror or e})") from None
    os.close(fd)
    os.unlink(tmp)


def check_writable_dir(name: str, path: str | os.PathLike[str]) -> None:
    """``ValueError`` (naming option ``name``) unless ``path`` is or can become a writable
    folder: checked before any work, creating nothing."""
    p = Path(path)
    base = _existing_ancestor(p)
    if not base.is_dir():
        what = "is a file" if base == p.absolute() else f"is under the file {str(base)!r}"
        raise ValueError(f"{name} must be a folder path, got {name}={str(p)!r} ({what})")
    _probe(name, p, base)


def check_writable_file(name: str, path: str | os.PathLike[str]) -> None:
    """``ValueError`` (naming option ``name``) unless ``path`` can be written as a file."""
    p, text = Path(path), os.fspath(path)
    if p.is_dir():
        raise ValueError(f"{name} must be a file path, got {name}={str(p)!r} (a folder)")
    if text.endswith(tuple(sep for sep in (os.sep, os.altsep) if sep)):
        raise ValueError(f"{name} must be a file path, got {name}={text!r} (a folder's: it "
                         f"ends with {text[-1]!r})")
    base = _existing_ancestor(p.parent)
    if not base.is_dir():
        raise ValueError(f"{name} must be a file path in a folder, got {name}={str(p)!r} "
                         f"({str(base)!r} is a file)")
    _probe(name, p, base)
