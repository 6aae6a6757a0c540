"""dp-accounting's accountant contract, ported for :class:`PureDpAccountant`.

The cases are those of dp-accounting's abstract ``privacy_accountant_test.PrivacyAccountantTest``
(the tests every accountant of the library passes): unsupported events nested three ways, no
events, a no-op event, and non-private events nested four ways.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from dp_accounting import dp_event, privacy_accountant

from fedqr.privacy import PureDpAccountant


class UnknownDpEvent(dp_event.DpEvent):  # type: ignore[misc]
    pass


_NESTS: list[Callable[[dp_event.DpEvent], dp_event.DpEvent]] = [
    lambda e: e,
    lambda e: dp_event.ComposedDpEvent([e]),
    lambda e: dp_event.SelfComposedDpEvent(e, 10),
]


@pytest.mark.parametrize("unsupported", [dp_event.UnsupportedDpEvent(), UnknownDpEvent()])
@pytest.mark.parametrize("nest", _NESTS)
def test_unsupported(unsupported: dp_event.DpEvent,
                     nest: Callable[[dp_event.DpEvent], dp_event.DpEvent]) -> None:
    acct = PureDpAccountant()
    event = nest(unsupported)
    err = acct._maybe_compose(event, count=1, do_compose=False)
    assert err is not None
    assert err.invalid_event == unsupported
    assert not acct.supports(event)
    with pytest.raises(privacy_accountant.UnsupportedEventError, match="caused by subevent"):
        acct.compose(event)


def _assert_zero(acct: PureDpAccountant) -> None:
    assert acct.get_epsilon(1e-12) == 0
    assert acct.get_epsilon(0) == 0
    assert acct.get_epsilon(1) == 0
    assert acct.get_delta(1e-12) == 0
    assert acct.get_delta(0) == 0
    assert acct.get_delta(math.inf) == 0


def test_no_events() -> None:
    _assert_zero(PureDpAccountant())


def test_no_op() -> None:
    acct = PureDpAccountant()
    assert acct.supports(dp_event.NoOpDpEvent())
    acct.compose(dp_event.NoOpDpEvent())
    _assert_zero(acct)


@pytest.mark.parametrize("event", [
    dp_event.NonPrivateDpEvent(),
    dp_event.ComposedDpEvent([dp_event.NonPrivateDpEvent()]),
    dp_event.ComposedDpEvent([dp_event.NoOpDpEvent(), dp_event.NonPrivateDpEvent()]),
    dp_event.SelfComposedDpEvent(dp_event.NonPrivateDpEvent(), 10),
])
def test_non_private(event: dp_event.DpEvent) -> None:
    acct = PureDpAccountant()
    assert acct.supports(event)
    acct.compose(event)
    assert acct.get_epsilon(0.99) == math.inf
    assert acct.get_epsilon(0) == math.inf
    assert acct.get_epsilon(1) == math.inf
    assert acct.get_delta(100) == 1
    assert acct.get_delta(0) == 1
    assert acct.get_delta(math.inf) == 1


def test_laplace_events_add_up_and_delta_is_zero_at_their_sum() -> None:
    acct = PureDpAccountant()
    acct.compose(dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(4.0), 3))
    assert acct.get_epsilon(0) == pytest.approx(0.75)
    assert acct.get_delta(0.75) == 0
    assert acct.get_delta(0.7) == 1
