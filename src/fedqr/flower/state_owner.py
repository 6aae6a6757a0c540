"""Whose rows a SuperNode's state folder (its ledger) belongs to.

A ledger counts the replies made from one client's rows. A state folder restarted with
another client's data file would charge that client's replies to the first one's budget (and
leave the second one's ledger untouched, so its rows could be spent beyond its own eps). The
first start of a node writes whose rows it serves into ``<state-dir>/owner.json``: the
file's client id where its rows name one, else the file's SHA-256; later starts must serve the
same client (:func:`bind_state`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from fedqr._atomic import write_json_atomic

__all__ = ["OWNER_FILE", "bind_state", "data_owner"]

OWNER_FILE = "owner.json"


def data_owner(data: Path, *, client: str | None) -> str:
    """``client <id>`` where the file's rows name their client, else ``sha256 <digest>``."""
    if client is not None:
        return f"client {client}"
    digest = hashlib.sha256()
    with open(data, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return f"sha256 {digest.hexdigest()}"


def bind_state(state_dir: Path, *, data: Path, owner: str) -> None:
    """Record ``owner`` as the state folder's client on first use; ``ValueError`` (naming
    --state-dir and --data) when the folder already belongs to another client's rows."""
    path = state_dir / OWNER_FILE
    if not path.is_file():
        write_json_atomic(path, {"owner": owner, "data": str(data.resolve())})
        return
    try:
        known = json.loads(path.read_text())
        had, was = str(known["owner"]), str(known.get("data", "?"))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"--state-dir: {path} cannot be read ({e}); it records whose rows the "
                         "folder's ledger counts") from None
    if had != owner:
        raise ValueError(f"--state-dir {state_dir} holds the ledger of {had} ({was}), but --data "
                         f"{data} holds the rows of {owner}: a ledger counts one client's "
                         "replies (another client's would be charged to its budget); give this "
                         "client its own --state-dir, or this folder's own --data (the same "
                         f"client's rows, updated, in a file without a client column: remove "
                         f"{path} to rebind it)")
