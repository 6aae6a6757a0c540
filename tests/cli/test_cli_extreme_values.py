"""Extreme numbers typed on the command line (a typo, a fuzzer) are refused with exit 2, the
option and the allowed range named, and nothing written: not a torch allocation, an
OverflowError, a MemoryError of the accountant or a traceback (each of these was one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedqr.cli import app

runner = CliRunner()
HUGE = str(10**30)


@pytest.fixture(scope="module")
def constants(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("c") / "c.json"
    res = runner.invoke(app, ["estimate", "--dataset", "digits", "--out", str(path),
                              "--no-cache"])
    assert res.exit_code == 0, res.output
    return path


@pytest.mark.parametrize(("args", "message"), [
    (["run", "--dataset", "digits", "--rounds", "1", "--repeats", "1000000", "--out", "{out}"],
     "--repeats must be in [1, 1000], got --repeats=1000000"),
    (["run", "--dataset", "digits", "--rounds", HUGE, "--out", "{out}"],
     "--rounds must be an integer in [0, 10000000] or 'auto'"),
    (["plan", "--dataset", "digits", "--rounds", HUGE, "--plot", "{out}.png"],
     "--rounds must be an integer in [1, 10000000] or 'auto'"),
    (["plan", "--dataset", "digits", "--twin-repeats", HUGE, "--plot", "{out}.png"],
     "--twin-repeats must be in [2, 1000]"),
    (["plan", "--dataset", "digits", "--sample-rate", "1e-320", "--plot", "{out}.png"],
     "--sample-rate must be in [1e-09, 1] or 'auto'"),
    (["plan", "--dataset", "digits", "--sample-rate", "fast", "--plot", "{out}.png"],
     "--sample-rate must be a number in [1e-09, 1] or 'auto', got --sample-rate='fast'"),
    (["plan", "--dataset", "digits", "--rounds", "abc", "--plot", "{out}.png"],
     "--rounds must be an integer in [1, 10000000] or 'auto', got --rounds='abc'"),
    (["plan", "--constants", "{c}", "--mechanism", "laplace", "--eps", "1e308",
      "--plot", "{out}.png"], "--eps must be a budget the bound's closed forms can compute"),
    (["plan", "--constants", "{c}", "--mechanism", "laplace", "--eps", "1e-320",
      "--plot", "{out}.png"], "--eps must be a budget the bound's closed forms can compute"),
    (["run", "--dataset", "digits", "--rounds", "1", "--model", "mlp", "--hidden", HUGE,
      "--out", "{out}"], "--hidden must be comma-separated widths in [1, 1000000]"),
    (["run", "--dataset", "digits", "--rounds", "1", "--model", "mlp", "--hidden", "8,,4",
      "--out", "{out}"], "--hidden must be comma-separated widths in [1, 1000000], got "
                         "--hidden='8,,4'"),  # an item left out: it trained (8, 4)
    (["plan", "--dataset", "digits", "--data-use", "public-proxy", "--proxy-dataset", "digits",
      "--proxy-classes", "0,,1", "--plot", "{out}.png"],
     "--proxy-classes must look like 0-9 or 0,1,5 or name a .json label map, got "
     "--proxy-classes='0,,1'"),
    (["audit", "--rounds", "1", "--trials", "10", "--one-reply-trials", "10", "--eps", "1e308",
      "--out", "{out}.json"], "--eps must be in (0, 100]"),
    (["audit", "--rounds", "1", "--trials", "10", "--one-reply-trials", "10", "--num-clients",
      HUGE, "--out", "{out}.json"], "--num-clients must be in [1, 10000000]"),
])
def test_extreme_values_exit_2_naming_the_option(tmp_path: Path, constants: Path,
                                                 args: list[str], message: str) -> None:
    out = tmp_path / "out"
    res = runner.invoke(app, [a.replace("{out}", str(out)).replace("{c}", str(constants))
                              for a in args])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert not res.exception or isinstance(res.exception, SystemExit)
    assert list(tmp_path.iterdir()) == []
