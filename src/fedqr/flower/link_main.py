"""A fedqr SuperLink process: Flower's own SuperLink with a configurable node expiry.

Flower 1.41's SuperLink declares a SuperNode gone when it has sent no heartbeat for
``HEARTBEAT_PATIENCE`` (2) times the interval the node itself announced (30 s by default, so
about 60 s; fedqr's SuperNodes announce ``--heartbeat``, 10 s by default, so 20 s). Until
then a round waits for the dead node's reply. Here the server caps that time: with
``FEDQR_FLOWER_NODE_TIMEOUT_S=S`` a node is gone S seconds after its last heartbeat, whatever
interval it announced (the interval the link state records for the node is capped at
S / 2; nothing else of Flower changes). Messages to a node that is gone get Flower's
``NODE_UNAVAILABLE`` error reply at once, so the ServerApp counts the reply as lost and the
round goes on; a node that comes back (its next heartbeat) is online again.

S must exceed the time between two heartbeats of the SuperNodes (Flower sends one every
0.8 (H - 5) s, about 4 s at H = 10 s): a shorter S makes live nodes flicker offline.

Run as ``python -m fedqr.flower.link_main <flower-superlink arguments>``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

NODE_TIMEOUT_ENV = "FEDQR_FLOWER_NODE_TIMEOUT_S"
MIN_NODE_TIMEOUT_S = 5.0
MAX_NODE_TIMEOUT_S = 3600.0


def check_node_timeout(name: str, value: float | None) -> float | None:
    """``value`` if it is ``None`` or in [5, 3600] s.

    Raises
    ------
    ValueError
        Naming ``name``, the range and the value.
    """
    if value is not None and not MIN_NODE_TIMEOUT_S <= value <= MAX_NODE_TIMEOUT_S:
        raise ValueError(f"{name} must be in [{MIN_NODE_TIMEOUT_S:g}, {MAX_NODE_TIMEOUT_S:g}] "
                         f"s, got {name}={value}")
    return value


def _capped(original: Callable[..., bool], cap: float) -> Callable[..., bool]:
    def method(self: Any, node_id: int, heartbeat_interval: float) -> bool:
        return original(self, node_id, min(float(heartbeat_interval), cap))
    method.__doc__ = original.__doc__
    return method


def cap_node_expiry(timeout_s: float) -> None:
    """Make the SuperLink's link states declare a node gone ``timeout_s`` s after its last
    heartbeat (or sooner, where the node announced a shorter interval)."""
    from flwr.common.constant import HEARTBEAT_PATIENCE
    from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
    from flwr.server.superlink.linkstate.sql_linkstate import SqlLinkState

    cap = timeout_s / HEARTBEAT_PATIENCE
    for cls in (InMemoryLinkState, SqlLinkState):
        for name in ("activate_node", "acknowledge_node_heartbeat"):
            setattr(cls, name, _capped(getattr(cls, name), cap))


def main(argv: list[str] | None = None) -> None:
    """Cap the node expiry (``FEDQR_FLOWER_NODE_TIMEOUT_S``), then run Flower's SuperLink."""
    args = list(sys.argv[1:] if argv is None else argv)
    text = os.environ.get(NODE_TIMEOUT_ENV, "")
    if text:
        try:
            timeout = check_node_timeout(NODE_TIMEOUT_ENV, float(text))
        except ValueError as e:
            raise SystemExit(str(e)) from None
        if timeout is not None:
            cap_node_expiry(timeout)
    from flwr.superlink.cli import flower_superlink

    sys.argv = ["flower-superlink", *args]
    flower_superlink()


if __name__ == "__main__":
    main()
