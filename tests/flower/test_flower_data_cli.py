"""Bad ``--data`` input to ``fedqr flower simulate | deploy | run | supernode``: exit 2, a
message naming the option, file or column, nothing written and no process started."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedqr.data import FederatedData
from fedqr.data.tabular import write_csv
from fedqr.flower.cli import flower_app

from ..argv import override


def _invoke(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(flower_app, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, " ".join(result.output.split())


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """tmp_path/in holds own.npz (3 clients, 5 features), own.csv, own_test.csv, one.csv (one
    client) and bad_model.py."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=60)
    own = FederatedData.from_arrays(x=rng.normal(size=(60, 5)) + y[:, None], y=y,
                                    client=np.repeat([0, 1, 2], 20), test_share=0.25)
    folder = tmp_path / "in"
    folder.mkdir()
    own.to_npz(folder / "own.npz")
    write_csv(folder / "own.csv", own, test_path=folder / "own_test.csv")
    text = (folder / "own.csv").read_text().splitlines()
    (folder / "one.csv").write_text("\n".join([text[0], *[r for r in text[1:]
                                                          if r.startswith("0,")]]) + "\n")
    (folder / "bad_model.py").write_text("def make(shape, k):\n    return 3\n")
    return folder


@pytest.fixture
def listening() -> Iterator[int]:
    """A TCP port something listens on (a reachable SuperLink, as far as the checks go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.mark.parametrize(("extra", "needle"), [
    (["--data", "{in}/nothing.csv"], "data must be an existing .npz, .csv or .parquet file"),
    (["--data", "{in}/own.csv", "--test-data", "{in}/own_test.csv", "--client-column",
      "hospital"], "has no column 'hospital' (--client-column='hospital')"),
    (["--data", "{in}/own.npz", "--test-share", "0.3"], "give a test set (in the file or "
                                                         "--test-data) or --test-share, not both"),
    (["--data", "{in}/own.csv"], "give a test set or --test-share"),
    (["--data", "{in}/own.npz", "--num-clients", "5"],
     "--num-clients must match the clients of --data (3), got --num-clients=5"),
    (["--data", "{in}/own.npz", "--dataset", "digits", "--partition", "iid"],
     "--data FILE brings its own clients and rows: --dataset, --partition are for the "
     "built-in data sets"),
    (["--test-share", "0.2"], "--test-share needs --data FILE"),
    (["--test-data", "{in}/own_test.csv"], "--test-data needs --data FILE"),
    (["--data", "{in}/own.npz", "--model", "{in}/none.py:make"], "does not exist"),
    (["--data", "{in}/own.npz", "--model", "{in}/bad_model.py:make"],
     "must return a torch.nn.Module"),
    (["--data", "{in}/own.npz", "--model", "cnn"], "needs square images"),
    (["--data", "{in}/own.npz", "--model", "mlp", "--hidden", "8,0"], "hidden must be"),
    (["--data", "{in}/own.npz", "--work-dir", "/dev/null/x"],
     "--work-dir must be a folder path, got --work-dir='/dev/null/x'"),
    (["--data", "{in}/own.npz", "--state-dir", "/dev/null/x"],
     "--state-dir must be a folder path, got --state-dir='/dev/null/x'"),
    (["--dataset", "digits", "--num-clients", "0"], "--num-clients must be >= 1, got "
                                                     "--num-clients=0"),
    (["--dataset", "digits", "--eps", ""], "(leave --eps out for the default), got --eps=''"),
    (["--data", "{in}/own.npz", "--insecure"],
     "--insecure and --root-certificates are options of fedqr flower run"),
    (["--data", "{in}/own.npz", "--root-certificates", "{in}/own.csv"],
     "got --root-certificates="),
])
@pytest.mark.parametrize("command", ["simulate", "deploy"])
def test_bad_data_options_exit_2_naming_them_and_write_nothing(
        tmp_path: Path, files: Path, command: str, extra: list[str], needle: str) -> None:
    out = tmp_path / "out"
    args = override([command, "--clients-per-round", "2", "--out", str(out), "--state-dir",
                     str(tmp_path / "state")], [a.replace("{in}", str(files)) for a in extra])
    code, text = _invoke(args)
    assert code == 2 and needle in text, text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_run_takes_the_server_s_test_set_not_the_clients_rows(
        tmp_path: Path, files: Path, listening: int) -> None:
    base = ["run", "--superlink", f"127.0.0.1:{listening}", "--insecure", "--out",
            str(tmp_path / "out"), "--num-clients", "3", "--clients-per-round", "2"]
    code, text = _invoke([*base, "--data", str(files / "own.npz")])
    assert code == 2 and "the SuperNodes hold the rows" in text and "--test-data" in text, text
    code, text = _invoke([*base, "--test-data", str(files / "own_test.csv"), "--model",
                          "cnn"])
    assert code == 2 and "needs square images" in text, text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


@pytest.mark.parametrize(("data", "extra", "needle"), [
    ("own.csv", [], "holds the rows of 3 clients"),
    ("one.csv", ["--label-column", "y"], "has no column 'y' (--label-column='y')"),
    ("one.csv", ["--model", "{in}/bad_model.py:make"], "--model: model 'make'"),
    ("one.csv", ["--model", "mlp", "--hidden", "x"], "hidden must be"),
    ("bad_model.py", [], "--data must end in .npz, .csv, .parquet"),
    # client 0's file given to the node of client 1: its rows would be charged twice
    ("one.csv", ["--client-id", "1"], "holds the rows of client 0, but --client-id is 1"),
])
def test_bad_supernode_data_or_model_is_named(tmp_path: Path, files: Path, listening: int,
                                              data: str, extra: list[str], needle: str) -> None:
    code, text = _invoke(["supernode", "--superlink", f"127.0.0.1:{listening}", "--insecure",
                          "--data", str(files / data), "--eps", "1", "--state-dir",
                          str(tmp_path / "state"),
                          *[a.replace("{in}", str(files)) for a in extra]])
    assert code == 2 and needle in text, text
    assert "--data" in text or "--model" in text or "hidden" in text, text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_b_defaults_to_every_client_of_a_federation_of_fewer_than_ten(
        tmp_path: Path, files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fedqr.flower.cli as cli

    seen: dict[str, int] = {}
    monkeypatch.setattr(cli, "_execute", lambda cfg, **_: seen.update(
        b=cfg.clients_per_round, n=cfg.num_clients))  # configured, not run
    code, text = _invoke(["simulate", "--data", str(files / "own.npz"), "--mechanism",
                          "laplace", "--eps", "2", "--clip", "2", "--out",
                          str(tmp_path / "out")])
    assert code == 0, text
    assert seen == {"b": 3, "n": 3}  # the 3 clients of the file, not a refused b = 10


def test_result_names_the_clients_of_the_data_file(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """As ``fedqr run``: client i of result.json is the i-th of the file's sorted ids."""
    import types

    import fedqr.flower.cli as cli
    import fedqr.flower.runner as runner

    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, size=60)
    named = FederatedData.from_arrays(x=rng.normal(size=(60, 3)), y=y, test_share=0.25,
                                      client=np.repeat(["zurich", "alpha", "bern"], 20))
    named.to_npz(tmp_path / "named.npz")
    fake = types.SimpleNamespace(theta=None, doc={
        "clients": [{"id": i} for i in range(3)], "flower": {"missing_replies": []},
        "summary": {"final_test_accuracy_mean": 0.5, "final_test_loss_mean": 0.7}})
    monkeypatch.setattr(runner, "run_flower", lambda cfg, **_: fake)  # no federation started
    written: dict[str, object] = {}
    monkeypatch.setattr(cli, "_write", lambda out_dir, doc, theta: written.update(doc=doc))
    code, text = _invoke(["simulate", "--data", str(tmp_path / "named.npz"), "--mechanism",
                          "laplace", "--eps", "1,2,3", "--clip", "2", "--rounds", "1",
                          "--out", str(tmp_path / "out")])
    assert code == 0, text
    doc = written["doc"]
    assert isinstance(doc, dict)
    assert [c["name"] for c in doc["clients"]] == ["alpha", "bern", "zurich"]
