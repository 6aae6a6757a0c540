"""Which model the twin simulates for a scenario, whether it can, and how plans name it.

:func:`twin_kernel` resolves a scenario's model into the kernel the twin runs: ``None`` for
softmax regression (the fused logistic twin of :mod:`fedqr.planner.twin`, unchanged), else a
:class:`~fedqr.models.kernel.Kernel` simulated by :mod:`fedqr.planner.twin_kernel`. A torch
model is checked first (:func:`fedqr.models.zoo.check_model`: a module giving ``(n, k)``
logits, no batch normalisation, per-sample gradients); a model the twin cannot run is refused
with a ``ValueError`` naming it, never planned by another method behind the user's back.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import types
from pathlib import Path
from typing import Any

import torch

from fedqr._user_files import is_user_file
from fedqr.data import Dataset
from fedqr.models.kernel import Kernel
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.models.torch_kernel import TorchKernel
from fedqr.planner.scenario import Scenario

__all__ = ["code_digest", "for_twin", "forward_flops", "is_user_file", "kernel_identity",
           "scenario_kernel", "twin_kernel", "user_code"]


def _input_shape(dataset: Dataset) -> tuple[int, ...]:
    return tuple(dataset.image_shape) if dataset.image_shape else (dataset.num_features,)


def twin_kernel(scenario: Scenario, dataset: Dataset) -> Kernel | None:
    """The kernel the twin simulates for ``scenario`` on ``dataset`` (``None``: the fused
    logistic twin, see :func:`scenario_kernel`).

    Raises
    ------
    ValueError
        As :func:`scenario_kernel`.
    """
    return for_twin(scenario_kernel(scenario, dataset))


def for_twin(kernel: Kernel) -> Kernel | None:
    """The kernel the twin simulates for a scenario's ``kernel``: ``None`` for softmax
    regression (the fused logistic twin), else ``kernel`` itself."""
    return None if isinstance(kernel, LogRegKernel) else kernel


def scenario_kernel(scenario: Scenario, dataset: Dataset) -> Kernel:
    """The scenario's model as a kernel sized for ``dataset`` (its kernel, or its model name
    through :func:`fedqr.models.zoo.make_kernel`), checked against the data.

    Raises
    ------
    ValueError
        Naming the model, when it does not fit the data (features, classes) or the twin
        cannot simulate it (no per-sample gradients, batch normalisation, ...).
    """
    kernel = scenario.kernel
    if kernel is None:
        from fedqr.models.zoo import make_kernel

        name = scenario.model_name
        try:
            kernel = make_kernel(name, input_shape=_input_shape(dataset),
                                 num_classes=dataset.num_classes)
        except ValueError as e:
            raise ValueError(f"the twin planner cannot simulate model={name} on "
                             f"dataset {dataset.name}: {e}") from e
    if isinstance(kernel, LogRegKernel):
        if (kernel.num_features, kernel.num_classes) != (dataset.num_features,
                                                         dataset.num_classes):
            raise ValueError(f"model {kernel.name} has {kernel.num_features} features and "
                             f"{kernel.num_classes} classes, the data {dataset.num_features} "
                             f"and {dataset.num_classes}")
    if isinstance(kernel, TorchKernel):
        _check_torch(kernel, dataset)
    return kernel


def _check_torch(kernel: TorchKernel, dataset: Dataset) -> None:
    from fedqr.models.zoo import check_model

    if math.prod(kernel.input_shape) != dataset.num_features or \
            kernel.num_classes != dataset.num_classes:
        raise ValueError(f"model {kernel.name!r} takes inputs of shape {kernel.input_shape} "
                         f"and {kernel.num_classes} classes, but dataset {dataset.name} has "
                         f"{dataset.num_features} features and {dataset.num_classes} classes")
    try:
        check_model(kernel.build, input_shape=kernel.input_shape,
                    num_classes=kernel.num_classes, label=kernel.name, loss_fn=kernel.loss_fn)
    except ValueError as e:
        raise ValueError(f"the twin planner cannot simulate model {kernel.name!r}: {e}") from e


def kernel_identity(kernel: Kernel) -> dict[str, Any]:
    """What a plan's cache key says about a model: :meth:`Kernel.describe`, and for a torch
    model its module structure, loss and a digest of its first initial parameters (two
    models of one name and size but different layers or initialisation differ)."""
    out: dict[str, Any] = {"describe": kernel.describe()}
    if isinstance(kernel, TorchKernel):
        theta = kernel.init(repeats=1, generator=torch.Generator().manual_seed(0))
        model = kernel.build(torch.Generator().manual_seed(0))
        out["module"] = repr(model)
        out["loss"] = getattr(kernel.loss_fn, "__qualname__", repr(kernel.loss_fn))
        out["init_sha256"] = hashlib.sha256(theta.numpy().tobytes()).hexdigest()[:16]
        out["input_shape"] = list(kernel.input_shape)
        out["code_sha256"] = code_digest([type(m) for m in model.modules()] + [kernel.loss_fn])
    return out


def code_digest(objects: list[Any]) -> str:
    """A digest of the user's code behind ``objects`` (module classes, a loss function): the
    compiled code of every method of a class outside torch and fedqr and of every user
    function it calls, and the bytes of the source files of every user module that code
    depends on (:func:`user_code`: the modules of those classes and functions, the modules
    and functions they name, transitively; a helper in another file that the forward pass
    calls, edited, changes it too). Torch's modules, fedqr's own (``mlp``, ``cnn``, the
    default loss), the standard library and installed packages are left out: the pinned
    torch and ``PLANNER_VERSION`` fix them. A model whose ``forward`` changed is another
    model, whatever its layers and initial weights."""
    codes, files = user_code(objects)
    h = hashlib.sha256()
    for part in sorted({_code_bytes(code) for code in codes}):
        h.update(hashlib.sha256(part).digest())
    for name in sorted(files | {code.co_filename for code in codes}):
        try:
            h.update(name.encode() + b"\0" + Path(name).read_bytes())
        except OSError:  # code without a file (an interactive session): its bytecode only
            h.update(name.encode())
    return h.hexdigest()[:16]


def user_code(objects: list[Any]) -> tuple[list[types.CodeType], set[str]]:
    """The user's code behind ``objects`` (classes, functions, modules, callables): the code
    of the user functions and methods reached, and the source files of the user modules
    reached (see :func:`is_user_file`), following the globals, closures and module
    attributes each names."""
    walk = _Walk()
    for obj in objects:
        walk.visit(obj if isinstance(obj, type | types.ModuleType | types.FunctionType |
                                     types.MethodType | functools.partial) else type(obj))
    return walk.codes, walk.files


class _Walk:
    """A walk over the user's classes, functions and modules (each visited once)."""

    def __init__(self) -> None:
        self.codes: list[types.CodeType] = []
        self.files: set[str] = set()
        self._seen: set[int] = set()

    def visit(self, obj: object) -> None:
        """Record ``obj`` and what it depends on, when it is the user's."""
        if id(obj) in self._seen:
            return
        self._seen.add(id(obj))
        if isinstance(obj, types.ModuleType):
            self._namespace(vars(obj))
        elif isinstance(obj, type):
            self._class(obj)
        elif isinstance(obj, types.MethodType | functools.partial):
            self.visit(obj.__func__ if isinstance(obj, types.MethodType) else obj.func)
        elif isinstance(obj, types.FunctionType):
            self._function(obj)

    def _class(self, cls: type) -> None:
        for owner in cls.__mro__:
            if _user_module_name(getattr(owner, "__module__", None)):
                for member in vars(owner).values():
                    for fn in _functions(member):
                        self.visit(fn)

    def _function(self, fn: types.FunctionType) -> None:
        if not _user_module_name(fn.__module__) or not _user_code_file(fn.__code__):
            return
        self.codes.append(fn.__code__)
        self._namespace(fn.__globals__)
        named = fn.__globals__
        for name in _names(fn.__code__):
            if name in named:
                self.visit(named[name])
        for cell in fn.__closure__ or ():
            with contextlib.suppress(ValueError):  # an empty cell
                self.visit(cell.cell_contents)

    def _namespace(self, ns: dict[str, Any]) -> None:
        """A module's globals: its file, and the user modules, classes and functions in it."""
        file = ns.get("__file__")
        if not isinstance(file, str) or not _user_module_name(ns.get("__name__")) or \
                not is_user_file(file) or file in self.files:
            return
        self.files.add(file)
        for value in list(ns.values()):
            if isinstance(value, types.ModuleType | type | types.FunctionType):
                self.visit(value)


