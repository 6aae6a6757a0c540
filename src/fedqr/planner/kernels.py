"""Which model the twin simulates for a scenario, whether it can, and how plans name it.

:func:`twin_kernel` resolves a scenario's model into the kernel the twin runs: ``None`` for
softmax regression (the fused logistic twin of :mod:`fedqr.planner.twin`, unchanged), else a
:class:`~fedqr.models.kernel.Kernel` simulated by :mod:`fedqr.planner.twin_kernel`. A torch
model is checked first (:func:`fedqr.models.zoo.check_model`: a module giving ``(n, k)``
logits, no batch normalisation, per-sample gradients); a model the twin cannot run is refused
with a ``ValueError`` naming it, never planned by another method behind the user's back.
"""

from __future__ import annotations

import hashlib
import math
import types
from pathlib import Path
from typing import Any

import torch

from fedqr.data import Dataset
from fedqr.models.kernel import Kernel
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.models.torch_kernel import TorchKernel
from fedqr.planner.scenario import Scenario

__all__ = ["code_digest", "for_twin", "forward_flops", "kernel_identity", "scenario_kernel",
           "twin_kernel"]


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
    compiled code of every method of a class outside torch and fedqr, and the bytes of each
    source file it was compiled from (a helper the forward pass calls, edited, changes it too).
    Torch's modules and fedqr's own (``mlp``, ``cnn``, the default loss) are left out: the
    pinned torch and ``PLANNER_VERSION`` fix them. A model whose ``forward`` changed is
    another model, whatever its layers and initial weights."""
    h = hashlib.sha256()
    files: set[str] = set()
    for code in _user_code(objects):
        h.update(_code_bytes(code))
        files.add(code.co_filename)
    for name in sorted(files):
        try:
            h.update(Path(name).read_bytes())
        except OSError:  # code without a file (an interactive session): its bytecode only
            h.update(name.encode())
    return h.hexdigest()[:16]


def _user_code(objects: list[Any]) -> list[types.CodeType]:
    codes: list[types.CodeType] = []
    for obj in objects:
        owners = obj.__mro__ if isinstance(obj, type) else (obj,)
        for owner in owners:
            if getattr(owner, "__module__", "").split(".")[0] in ("torch", "builtins", "fedqr"):
                continue
            members = vars(owner).values() if isinstance(owner, type) else [owner]
            for member in members:
                code = getattr(getattr(member, "__func__", member), "__code__", None)
                if isinstance(code, types.CodeType):
                    codes.append(code)
    return codes


def _code_bytes(code: types.CodeType) -> bytes:
    """Bytecode, names and constants of ``code`` and of the code nested in it."""
    parts = [code.co_code, repr(code.co_names).encode(), repr(code.co_varnames).encode()]
    parts += [_code_bytes(c) if isinstance(c, types.CodeType) else repr(c).encode()
              for c in code.co_consts]
    return b"\0".join(parts)


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
