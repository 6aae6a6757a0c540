"""The server's check before round 0: does the run fit every client's ledger?

A client's ledger refuses any reply beyond its budget, and refuses a run whose whole schedule
does not fit what earlier runs left at that run's first reply (charging nothing). Asked only
then, a client of round 1 that cannot join would stop the run after the clients of round 0
were charged for it. So before any model is sent, the server asks every client (a ``query``
message with a ``check`` record: the run's settings are the run config every node reads)
whether the run fits; a refusal stops the run with the client's message and nobody is
charged. A client that does not answer within ``round-timeout`` is not waited for: its own
check at its first reply still holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from fedqr.flower.client_app import FAILED, REFUSED
from fedqr.flower.server_logic import FlowerRunError

log = logging.getLogger("flwr")
Puller = Callable[[Grid, list[str], float], dict[str, Message]]


def check_clients(grid: Grid, *, node_of: dict[int, int], model: ConfigRecord | None,
                  timeout: float, pull: Puller) -> dict[int, float]:
    """Ask clients ``node_of`` (client -> node) whether the run fits their ledgers.

    ``pull(grid, ids, timeout)`` collects replies (the server's poll loop). Returns the eps
    each answering client's ledger spent before the run (its earlier runs), so that the
    run's per-round record counts them for every client from round 0 on.

    Raises
    ------
    FlowerRunError
        If a client refuses (its ledger cannot take the run) or fails (its data or settings).
    """
    extra = {"model": model} if model is not None else {}
    clients = sorted(node_of)
    msgs = [Message(RecordDict({"check": ConfigRecord({"client-id": c}), **extra}),
                    dst_node_id=node_of[c], message_type=MessageType.QUERY) for c in clients]
    ids = list(grid.push_messages(msgs))
    replies = pull(grid, ids, timeout)
    spent: dict[int, float] = {}
    for c, mid in zip(clients, ids, strict=True):
        reply = replies.get(mid)
        if reply is None:
            log.info("fedqr: client %d did not answer the check within %.0f s; its first "
                     "reply checks its ledger", c, timeout)
            continue
        if reply.has_error():
            if reply.error.code == REFUSED:
                raise FlowerRunError(f"client {c} refused the run before round 0 (nobody was "
                                     f"charged): {reply.error.reason}")
            if reply.error.code == FAILED:
                raise FlowerRunError(f"client {c} failed the check before round 0: "
                                     f"{reply.error.reason}")
            continue  # Flower's own error (the node is gone)
        value = reply.content.config_records["check"].get("epsilon-spent")
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            spent[c] = float(value)
    return spent
