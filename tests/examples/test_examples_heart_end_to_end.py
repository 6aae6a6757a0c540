"""The heart-disease example end to end on the real UCI files: prepare, plan, run the plan, as
the README's "Your own data and model" shell example writes it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index("```bash", text.index("## Your own data and model")) + len("```bash")
    block = text[start:text.index("```", start)].replace("\\\n", " ")
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def _shell(data_dir: Path, tmp_path: Path) -> dict[str, str]:
    """A fresh folder as a user's (``examples/`` linked in) and the environment its commands
    run in: the real data, an empty cache, this interpreter's ``fedqr`` on the PATH."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    bin_dir = Path(sys.executable).parent
    return {**os.environ, "FEDQR_DATA": str(data_dir), "FEDQR_CACHE": str(tmp_path / "cache"),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


@pytest.mark.slow
def test_readme_shell_example_runs_as_written(data_dir: Path, tmp_path: Path) -> None:
    """Each command of the README's CSV example, in a fresh folder, through the shell."""
    env = _shell(data_dir, tmp_path)
    commands = _readme_commands()
    assert [shlex.split(c)[0] for c in commands] == ["python", "fedqr", "fedqr"]
    for command in commands:
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True,
                              text=True, check=False)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    doc = json.loads((tmp_path / "runs" / "heart" / "result.json").read_text())
    assert doc["plan"]["useful"] and len(doc["clients"]) == 4
    assert doc["plan"]["rounds"] >= 1 and 1 <= doc["plan"]["clients_per_round"] <= 4
    for c in doc["clients"]:
        assert c["epsilon_spent"] <= c["epsilon_budget"] + 1e-12
    assert doc["summary"]["final_test_accuracy_mean"] > 0.6  # majority class: 0.55


def _three_hospitals_block() -> str:
    text = (ROOT / "examples" / "heart_disease" / "README.md").read_text()
    at = text.index("### Three hospitals planned from Cleveland's public data")
    start = text.index("```bash", at) + len("```bash")
    return text[start:text.index("```", start)]


@pytest.mark.slow
def test_three_hospitals_are_planned_from_clevelands_public_rows(data_dir: Path,
                                                                  tmp_path: Path) -> None:
    """The example README's public-proxy block as written (after the prepare step): the plans
    read only Cleveland's rows, the runs train the three other hospitals within budget."""
    env = _shell(data_dir, tmp_path)
    script = ("set -e\npython examples/heart_disease/prepare.py --out runs/data/heart\n"
              + _three_hospitals_block())
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    for out in ("heart3-lap", "heart3-mlp"):
        doc = json.loads((tmp_path / "runs" / out / "result.json").read_text())
        assert doc["plan"]["useful"]
        used = doc["plan"]["data_used"]
        assert used["kind"] == "public-proxy" and not used["reads_private_data"]
        assert used["proxy"] == "hospital_cleveland"
        assert sorted(c["name"] for c in doc["clients"]) == ["1", "2", "3"]
        for c in doc["clients"]:
            assert c["epsilon_spent"] <= c["epsilon_budget"] + 1e-12
        assert doc["summary"]["final_test_accuracy_mean"] > 0.6  # majority class: 0.55
