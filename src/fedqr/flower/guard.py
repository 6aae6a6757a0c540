"""A process-group guard: runs one command and takes its whole process group down with it.

``python -m fedqr.flower.guard CMD ARGS...`` runs ``CMD`` in the guard's own process group
(the caller starts the guard in a new session), and kills them all, descendants included
(only its descendants where the guard does not lead its group: :func:`members`).
Flower's SuperLink starts a SuperExec, which
starts a ServerApp process; neither gets a parent-death signal from Flower, so a SuperLink
killed with SIGKILL would leave them running. The guard kills (SIGKILL) every descendant
and every other process of its group when

- it gets SIGTERM, SIGINT or SIGHUP (also the parent-death signal its starter sets),
- its own parent is gone (polled every 0.2 s: the fallback where no parent-death signal
  exists; off with ``FEDQR_GUARD_WATCH_PARENT=0``, as ``fedqr flower superlink`` runs it, so
  that a server outlives the shell that started it), or
- ``CMD`` exits (then with ``CMD``'s exit status).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType

POLL_S = 0.2


def members() -> list[int]:
    """Live descendants of this process and, where it leads its process group, the other
    processes of that group.

    Descendants count even in sessions of their own (Flower starts its SuperExec with a new
    session, and the SuperExec its app processes). A guard that does not lead its group (a
    ``fedqr flower superlink`` started with ``&`` by a shell script, which has no job
    control: the script and its other jobs share one group) takes only its descendants: the
    group's other processes are the script and its other jobs, not the guard's; it killed
    them, the script included.
    """
    me, pgid = os.getpid(), os.getpgid(0)
    own_group = pgid == me
    children: dict[int, list[int]] = {}
    group = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        if own_group and int(fields[2]) == pgid:
            group.add(int(entry))
    found, todo = set(), [me]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return sorted(found | group)


def kill_group() -> None:
    """SIGKILL every descendant of this process and every other process of its group."""
    for pid in members():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main(argv: list[str] | None = None) -> int:
    """Run ``argv`` under the guard; returns its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m fedqr.flower.guard CMD [ARGS...]", file=sys.stderr)
        return 2
    parent = os.getppid()
    watch_parent = os.environ.get("FEDQR_GUARD_WATCH_PARENT", "1") != "0"

    def stop(signum: int, frame: FrameType | None) -> None:
        kill_group()
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    child = subprocess.Popen(args)
    while True:
        try:
            code = child.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            if watch_parent and os.getppid() != parent:  # the starter is gone
                stop(signal.SIGTERM, None)
            continue
        kill_group()
        return code


if __name__ == "__main__":
    sys.exit(main())
