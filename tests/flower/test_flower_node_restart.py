"""A SuperNode restarted right after it died: its activation waits out the SuperLink's
view of the previous process (Flower refuses to activate a node it still counts as online,
and the SuperNode exited at once with "Failed to activate SuperNode")."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from fedqr.flower.node_main import ACTIVATION_FAILED, patient_activation


def _refusal(code: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "https://link/flwr.proto.Fleet/ActivateNode")
    body = json.dumps({"code": code, "detail": "Failed to activate SuperNode."})
    response = httpx.Response(400, text=body, request=request)
    return httpx.HTTPStatusError("refused", request=request, response=response)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _activation(fails: int, code: int = ACTIVATION_FAILED) -> tuple[Any, list[int]]:
    calls: list[int] = []

    def activate(_self: object, request: object) -> str:
        calls.append(1)
        if len(calls) <= fails:
            raise _refusal(code)
        return f"activated {request}"

    return activate, calls


def test_a_refused_activation_is_retried_until_the_old_node_is_offline() -> None:
    clock = _Clock()
    activate, calls = _activation(fails=12)  # the previous process online 12 s more
    retried = patient_activation(activate, patience_s=25.0, sleep=clock.sleep, clock=clock)
    assert retried(None, "node") == "activated node"
    assert len(calls) == 13 and clock.now == 12.0


def test_it_gives_up_after_its_patience_and_other_errors_are_not_retried() -> None:
    clock = _Clock()
    activate, calls = _activation(fails=100)
    retried = patient_activation(activate, patience_s=25.0, sleep=clock.sleep, clock=clock)
    with pytest.raises(httpx.HTTPStatusError):
        retried(None, "node")
    assert clock.now == 25.0 and len(calls) == 26
    other, calls = _activation(fails=1, code=2001)  # not registered: no wait helps
    with pytest.raises(httpx.HTTPStatusError):
        patient_activation(other, patience_s=25.0, sleep=clock.sleep, clock=clock)(None, "n")
    assert len(calls) == 1
