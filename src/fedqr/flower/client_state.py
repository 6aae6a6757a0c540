"""A client's privacy state on its own disk: its ledger, its calibration, the rounds it answered.

One JSON file, ``<state_dir>/state.json``, replaced atomically (temporary file, fsync,
rename, fsync of the folder) and only under an exclusive lock of ``<state_dir>/lock``, so a
client killed at any instant leaves either the old or the new file, never a torn one, and
two processes of one client never interleave their charges.

The ledger is charged and the file written *before* the reply leaves the client, so a
restarted client continues from every reply it may have released. A round is charged once:
the file records, per Flower run, the digest of the model each round was answered for; the
same request again (a resent message) gets the same reply without a new charge (the reply is
a deterministic function of model, data and the per-reply seed, so nothing new is released),
a different model for an answered round is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedqr.privacy import Accountant, PrivacyLedger
from fedqr.privacy._codec import write_json_atomic

STATE_FORMAT = "fedqr.flower.client-state"
STATE_VERSION = 1


class ReplayRefused(RuntimeError):
    """A round this client already answered was asked again with a different model."""


@dataclass(frozen=True, kw_only=True)
class Budget:
    """The budget a run asks of a client: the ledger on disk must have the same."""

    client_id: int
    eps: float
    delta: float
    accountant: str


@dataclass(kw_only=True)
class ClientState:
    """The decoded ``state.json`` (mutable while the lock is held)."""

    ledger: PrivacyLedger
    calibration: dict[str, list[float]] = field(default_factory=dict)
    answered: dict[str, dict[str, str]] = field(default_factory=dict)  # run -> round -> digest

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return {"format": STATE_FORMAT, "version": STATE_VERSION,
                "ledger": self.ledger.to_dict(), "calibration": self.calibration,
                "answered": self.answered}


def state_path(state_dir: Path) -> Path:
    """Where a client keeps its state."""
    return state_dir / "state.json"


def _decode(doc: object, path: Path) -> ClientState:
    if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
        raise ValueError(f"state file must have format={STATE_FORMAT!r}, got {path}")
    if doc.get("version") != STATE_VERSION:
        raise ValueError(f"state file version must be {STATE_VERSION}, "
                         f"got version={doc.get('version')!r} in {path}")
    calibration, answered = doc.get("calibration", {}), doc.get("answered", {})
    if not isinstance(calibration, dict) or not isinstance(answered, dict):
        raise ValueError(f"state file must hold objects 'calibration' and 'answered': {path}")
    return ClientState(ledger=PrivacyLedger.from_dict(doc["ledger"]), calibration=calibration,
                       answered=answered)


def read_state(state_dir: Path) -> ClientState | None:
    """The client's state, ``None`` when it has none yet (read without the lock)."""
    path = state_path(state_dir)
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as fh:
        return _decode(json.load(fh), path)


def _write_atomic(path: Path, doc: object) -> None:
    write_json_atomic(path, doc)  # temp file, fsync, rename, fsync of the folder


@contextlib.contextmanager
def locked_state(state_dir: Path, *,
                 budget: Budget) -> Iterator[tuple[ClientState, Any]]:
    """Hold the client's lock; yield its state and a ``save()`` that persists it atomically.

    A client without a state file starts with an empty ledger of ``budget``.

    Raises
    ------
    ValueError
        If the ledger on disk belongs to another client or has another budget.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / "lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            state = read_state(state_dir)
            if state is None:
                state = ClientState(ledger=PrivacyLedger(
                    eps=budget.eps, delta=budget.delta, accountant=Accountant(budget.accountant),
                    client_id=budget.client_id))
            _check_budget(state.ledger, budget, state_path(state_dir))
            path = state_path(state_dir)
            yield state, lambda: _write_atomic(path, state.to_dict())
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _check_budget(ledger: PrivacyLedger, budget: Budget, path: Path) -> None:
    have = (ledger.client_id, ledger.eps_budget, ledger.delta_budget, ledger.accountant.value)
    want = (budget.client_id, budget.eps, budget.delta, budget.accountant)
    if have[:3] == want[:3] and have[3] != want[3]:
        raise ValueError(
            f"the ledger in {path} composes its releases with the {have[3]!r} accountant, "
            f"this run's mechanism is accounted by {want[3]!r}: one ledger cannot compose "
            f"both, so this node joins only runs accounted as its ledger is (a fresh state-dir "
            f"for the same rows would forget what they spent: never do that)")
    if have != want:
        raise ValueError(
            f"the ledger in {path} is (client, eps, delta, accountant)={have}, this run asks "
            f"{want}: a ledger keeps its client and budget for life (a fresh state-dir would "
            f"forget what it spent); start this node with the client and budget of its "
            f"ledger, or give a new client a state-dir of its own")
