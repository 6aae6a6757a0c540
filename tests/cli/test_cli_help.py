"""``fedqr <command> --help`` is readable on an 80-column terminal and through a pipe: click's
two columns, not typer's rich table (whose help column shrank under 20 characters for the
commands of many options)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fedqr.cli import app

runner = CliRunner()


@pytest.mark.parametrize("command", [["run"], ["plan"], ["estimate"], ["audit"],
                                     ["flower", "run"]])
def test_help_fits_80_columns_with_a_wide_help_column(command: list[str]) -> None:
    res = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"}, terminal_width=80,
                           prog_name="fedqr")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith(f"Usage: fedqr {' '.join(command)} [OPTIONS]")
    assert max(map(len, lines)) <= 80
    assert not any("│" in line for line in lines)  # no box drawing
    assert "\\[" not in res.output  # typer's escape for rich markup is not shown
    # continuation lines of an option's text start at one column, leaving it >= 40 columns
    starts = {len(line) - len(line.lstrip()) for line in lines
              if line.startswith(" " * 30) and line.strip()}
    assert starts and max(starts) <= 40, starts
    assert "--help" in res.output and "Show this message and exit." in res.output


@pytest.mark.parametrize(("command", "shown", "hidden"), [
    ("simulate", [], ["--superlink", "--insecure", "--proxy-data", "--node-timeout"]),
    ("deploy", ["--node-timeout"], ["--superlink", "--root-certificates", "--proxy-dataset"]),
    ("run", ["--superlink", "--root-certificates", "--insecure", "--proxy-dataset",
             "--proxy-data", "--proxy-classes"], ["--node-timeout"]),
])
def test_flower_help_lists_only_the_options_its_command_takes(command: str, shown: list[str],
                                                               hidden: list[str]) -> None:
    """simulate, deploy and run share one function; another command's options are hidden from
    a command's help, and still refused by name when given."""
    res = runner.invoke(app, ["flower", command, "--help"], terminal_width=80, prog_name="fedqr")
    assert res.exit_code == 0, res.output
    listed = {line.split()[0] for line in res.output.splitlines() if line.startswith("  --")}
    assert set(shown) <= listed and not set(hidden) & listed, listed
    assert "--rounds" in listed and "--eps" in listed
    if hidden[0] == "--superlink":
        res = runner.invoke(app, ["flower", command, "--superlink", "127.0.0.1:9"],
                            prog_name="fedqr")
        assert res.exit_code == 2
        assert "--superlink HOST:PORT is required by fedqr flower run" in " ".join(
            res.output.split())
