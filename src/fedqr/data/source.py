"""A user's federated data as a data recipe: what :class:`~fedqr.data.DataSpec` is for the
built-in data sets (the planner, ``fedqr run`` and the public API take either)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedqr.data.federated import FederatedData
from fedqr.data.partition import PartitionKind
from fedqr.data.spec import ClientData, DataSpec

__all__ = ["DataSource", "OwnData"]


@dataclass(frozen=True, eq=False, kw_only=True)
class OwnData:
    """Federated data that came with their clients (a file, the user's arrays).

    Attributes
    ----------
    data:
        The rows, their clients and the test set.
    seed:
        Seed of everything the planner draws on them (proxy rows, twin noise).
    """

    data: FederatedData
    seed: int = 0

    dataset: None = None
    """No built-in data set: the presets of a user's data apply (``linear``, default clips)."""
    partition_kind: PartitionKind | None = None
    """The clients are given, not drawn."""

    @property
    def num_clients(self) -> int:
        """N."""
        return self.data.num_clients

    def build(self) -> ClientData:
        """The data as a data set and its partition."""
        return self.data.to_client_data()

    def identity(self) -> dict[str, Any]:
        """What the client data depend on (digest of the arrays, standardisation, seed)."""
        return {**self.data.identity(), "seed": self.seed}


DataSource = DataSpec | OwnData
"""Where a run's client data come from: a built-in recipe or a user's data."""
