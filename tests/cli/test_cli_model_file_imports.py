"""A ``--model FILE.py:FUNCTION`` whose code lives in more files than one: the modules beside
the file import (:func:`fedqr.models.zoo.load_factory`), and the stored answer of ``fedqr
plan`` (:mod:`fedqr.cli.plan_cache`) follows the user's modules the file imports."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from torch import nn
from typer.testing import CliRunner

from fedqr.cli import app, plan_cache
from fedqr.models.zoo import load_factory
from tests.cli.test_cli_plan_cache import _options, _write_csv  # the answer key's options

runner = CliRunner()

_FACTORY = textwrap.dedent("""
    import json, os.path
    import numpy
    import torch
    import {helper}

    def make(input_shape, num_classes):
        n = 1
        for s in input_shape:
            n *= s
        return {helper}.body(n, num_classes)
""")
_HELPER = textwrap.dedent("""
    from torch import nn
    from .sub import width  # a relative import: resolved from this file's folder
    from sub.deeper import scale

    def body(n, k):
        return nn.Sequential(nn.Flatten(), nn.Linear(n, width()), nn.ReLU(),
                             nn.Linear(width(), k))
""")


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``model/factory.py:make`` importing ``HELPER`` beside it (a name unique to the test),
    which imports the package ``sub`` beside them; gone from ``sys.modules`` after."""
    monkeypatch.setenv("FEDQR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    helper = f"helper_{abs(hash(str(tmp_path))):x}"
    (folder / "factory.py").write_text(_FACTORY.format(helper=helper))
    (folder / f"{helper}.py").write_text(_HELPER.replace("from .sub", "from sub"))
    (folder / "sub" / "__init__.py").write_text("def width():\n    return 12\n")
    (folder / "sub" / "deeper.py").write_text("from . import width\nscale = 1.0\n")
    (folder / "unrelated.py").write_text("x = 1\n")
    yield folder / "factory.py"
    _forget(folder)


def _forget(folder: Path) -> None:
    """The modules loaded from ``folder`` out of ``sys.modules`` (as a new process has it)."""
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(folder)):
            del sys.modules[name]


def _helper(model: Path) -> Path:
    (path,) = model.parent.glob("helper_*.py")
    return path


def _rewrite(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_a_model_file_imports_the_modules_beside_it(model: Path) -> None:
    before = list(sys.path)
    factory = load_factory(f"{model}:make")
    assert sys.path == before  # its folder was first on it while it loaded, and only then
    net = factory((4,), 3)
    assert [m.out_features for m in net.modules() if isinstance(m, nn.Linear)] == [12, 3]
    again = load_factory(f"{model}:make")  # loaded twice: still no trace on sys.path
    assert again is not factory and sys.path == before


def test_the_model_file_s_imports_are_found_without_running_it(model: Path) -> None:
    found = plan_cache.model_imports(model, [0])
    folder = model.parent
    assert sorted(found) == sorted([_helper(model), folder / "sub" / "__init__.py",
                                    folder / "sub" / "deeper.py"])
    _rewrite(_helper(model), "from sub import", "from .sub import")
    assert sorted(plan_cache.model_imports(model, [0])) == sorted(found)


def test_modules_are_found_without_torch(model: Path) -> None:
    """The fast path parses the model file and its helpers: torch stays unimported."""
    probe = textwrap.dedent("""
        import sys
        from pathlib import Path
        from fedqr.cli.plan_cache import model_imports
        found = model_imports(Path(sys.argv[1]), [0])
        print(len(found), "torch" in sys.modules, "numpy" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", probe, str(model)], capture_output=True,
                          text=True, check=True, timeout=120)
    assert done.stdout.split() == ["3", "False", "False"], done.stdout



@pytest.fixture
def args(tmp_path: Path, model: Path) -> list[str]:
    """A plan of a few twin rounds of the model file's network."""
    csv = _write_csv(tmp_path / "clients.csv")
    return ["plan", "--data", str(csv), "--test-share", "0.25", "--mechanism", "laplace",
            "--eps", "5", "--clip", "5", "--twin-repeats", "2", "--rounds", "5",
            "--model", f"{model}:make", "--json"]



def test_the_key_follows_every_user_module_the_model_file_imports(args: list[str],
                                                                  model: Path) -> None:
    o = _options(args)
    key = plan_cache.answer_key(o)
    assert key is not None
    folder = model.parent
    _rewrite(folder / "unrelated.py", "1", "2")  # beside it, not imported: the same key
    assert plan_cache.answer_key(o) == key
    for path, old, new in [(_helper(model), "nn.ReLU()", "nn.Tanh()"),  # same size, other
                           (folder / "sub" / "__init__.py", "12", "13"),
                           (folder / "sub" / "deeper.py", "1.0", "2.0")]:
        _rewrite(path, old, new)
        changed = plan_cache.answer_key(o)
        assert changed not in (None, key), path
        key = changed


def test_an_edited_helper_plans_again(args: list[str], model: Path,
                                      planner_calls: list[int]) -> None:
    calls = planner_calls

    def plan() -> dict[str, Any]:
        _forget(model.parent)  # each `fedqr plan` is a new process
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        doc: dict[str, Any] = json.loads(res.stdout)
        return doc

    first = plan()
    assert plan()["from_cache"] is True and calls == [1]
    _rewrite(_helper(model), "nn.ReLU()", "nn.Tanh()")  # the same parameters, other model
    edited = plan()
    assert edited["from_cache"] is False and calls == [1, 1]
    assert edited["scenario"]["model"] == first["scenario"]["model"]


def test_a_module_beside_the_model_file_that_shadows_the_standard_library_is_followed(
        tmp_path: Path) -> None:
    """The model file's folder is first on ``sys.path``, so its ``code.py`` is what ``import
    code`` runs: the answer key follows it (an edit of its activation is another answer);
    a standard-library name with no file beside the model is not followed."""
    (tmp_path / "model.py").write_text("from code import Act\nimport json\n")
    (tmp_path / "code.py").write_text("from torch import nn\nAct = nn.Tanh\n")
    assert plan_cache.model_imports(tmp_path / "model.py", [0]) == [
        (tmp_path / "code.py").resolve()]


@pytest.mark.parametrize("where", ["import", "factory"])
def test_a_model_file_that_exits_is_a_clear_error_not_a_silent_exit(tmp_path: Path,
                                                                    where: str) -> None:
    """``sys.exit(3)`` in the user's module or factory ended fedqr with status 3 and no word;
    it is now a ValueError naming the file (the CLI's exit 2, bad input)."""
    from fedqr.models.zoo import check_model

    path = tmp_path / "m.py"
    body = "    raise SystemExit(3)\n" if where == "factory" else "    pass\n"
    top = "raise SystemExit(3)\n" if where == "import" else ""
    path.write_text(f"import sys\n{top}def make(input_shape, num_classes):\n{body}")
    if where == "import":
        with pytest.raises(ValueError, match=r"m\.py' failed to import: SystemExit: 3"):
            load_factory(f"{path}:make")
        return
    factory = load_factory(f"{path}:make")
    with pytest.raises(ValueError, match="the factory raised SystemExit: 3"):
        check_model(lambda g: factory((4,), 2), input_shape=(4,), num_classes=2, label="m")
