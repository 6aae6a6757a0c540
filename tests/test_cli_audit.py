"""``fedqr audit``: JSON and table on success; exit 2, a named option, no file on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import fedqr.audit
from fedqr.audit import AuditConfig, AuditReport, run_audit
from fedqr.cli import app

runner = CliRunner()
SMALL = ["audit", "--num-clients", "4", "--clients-per-round", "1", "--rounds", "4",
         "--trials", "400", "--one-reply-trials", "400"]


def test_audit_writes_json_and_prints_a_table(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "audit.json"
    res = runner.invoke(app, [*SMALL, "--mechanism", "laplace", "--eps", "2",
                              "--threat-model", "replies", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["epsilon_claimed"] == 2.0 and doc["delta_claimed"] == 0.0
    assert doc["mechanism"] == "laplace" and doc["threat_model"] == "replies"
    assert doc["trials"] == 400 and doc["confidence"] == 0.95
    assert doc["scenario"]["sample_rate"] == 1.0 and doc["scenario"]["clip"] == 300.0
    assert doc["scenario"]["accountant"] == "pure"  # the mechanism's own (it recorded rdp)
    assert 0.0 <= doc["epsilon_lower_bound"] == doc["results"][0]["epsilon_lower_bound"]
    assert "replies" in res.output and "eps >=" in res.output
    assert [p.name for p in out.parent.iterdir()] == ["audit.json"]  # no temporary left


def test_audit_without_out_writes_nothing(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, [*SMALL, "--confidence", "0.9"])
    assert res.exit_code == 0, res.output
    assert "final-model" in res.output and "confidence 0.9" in res.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "name"), [
    (["--eps", "0"], "eps"), (["--eps=-1"], "eps"), (["--eps", "nan"], "eps"),
    (["--trials", "9"], "trials"), (["--confidence", "1"], "confidence"),
    (["--confidence", "0"], "confidence"), (["--delta", "1.5"], "--delta must be in (0, 1)"),
    (["--delta", "0"], "--delta must be in (0, 1)"),  # one range for both ends (was [0, 1))
    (["--mechanism", "none"], "mechanism"), (["--rounds", "0"], "rounds"),
    (["--clients-per-round", "9"], "--clients-per-round"), (["--seed", "-1"], "seed"),
    (["--mechanism", "laplace", "--sample-rate", "0.5"], "--sample-rate"),
    (["--threat-model", "server"], "threat-model"), (["--clip", "0"], "clip"),
    (["--mechanism", "laplace", "--delta", "0.1"], "--delta must be left out for --mechanism "
                                                   "laplace"),
])
def test_bad_input_exits_2_naming_the_parameter(tmp_path: Path, args: list[str],
                                                name: str) -> None:
    out = tmp_path / "a.json"
    res = runner.invoke(app, [*SMALL, *args, "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert name in res.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_out_that_is_a_folder_or_unwritable_is_refused(tmp_path: Path) -> None:
    res = runner.invoke(app, [*SMALL, "--out", str(tmp_path)])
    assert res.exit_code == 2 and "out" in res.output
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = runner.invoke(app, [*SMALL, "--out", str(blocker / "a.json")])
    assert res.exit_code == 2 and "is a file" in " ".join(res.output.split())  # wrapped
    assert blocker.read_text() == "x"
    res = runner.invoke(app, [*SMALL, "--out", "/proc/fedqr-audit.json"])  # no files there
    assert res.exit_code == 2 and "--out must be a writable location" in " ".join(
        res.output.split())


def test_a_violation_exits_1_and_still_writes_the_audit(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Noise under-scaled by the private hook: exit 1 (a fault found), JSON says so."""
    def broken(config: AuditConfig) -> AuditReport:
        return run_audit(config, _noise_scale_factor=0.2)

    monkeypatch.setattr(fedqr.audit, "run_audit", broken)  # fedqr audit imports it on use
    out = tmp_path / "audit.json"
    res = runner.invoke(app, ["audit", "--mechanism", "laplace", "--num-clients", "10",
                              "--clients-per-round", "1", "--rounds", "10", "--trials", "4000",
                              "--one-reply-trials", "4000", "--out", str(out)])
    assert res.exit_code == 1, res.output
    assert "VIOLATION" in res.output and "Traceback" not in res.output
    doc = json.loads(out.read_text())
    assert doc["violation"] is True and doc["epsilon_lower_bound"] > doc["epsilon_claimed"]
    assert [r["violation"] for r in doc["results"]][::2] == [True, True]
