"""Fixtures of the command-line tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def planner_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of the planner (``fedqr.cli.scenario.twin_plan``)."""
    import fedqr.cli.scenario as scenario

    calls: list[int] = []
    real = scenario.twin_plan

    def counted(o: dict[str, Any]) -> Any:
        calls.append(1)
        return real(o)

    monkeypatch.setattr(scenario, "twin_plan", counted)
    return calls
