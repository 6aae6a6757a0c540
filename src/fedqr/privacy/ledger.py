"""Per-client privacy ledger: refuses any reply that would exceed the client's budget.

The ledger keeps the client's releases as counts of frozen dp-accounting events and
evaluates them as :func:`~fedqr.privacy.accounting.composed_event` with a fresh
accountant, exactly as :func:`~fedqr.privacy.calibrate.calibrate_noise_multiplier` does,
so a client calibrated for ``R`` replies is admitted exactly ``R`` replies.

Cost: spent epsilon is monotone in the counts of a fixed set of events (exactly for RDP and
pure DP; for PLD up to its pessimistic discretisation), so the ledger
remembers, for each event and counts of the other events, the largest count verified
within budget and the smallest verified over it. When an event is charged again under the
same counts of the others, it searches ahead (doubling, then bisection) for the largest
admissible count; later charges up to that count need no accountant call. Charging ``R``
replies one by one costs ``O(log R)`` evaluations instead of ``R``. Evaluated states are
also memoised across ledgers (clients with equal events and budgets share the work).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections import Counter
from collections.abc import Mapping
from typing import Any

import dp_accounting

from fedqr.privacy._checks import check_int, check_positive, check_unit_open, is_hashable
from fedqr.privacy._codec import (
    LEDGER_FORMAT,
    LEDGER_VERSION,
    check_ledger_header,
    decode_charges,
    encode_event,
    write_json_atomic,
)
from fedqr.privacy.accounting import (
    Accountant,
    _as_accountant,
    epsilon_spent,
    supports,
)

__all__ = ["BUDGET_RTOL", "PrivacyBudgetExceeded", "PrivacyLedger"]

BUDGET_RTOL = 1e-9
"""Relative slack on the eps budget, for floating-point rounding only: a spent eps of
``eps * (1 + 1e-12)`` (e.g. ``R * (eps / R)``) is admitted, anything above
``eps * (1 + BUDGET_RTOL)`` is refused."""

_LOOKAHEAD_MAX = 1 << 20  # largest count the look-ahead search verifies in advance
_CACHE_MAX = 1 << 14  # eps values of (counts, delta, accountant) states kept, shared

_State = frozenset[tuple[dp_accounting.DpEvent, int]]


class PrivacyBudgetExceeded(RuntimeError):
    """A reply would take a client's spent epsilon above its budget; nothing was recorded.

    Attributes
    ----------
    client_id, eps_budget, delta_budget
        The client and its budget.
    eps_after
        Epsilon the client would have spent (at ``delta_budget``) had the reply been sent.
    """

    def __init__(
        self, *, client_id: int, eps_budget: float, delta_budget: float, eps_after: float
    ) -> None:
        self.client_id = client_id
        self.eps_budget = eps_budget
        self.delta_budget = delta_budget
        self.eps_after = eps_after
        super().__init__(
            f"client {client_id}: reply refused, it would spend eps={eps_after:.6g} "
            f"> budget eps={eps_budget:.6g} (delta={delta_budget:.3g}); nothing was recorded"
        )

    def __reduce__(self) -> tuple[Any, ...]:  # keyword-only __init__: pickle via partial
        return functools.partial(
            PrivacyBudgetExceeded,
            client_id=self.client_id,
            eps_budget=self.eps_budget,
            delta_budget=self.delta_budget,
            eps_after=self.eps_after,
        ), ()


class PrivacyLedger:
    """Counts one client's DP releases and enforces its ``(eps, delta)`` budget.

    Parameters
    ----------
    eps
        Epsilon budget (``> 0``).
    delta
        Delta budget in ``(0, 1)`` for RDP/PLD; for ``Accountant.PURE`` any value in
        ``[0, 1)``, recorded but ignored (pure DP spends ``delta = 0``).
    accountant
        How releases are composed (see :class:`~fedqr.privacy.accounting.Accountant`).
    client_id
        For messages and serialisation (``>= 0``).
    """

    def __init__(
        self, *, eps: float, delta: float, accountant: Accountant, client_id: int = 0
    ) -> None:
        self._kind = _as_accountant(accountant)
        self._eps_budget = check_positive("eps", eps)
        pure = self._kind is Accountant.PURE
        self._delta_budget = check_unit_open("delta", delta, allow_zero=pure)
        self._delta = 0.0 if pure else self._delta_budget
        self._client_id = check_int("client_id", client_id, minimum=0)
        self._counts: Counter[dp_accounting.DpEvent] = Counter()
        self._max_ok: dict[tuple[dp_accounting.DpEvent, _State], int] = {}
        self._min_bad: dict[tuple[dp_accounting.DpEvent, _State], int] = {}
        self._spent: float | None = None  # eps of _counts, until the next charge

    # -- read-only state -------------------------------------------------------------
    @property
    def client_id(self) -> int:
        """The client this ledger belongs to."""
        return self._client_id

    @property
    def eps_budget(self) -> float:
        """Epsilon budget."""
        return self._eps_budget

    @property
    def delta_budget(self) -> float:
        """Delta budget as given (ignored by ``Accountant.PURE``)."""
        return self._delta_budget

    @property
    def accountant(self) -> Accountant:
        """Accountant kind used to compose the releases."""
        return self._kind

    @property
    def counts(self) -> dict[dp_accounting.DpEvent, int]:
        """Copy of the recorded counts, event -> number of replies."""
        return {e: c for e, c in self._counts.items() if c > 0}

    @property
    def replies(self) -> int:
        """Total number of recorded replies."""
        return sum(self._counts.values())

    def spent(self) -> tuple[float, float]:
        """``(eps, delta)`` spent so far; eps at the ledger's delta (``(eps, 0)`` for PURE)."""
        if self.replies == 0:
            return 0.0, 0.0
        if self._spent is None:  # an evaluation asks every ledger each time: once per charge
            self._spent = self._eps_of(self._counts)
        return self._spent, self._delta

    @property
    def remaining_eps(self) -> float:
        """``max(0, eps_budget - spent eps)``."""
        return max(0.0, self._eps_budget - self.spent()[0])

    @property
    def spendable_eps(self) -> float | None:
        """The eps a further release may still spend where budgets add up exactly (pure
        composition: :attr:`remaining_eps`, 0 within :data:`BUDGET_RTOL` of the budget, as
        0.7 + 0.6 of 1.3 leave 2.2e-16); ``None`` where they do not (RDP, PLD: what fits
        depends on the release, :meth:`would_exceed`)."""
        if self._kind is not Accountant.PURE:
            return None
        left = self.remaining_eps  # a float residue within BUDGET_RTOL is nothing left
        return 0.0 if left <= BUDGET_RTOL * self._eps_budget else left

    # -- charging ---------------------------------------------------------------------
    def would_exceed(self, event: dp_accounting.DpEvent, count: int = 1) -> bool:
        """Whether charging ``count`` more replies of ``event`` would exceed the budget."""
        self._check_event(event)
        count = check_int("count", count, minimum=0)
        return count > 0 and not self._admits(event, self._counts[event] + count)

    def charge(self, event: dp_accounting.DpEvent, count: int = 1) -> None:
        """Record ``count`` replies of ``event``, or raise without recording anything.

        Raises
        ------
        PrivacyBudgetExceeded
            If the spent epsilon would exceed ``eps_budget * (1 + BUDGET_RTOL)``.
        ValueError
            If ``event`` is not a DP event the ledger's accountant supports, or
            ``count < 0``.
        """
        self._check_event(event)
        count = check_int("count", count, minimum=0)
        if count == 0:
            return
        target = self._counts[event] + count
        if not self._admits(event, target):
            raise PrivacyBudgetExceeded(
                client_id=self._client_id,
                eps_budget=self._eps_budget,
                delta_budget=self._delta_budget,
                eps_after=self._eps_of(self._with(event, target)),
            )
        self._counts[event] = target
        self._spent = None

    # -- internals --------------------------------------------------------------------
    def _check_event(self, event: object) -> None:
        if not isinstance(event, dp_accounting.DpEvent) or not is_hashable(event):
            raise ValueError(f"event must be a hashable dp_accounting.DpEvent, got event={event!r}")
        if not supports(self._kind, event):
            raise ValueError(
                f"event must be supported by the {self._kind.value!r} accountant, "
                f"got event={event!r}"
            )

    def _with(self, event: dp_accounting.DpEvent, count: int) -> dict[dp_accounting.DpEvent, int]:
        counts = dict(self._counts)
        counts[event] = count
        return counts

    def _eps_of(self, counts: Mapping[dp_accounting.DpEvent, int]) -> float:
        state: _State = frozenset((e, c) for e, c in counts.items() if c > 0)
        return _state_eps(state, self._delta, self._kind)

    def _ok(self, event: dp_accounting.DpEvent, count: int) -> bool:
        return self._eps_of(self._with(event, count)) <= self._eps_budget * (1.0 + BUDGET_RTOL)

    def _admits(self, event: dp_accounting.DpEvent, target: int) -> bool:
        others: _State = frozenset((e, c) for e, c in self._counts.items() if e != event and c > 0)
        key = (event, others)
        known_ok = self._max_ok.get(key)
        if known_ok is not None and target <= known_ok:
            return True
        bad = self._min_bad.get(key)
        if bad is not None and target >= bad:
            return False
        if not self._ok(event, target):
            self._min_bad[key] = target
            return False
        if known_ok is None:  # first time under this state: no look-ahead yet
            self._max_ok[key] = target
            return True
        # Repeated charges: find the largest admissible count (doubling, then bisection).
        lo, hi, step = target, bad, target
        while hi is None and lo < _LOOKAHEAD_MAX:
            cand = min(lo + step, _LOOKAHEAD_MAX)
            if self._ok(event, cand):
                lo, step = cand, 2 * step
            else:
                hi = cand
        if hi is not None:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if self._ok(event, mid) else (lo, mid)
            self._min_bad[key] = hi
        self._max_ok[key] = lo
        return True

    # -- persistence ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable snapshot (budget, accountant and event counts)."""
        charges = [
            {"event": encode_event(e), "count": int(c)} for e, c in self._counts.items() if c > 0
        ]
        return {
            "format": LEDGER_FORMAT,
            "version": LEDGER_VERSION,
            "client_id": self._client_id,
            "eps": self._eps_budget,
            "delta": self._delta_budget,
            "accountant": self._kind.value,
            "charges": charges,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyLedger:
        """Rebuild a ledger from :meth:`to_dict` output.

        Raises
        ------
        ValueError
            If ``data`` is malformed, or its charges exceed its budget.
        """
        check_ledger_header(data)
        ledger = cls(
            eps=data["eps"],
            delta=data["delta"],
            accountant=data["accountant"],
            client_id=data["client_id"],
        )
        for event, count in decode_charges(data["charges"]):
            ledger._check_event(event)
            if count > 0:
                ledger._counts[event] += count
                ledger._spent = None
        eps = ledger.spent()[0]
        if not eps <= ledger.eps_budget * (1.0 + BUDGET_RTOL) or math.isnan(eps):
            raise ValueError(
                f"charges must fit the budget eps={ledger.eps_budget}, got spent eps={eps}"
            )
        return ledger

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_dict` as JSON atomically (temporary file, fsync, rename)."""
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PrivacyLedger:
        """Read a ledger written by :meth:`save`."""
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh))

    def __repr__(self) -> str:
        eps, delta = self.spent()
        return (
            f"PrivacyLedger(client_id={self._client_id}, accountant={self._kind.value!r}, "
            f"spent=({eps:.6g}, {delta:.3g}), budget=({self._eps_budget:.6g}, "
            f"{self._delta_budget:.3g}), replies={self.replies})"
        )


@functools.lru_cache(maxsize=_CACHE_MAX)
def _state_eps(state: _State, delta: float, kind: Accountant) -> float:
    """Spent eps of a counts state; shared by all ledgers (clients with equal events)."""
    return epsilon_spent(dict(state), delta=delta, accountant=kind)
