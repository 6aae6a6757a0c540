"""``fedqr flower simulate | deploy`` as the README describes them: their options, and a data
set found nowhere refused as bad input."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

from fedqr.cli import app
from fedqr.flower.cli import flower_app

README = Path(__file__).resolve().parents[2] / "README.md"


def _options(group: typer.Typer | click.Group, name: str) -> set[str]:
    """The long options of command ``name`` of ``group`` (a flag by its first name:
    ``--standardize`` for ``--standardize/--no-standardize``)."""
    cli = group if isinstance(group, click.Group) else typer.main.get_group(group)
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    return {o for p in command.params for o in p.opts if o.startswith("--")}


def _named(text: str) -> set[str]:
    """The options a README passage names (a flag by its first name)."""
    return {token.split("/")[0] for token in re.findall(r"`(--[^`]+)`", text)}


def test_the_readme_names_exactly_the_options_simulate_and_deploy_take() -> None:
    """The README's Flower section lists what ``simulate`` and ``deploy`` take of ``fedqr
    run``'s options, which of them they lack, and their own (it said they took all of
    ``fedqr run``'s, which they do not)."""
    text = " ".join(README.read_text().split())
    passage = text[text.index("Both take these options of `fedqr run`"):]
    passage = passage[:passage.index("They write `result.json`")]
    taken, rest = passage.split("; but not ")
    lacked, own = rest.split("Their own: ")
    own, theirs = own.split("; `--superlink`")
    theirs = "`--superlink`" + theirs  # fedqr flower run's, refused by simulate and deploy
    flower = _options(flower_app, "simulate")
    assert flower == _options(flower_app, "deploy")
    run = _options(app, "run")
    assert _named(taken) == flower & run - _named(theirs)
    assert _named(lacked) == run - flower
    assert _named(own) == flower - run - _named(theirs)
    assert "node-timeout" in own and _named(theirs) <= flower


@pytest.mark.parametrize("command", ["simulate", "deploy"])
def test_a_data_set_found_nowhere_is_bad_input_naming_the_cli_s_options(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    """FEMNIST found nowhere: exit 2 (it was 1), the message naming ``--data-dir`` and
    ``FEDQR_DATA`` (not the Python API's ``data_dir=...``), nothing written."""
    monkeypatch.delenv("FEDQR_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    empty = tmp_path / "empty"
    empty.mkdir()
    res = CliRunner().invoke(flower_app, [
        command, "--dataset", "femnist", "--data-dir", str(empty), "--mechanism", "laplace",
        "--eps", "1", "--rounds", "2", "--num-clients", "3", "--clients-per-round", "2",
        "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    said = " ".join(res.output.split())
    assert "FEMNIST not found" in said and "FEDQR_DATA" in said
    assert "--data-dir=" in said and "data_dir=" not in said.replace("--data-dir=", "")
    assert not (tmp_path / "out").exists()


def test_flwr_run_s_own_failure_is_said_without_its_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`flwr run` exits 0 with {"success": false, ...} when the SuperLink is unreachable (as
    with --insecure against a TLS SuperLink); the message said "failed (exit 0)" and the
    whole JSON."""
    import json
    import subprocess

    from fedqr.flower import launch

    fed = launch.LocalFederation(tmp_path, simulation=False)
    fed.remote = ("127.0.0.1:1", None)
    said = {"success": False, "error-message": "Connection to the SuperLink is unavailable."}
    monkeypatch.setattr(launch.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a, 0, json.dumps(said).encode(), b""))
    with pytest.raises(launch.LaunchError, match=r"^flwr run failed: Connection to the "
                                                 r"SuperLink is unavailable\. \(check "
                                                 r"--superlink, and --root-certificates"):
        fed.flwr_run(tmp_path / "app")


def test_a_remote_run_stops_waiting_when_the_superlink_is_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed SuperLink left `fedqr flower run` waiting for --timeout (an hour)."""
    import socket

    from fedqr.flower import runner

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(runner, "PROBE_EVERY_S", 0.01)
    (tmp_path / "progress.jsonl").write_text('{"round": 0}\n')
    with pytest.raises(runner.FlowerRunFailed, match=rf"the SuperLink at 127.0.0.1:{port} "
                                                     r"stopped accepting connections \(3 tries"
                                                     r".* after 1 of 5 rounds of run 42"):
        runner._await(tmp_path, "result.json", run_id="42", rounds=5, timeout_s=60.0,
                      on_progress=None, address=f"127.0.0.1:{port}")
    with socket.socket() as s:  # one that listens: waited for up to the timeout
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(runner.FlowerRunFailed, match=r"no result within timeout=0\.1 s"):
            runner._await(tmp_path, "result.json", run_id="42", rounds=5, timeout_s=0.1,
                          on_progress=None, address=f"127.0.0.1:{s.getsockname()[1]}")


@pytest.mark.parametrize("command", ["simulate", "deploy"])
@pytest.mark.parametrize(("mechanism", "typed", "why"), [
    ("laplace", ["--delta", "1e-6"], "--delta must be left out for --mechanism laplace"),
    ("none", ["--eps", "2"], "--eps must be left out for --mechanism none")])
def test_a_budget_the_mechanism_does_not_spend_is_refused_as_fedqr_run_refuses_it(
        tmp_path: Path, command: str, mechanism: str, typed: list[str], why: str) -> None:
    """Not dropped silently (result.json held delta 0 beside the run config's 1e-06)."""
    args = ["--dataset", "digits", "--rounds", "1", "--num-clients", "3",
            "--clients-per-round", "2", "--mechanism", mechanism, *typed]
    res = CliRunner().invoke(flower_app, [command, *args, "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert why in " ".join(res.output.split())
    assert not (tmp_path / "out").exists()
    run = CliRunner().invoke(app, ["run", *args, "--out", str(tmp_path / "run")])
    assert run.exit_code == 2 and why in " ".join(run.output.split())
