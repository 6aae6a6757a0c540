"""How much memory is available, and refusing a data file that would not fit."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DataTooLargeError", "available_memory", "check_memory"]


class DataTooLargeError(ValueError):
    """A data file needs more memory than half of what is available."""


_MEMINFO = Path("/proc/meminfo")
_CGROUP = Path("/sys/fs/cgroup")


def _system_memory() -> int | None:
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return None


def _cgroup_memory() -> int | None:
    """Room left under this process's cgroup (v2) memory limit, if there is one."""
    try:
        limit = (_CGROUP / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((_CGROUP / "memory.current").read_text()))
    except (OSError, ValueError):
        return None


def available_memory() -> int | None:
    """Bytes of memory available now, or ``None`` when unknown.

    The system's ``MemAvailable`` (else its free pages), or the room left under a cgroup
    memory limit when that is smaller.
    """
    known = [m for m in (_system_memory(), _cgroup_memory()) if m is not None]
    return min(known) if known else None


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB ({nbytes} bytes)"


def check_memory(source: str, nbytes: int) -> None:
    """:class:`DataTooLargeError` when ``nbytes`` exceed half of the available memory."""
    avail = available_memory()
    if avail is not None and nbytes > avail // 2:
        raise DataTooLargeError(
            f"{source} is too large to load: it needs about {_gib(nbytes)} of memory, more "
            f"than half of the {_gib(avail)} available; use a smaller file or a machine "
            f"with more memory")