def _functions(member: object) -> list[object]:
    """The functions and classes behind a class attribute (a method, a static or class
    method, a property's accessors, a nested class); none for data."""
    if isinstance(member, staticmethod | classmethod):
        return [member.__func__]
    if isinstance(member, property):
        return [f for f in (member.fget, member.fset, member.fdel) if f is not None]
    return [member] if isinstance(member, types.FunctionType | type) else []


def _names(code: types.CodeType) -> set[str]:
    """The global and attribute names ``code`` and the code nested in it use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


_NOT_USER = frozenset({"torch", "builtins", "fedqr", "numpy"})


def _user_module_name(name: object) -> bool:
    return isinstance(name, str) and name.split(".")[0] not in _NOT_USER


def _user_code_file(code: types.CodeType) -> bool:
    """Whether ``code`` is the user's: from a user file, or from none (an interactive
    session, ``exec``)."""
    name = code.co_filename
    return not Path(name).is_absolute() or is_user_file(name)


def _code_bytes(code: types.CodeType) -> bytes:
    """Bytecode, names and constants of ``code`` and of the code nested in it."""
    parts = [code.co_code, repr(code.co_names).encode(), repr(code.co_varnames).encode()]
    parts += [_code_bytes(c) if isinstance(c, types.CodeType) else _const_bytes(c)
              for c in code.co_consts]
    return b"\0".join(parts)


def _const_bytes(const: object) -> bytes:
    """A constant's repr; a frozenset's (``x in {"a", "b"}``) sorted, as its order follows
    the interpreter's string hashing, which differs between runs."""
    if isinstance(const, frozenset):
        return repr(sorted(repr(c) for c in const)).encode()
    return repr(const).encode()


def forward_flops(kernel: Kernel) -> int:
    """FLOPs of one row's forward pass (``torch.utils.flop_counter`` on a model built from
    seed 0; ``2 P`` for a kernel that is not a torch module): what the twin's cost model
    prices (a convolution reuses each weight at every position, a Linear layer once)."""
    if not isinstance(kernel, TorchKernel):
        return 2 * kernel.num_params
    from torch.utils.flop_counter import FlopCounterMode

    model = kernel.build(torch.Generator().manual_seed(0))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, *kernel.input_shape))
    return max(int(counter.get_total_flops()), 2 * kernel.num_params)
