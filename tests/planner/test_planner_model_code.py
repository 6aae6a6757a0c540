"""The code digest of a torch model (:func:`fedqr.planner.kernels.code_digest`) covers the
user's modules its code calls into, not only the files of its classes: a helper in another
file that ``forward`` calls, edited, is another model for the planner's cache."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from torch import nn

from fedqr.models.zoo import make_kernel
from fedqr.planner.kernels import code_digest, is_user_file, kernel_identity, user_code

_NET = textwrap.dedent("""
    import torch
    from torch import nn
    import {act}
    from {shape} import flat

    class Net(nn.Module):
        def __init__(self, n, k):
            super().__init__()
            self.a, self.b = nn.Linear(n, 8), nn.Linear(8, k)

        def forward(self, x):
            return self.b({act}.act(self.a(flat(x))))

    def make(input_shape, num_classes):
        return Net(input_shape[0], num_classes)
""")
_ACT = "import torch\n\ndef act(x):\n    return torch.relu(x)\n"
_SHAPE = "import {deep}\n\ndef flat(x):\n    return {deep}.flatten(x)\n"
_DEEP = "import torch\n\ndef flatten(x):\n    return torch.flatten(x, 1)\n"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
           request: pytest.FixtureRequest) -> Iterator[tuple[Path, dict[str, str]]]:
    """A folder on ``sys.path`` with a model (``net_*``) calling two helper modules, one of
    which calls a third; module names unique to the test, taken out of ``sys.modules``
    after it."""
    tag = f"{abs(hash(request.node.nodeid)):x}"
    names = {k: f"{k}_{tag}" for k in ("net", "act", "shape", "deep")}
    (tmp_path / f"{names['net']}.py").write_text(_NET.format(**names))
    (tmp_path / f"{names['act']}.py").write_text(_ACT)
    (tmp_path / f"{names['shape']}.py").write_text(_SHAPE.format(**names))
    (tmp_path / f"{names['deep']}.py").write_text(_DEEP)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # a rewrite of the same size
    yield tmp_path, names
    for name in names.values():
        sys.modules.pop(name, None)


def _load(names: dict[str, str]) -> ModuleType:
    """The model module imported afresh, with its helpers."""
    for name in names.values():
        sys.modules.pop(name, None)
    importlib.invalidate_caches()
    return importlib.import_module(names["net"])


def _digest(names: dict[str, str]) -> str:
    model = _load(names).make((6,), 3)
    return code_digest([type(m) for m in model.modules()])


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_the_digest_covers_every_user_module_the_forward_pass_calls(
        folder: tuple[Path, dict[str, str]]) -> None:
    root, names = folder
    codes, files = user_code([type(m) for m in _load(names).make((6,), 3).modules()])
    assert {Path(f).name for f in files} == {f"{n}.py" for n in names.values()}
    assert {"forward", "act", "flat", "flatten"} <= {c.co_name for c in codes}
    first = _digest(names)
    assert _digest(names) == first  # the same code imported again: the same digest
    edits: list[tuple[str, str, str]] = [
        ("act", "torch.relu(x)", "torch.tanh(x)"),  # a module the forward names (act.act)
        ("shape", "def flat(x):", "def flat(x):  # "),  # a function imported by name
        ("deep", "flatten(x, 1)", "flatten(x, -3)")]  # a module that function calls
    for key, old, new in edits:
        _edit(root / f"{names[key]}.py", old, new)
        changed = _digest(names)
        assert changed != first, key
        first = changed


def test_the_digest_leaves_out_torch_fedqr_and_installed_packages() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    assert user_code([type(m) for m in model.modules()]) == ([], set())
    assert code_digest([nn.Linear]) == code_digest([nn.Sequential, nn.ReLU])
    assert not is_user_file(nn.__file__)  # site-packages
    assert not is_user_file(importlib.__file__)  # the standard library
    assert not is_user_file(sys.modules["fedqr"].__file__ or "")
    assert is_user_file(__file__)


def test_a_model_file_identity_follows_the_helper_beside_it(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """``FILE.py:make`` importing a helper module next to it (no PYTHONPATH): the kernel
    loads, and the planner's key changes with the helper's code, the layers the same."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    helper = f"helper_{tmp_path.name.replace('-', '_')}"
    (tmp_path / "net.py").write_text(_NET.format(act=helper, shape="torch").replace(
        "from torch import flat", "flat = lambda x: x"))
    (tmp_path / f"{helper}.py").write_text(_ACT)
    path_before = list(sys.path)

    def identity() -> dict[str, Any]:
        sys.modules.pop(helper, None)
        return kernel_identity(make_kernel(f"{tmp_path / 'net.py'}:make", input_shape=(5,),
                                           num_classes=2))

    try:
        first = identity()
        assert sys.path == path_before  # the file's folder was on it while it loaded
        assert identity() == first
        _edit(tmp_path / f"{helper}.py", "torch.relu(x)", "torch.tanh(x)")
        changed = identity()
    finally:
        sys.modules.pop(helper, None)
    assert changed["module"] == first["module"] and changed["init_sha256"] == first[
        "init_sha256"]
    assert changed["code_sha256"] != first["code_sha256"]


def test_set_constants_digest_the_same_in_every_interpreter() -> None:
    """``x in {"a", "b"}`` compiles to a frozenset, whose order follows string hashing."""
    code: Callable[[str], Any] = lambda s: s in {"alpha", "beta", "gamma"}  # noqa: E731
    from fedqr.planner import kernels

    consts = [c for c in code.__code__.co_consts if isinstance(c, frozenset)]
    assert consts
    shuffled = frozenset(sorted(consts[0], reverse=True))
    assert kernels._const_bytes(consts[0]) == kernels._const_bytes(shuffled)
