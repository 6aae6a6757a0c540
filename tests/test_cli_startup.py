"""``fedqr --help`` and every ``fedqr <command> --help`` import nothing heavy.

The 0.5 s goal itself is measured by ``bench/cli_startup.py``; these tests check its cause:
after building each help, the process holds none of the heavy packages (torch and
dp-accounting take seconds to import, NumPy 0.2 s). Each check runs in a fresh interpreter,
as a user's ``fedqr`` does: this test process has imported everything long ago.
"""

from __future__ import annotations

import enum
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

HEAVY = ("torch", "dp_accounting", "absl", "flwr", "numpy", "scipy", "sklearn", "matplotlib",
         "cryptography")
"""Packages no help may import (NumPy included: 0.2 s of the 0.5 s budget)."""

# In a fresh interpreter: every help, one after another, each followed by a look at
# sys.modules (the modules of one help stay for the next, so each list is cumulative and an
# import shows up at the first help that caused it).
_PROBE = textwrap.dedent("""
    import contextlib, io, json, sys
    import click, typer.main
    from fedqr.cli import app

    heavy = json.loads(sys.argv[1])
    paths = [[]]
    def walk(group, prefix):
        for name in sorted(group.commands):
            paths.append([*prefix, name])
            if isinstance(group.commands[name], click.Group):
                walk(group.commands[name], [*prefix, name])
    walk(typer.main.get_command(app), [])
    report = []
    for path in paths:
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            try:
                app([*path, "--help"], prog_name="fedqr")
                code = 0
            except SystemExit as e:
                code = e.code
        loaded = sorted(m for m in heavy if m in sys.modules)
        report.append({"path": path, "code": code, "help": text.getvalue(),
                       "heavy": loaded})
    print(json.dumps(report))
""")


@pytest.fixture(scope="module")
def report() -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(HEAVY)],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    result: list[dict[str, Any]] = json.loads(done.stdout)
    return result


def test_every_command_is_probed(report: list[dict[str, Any]]) -> None:
    probed = {" ".join(r["path"]) for r in report}
    assert {"", "run", "estimate", "plan", "reproduce", "plot", "audit", "flower",
            "flower simulate", "flower deploy", "flower run", "flower certs",
            "flower superlink", "flower supernode", "flower register"} <= probed


def test_every_help_is_shown_without_a_heavy_import(report: list[dict[str, Any]]) -> None:
    for r in report:
        name = " ".join(["fedqr", *r["path"], "--help"])
        assert r["code"] == 0, name
        assert "Usage: fedqr" in str(r["help"]), name
        assert r["heavy"] == [], f"{name} imported {r['heavy']}"


def test_a_help_shows_the_options_of_its_command(report: list[dict[str, Any]]) -> None:
    """The probe printed the real help (the options come from the light enums)."""
    helps = {" ".join(r["path"]): str(r["help"]) for r in report}
    assert "--mechanism" in helps["run"] and "gaussian" in helps["run"]
    assert "--data-use" in helps["plan"] and "clear-proxy" in helps["plan"]
    assert "--threat-model" in helps["audit"] and "final-model" in helps["audit"]
    assert "--aggregation" in helps["flower simulate"]


def test_python_m_fedqr_cli_runs_the_app() -> None:
    done = subprocess.run([sys.executable, "-m", "fedqr.cli", "--help"], capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Usage: fedqr" in done.stdout and "plan" in done.stdout


@pytest.mark.parametrize(("owner", "name"), [
    ("fedqr.privacy", "Mechanism"), ("fedqr.privacy.mechanisms", "Mechanism"),
    ("fedqr.privacy", "Accountant"), ("fedqr.privacy.accounting", "Accountant"),
    ("fedqr.data", "DatasetName"), ("fedqr.data.datasets", "DatasetName"),
    ("fedqr.data", "PartitionKind"), ("fedqr.data.partition", "PartitionKind"),
    ("fedqr.models.factory", "ModelName"), ("fedqr.theory", "Rounding"),
    ("fedqr.theory.laplace", "Rounding"), ("fedqr.sim.config", "Selection"),
    ("fedqr.sim.config", "Aggregation"), ("fedqr.sim.config", "LrSchedule"),
    ("fedqr.planner", "Method"), ("fedqr.planner", "DataUse"),
    ("fedqr.planner.scenario", "DataUse"), ("fedqr.audit", "ThreatModel"),
])
def test_an_enum_is_one_class_wherever_it_is_imported_from(owner: str, name: str) -> None:
    """The light classes of fedqr._enums are the owners' classes, not copies."""
    import importlib

    import fedqr._enums

    light = getattr(fedqr._enums, name)
    assert getattr(importlib.import_module(owner), name) is light
    assert issubclass(light, enum.StrEnum)
