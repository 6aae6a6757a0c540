"""``--data FILE`` with a built-in data set's options, or one column as client and label:
refused (exit 2, the options named, nothing written) by plan, run and estimate alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedqr.cli import app

runner = CliRunner()


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "mine.csv"
    rows = [f"{i % 3},{i % 2},{i * 0.1:.1f},{(i * 7) % 5}" for i in range(60)]
    path.write_text("client,label,a,b\n" + "\n".join(rows) + "\n")
    return path


RECIPE = [(["--dataset", "digits"], "got dataset=digits with data"),
          (["--partition", "iid"], "got partition=iid with data"),
          (["--fraction", "0.5"], "got fraction=0.5 with data")]
SAME_COLUMN = (["--client-column", "label"], "must name different columns, got both 'label'")


@pytest.mark.parametrize(("command", "extra", "message"), [
    *[(c, e, m) for c in ("plan", "run") for e, m in RECIPE],
    *[("estimate", e, m) for e, m in RECIPE[:2]],  # estimate has no --fraction
    *[(c, *SAME_COLUMN) for c in ("plan", "run", "estimate")]])
def test_built_in_options_with_a_data_file_are_refused(
        data_file: Path, tmp_path: Path, command: str, extra: list[str], message: str) -> None:
    out = tmp_path / "out"
    args = [command, "--data", str(data_file), "--test-share", "0.3", "--mechanism", "laplace",
            "--eps" if command != "estimate" else "--clip", "2", *extra]
    args += {"plan": [], "run": ["--rounds", "2", "--out", str(out)],
             "estimate": ["--out", str(out / "c.json")]}[command]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert not out.exists()
