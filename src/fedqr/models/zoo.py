"""From a model choice to a kernel: ``logreg``, ``linear``, ``mlp``, ``cnn``,
``FILE.py:FUNCTION`` or a user's factory ``(input_shape, num_classes) -> nn.Module``.

``logreg`` is the paper's softmax regression, **without** an intercept; ``linear`` is softmax
regression **with** one (a bias per class). Both run the fused fast path
(:class:`~fedqr.models.logreg_kernel.LogRegKernel`). Only ``linear`` can learn the label
frequencies on standardised features (UCI Adult, 75% of one class, 20 clients, no privacy,
300 full rounds at lr 0.5: test loss 0.469 for ``logreg`` against 0.331 with the intercept).

:func:`make_kernel` is the one place a model name becomes a :class:`~fedqr.models.kernel.Kernel`
(the CLI, the public API, the planner and Flower ask it). A torch model is checked before any
work (:func:`~fedqr.models.model_check.check_model`: among others, a new module at each call of
its factory, ``(n, num_classes)`` logits, no batch-coupled layer, each row's output its own,
per-sample gradients that agree with autograd's row by row); its per-sample method is
``ghost`` where layer hooks (Linear, Conv1d/Conv2d, GroupNorm/LayerNorm/RMSNorm) give those
gradients, else ``vmap``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fedqr._validate import check_int_range, check_shape
from fedqr.models.cnn import PaperCNN
from fedqr.models.kernel import Kernel
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.models.losses import LossFn, per_sample_cross_entropy
from fedqr.models.model_check import check_model
from fedqr.models.per_sample import Method
from fedqr.models.torch_kernel import ModelFactory, TorchKernel, TorchOptions

__all__ = ["UserFactory", "check_model", "load_factory", "make_kernel", "mlp_factory"]

UserFactory = Callable[[tuple[int, ...], int], nn.Module]
"""A user's model: ``(input_shape, num_classes) -> nn.Module`` (input without the batch axis)."""



def seeded(factory: UserFactory, input_shape: tuple[int, ...], num_classes: int) -> ModelFactory:
    """``factory`` as a :data:`~fedqr.models.torch_kernel.ModelFactory`: the module is built
    under torch's global RNG forked and seeded from a draw of the given generator, so its
    initialisation is reproducible from the run's seed and leaves the global RNG untouched."""
    def build(generator: torch.Generator) -> nn.Module:
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return factory(input_shape, num_classes)
    return build


def mlp_factory(hidden: Sequence[int]) -> UserFactory:
    """A multilayer perceptron: flatten, then Linear-ReLU per hidden width, then Linear."""
    widths = [int(h) for h in hidden]
    if not widths or any(not 1 <= h <= 1_000_000 for h in widths):
        raise ValueError(f"hidden must list widths in [1, 1000000], got hidden={list(hidden)}")

    def build(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        layers: list[nn.Module] = [nn.Flatten()]
        width = math.prod(input_shape)
        for h in widths:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_classes))
        return nn.Sequential(*layers)
    return build


def load_factory(spec: str) -> UserFactory:
    """``FILE.py:FUNCTION`` as a callable (the file is imported as a module, its folder first
    on ``sys.path`` meanwhile, as ``python FILE.py`` has it: the modules beside it import).

    Raises
    ------
    ValueError
        Naming the file or the function when either is missing or not callable.
    """
    path_s, sep, func = spec.rpartition(":")
    path = Path(path_s)
    if not sep or not path_s.endswith(".py") or not func:
        raise ValueError(f"model must be logreg, linear, mlp, cnn or FILE.py:FUNCTION, "
                         f"got model={spec!r}")
    if not path.is_file():
        raise ValueError(f"model: the file {str(path)!r} does not exist (model={spec!r})")
    module_spec = importlib.util.spec_from_file_location(f"fedqr_user_model_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise ValueError(f"model: the file {str(path)!r} cannot be imported as Python")
    module = importlib.util.module_from_spec(module_spec)
    try:
        with _first_on_path(path.resolve().parent):
            module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:  # the user's code: reported with its file (a
        raise ValueError(f"model: the file {str(path)!r} failed to import: "  # sys.exit included)
                         f"{type(e).__name__}: {e}") from e
    fn = getattr(module, func, None)
    if isinstance(fn, nn.Module):
        raise ValueError(f"model: the file {str(path)!r}: {func!r} is a {type(fn).__name__} "
                         "instance; it must be a factory (input_shape, num_classes) -> "
                         "nn.Module, which fedqr calls for each repeat's own initialisation: "
                         "define "
                         f"def {func}(input_shape, num_classes): return ...")
    if fn is None:
        raise ValueError(f"model: the file {str(path)!r} has no function {func!r}")
    if not callable(fn):
        raise ValueError(f"model: the file {str(path)!r}: {func!r} is a {type(fn).__name__}, not a "
                         "function; it must be a factory (input_shape, num_classes) -> "
                         "nn.Module")
    factory: UserFactory = fn
    return factory


@contextlib.contextmanager
def _first_on_path(folder: Path) -> Iterator[None]:
    """``folder`` first on ``sys.path`` for the block, then that one entry taken out again:
    ``sys.path`` is left as it was (a folder already on it stays, once)."""
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # the user's code took it out itself
            sys.path.remove(entry)


def make_kernel(model: str | UserFactory | Kernel, *, input_shape: tuple[int, ...],
                num_classes: int, hidden: Sequence[int] = (64,),
                loss_fn: LossFn | None = None, options: TorchOptions | None = None) -> Kernel:
    """The kernel of a model choice.

    Parameters
    ----------
    model:
        ``"logreg"`` (softmax regression without intercept, the fused fast path), ``"linear"``
        (the same with an intercept), ``"mlp"`` (see ``hidden``),
        ``"cnn"`` (the paper's CNN, square images), ``"FILE.py:FUNCTION"`` or a callable
        ``(input_shape, num_classes) -> nn.Module``; a ready :class:`Kernel` is returned as is.
    input_shape, num_classes:
        One sample's shape (without the batch axis) and the number of classes.
    hidden:
        Hidden widths of ``mlp``.
    loss_fn:
        Per-sample loss of a torch model (default cross-entropy).
    options:
        Chunk sizes and memory format of a torch model.
    """
    input_shape = check_shape("input_shape", input_shape)
    num_classes = check_int_range("num_classes", num_classes, 1)
    if isinstance(model, nn.Module):
        raise ValueError(f"model must be a factory (input_shape, num_classes) -> nn.Module, "
                         f"not a module: got model={type(model).__name__} instance (pass "
                         "`lambda input_shape, num_classes: MyNet(...)`, so each repeat "
                         "builds its own, seeded)")
    if not isinstance(model, str) and not callable(model):
        if not all(hasattr(model, a) for a in ("attach", "init", "num_params")):
            raise ValueError("model must be 'logreg', 'linear', 'mlp', 'cnn', "
                             "'FILE.py:FUNCTION', a factory (input_shape, num_classes) -> "
                             f"nn.Module or a Kernel, got model={model!r}")
        _check_sized_for(model, input_shape=input_shape, num_classes=num_classes)
        return model
    if isinstance(hidden, str) or not all(
            isinstance(h, Integral) and not isinstance(h, bool) and h >= 1
            for h in (hidden if isinstance(hidden, Sequence) else [None])):
        raise ValueError(f"hidden must be a sequence of layer widths >= 1, e.g. (64,), "
                         f"got hidden={hidden!r}")
    if model in ("logreg", "linear"):
        if loss_fn is not None:
            raise ValueError(f"loss_fn applies to torch models; {model} trains cross-entropy")
        return LogRegKernel(num_features=math.prod(input_shape), num_classes=num_classes,
                            intercept=model == "linear")
    if loss_fn is not None and not callable(loss_fn):
        raise ValueError(f"loss_fn must be a callable (logits, y) -> one loss per row, shape "
                         f"(n,), got loss_fn={loss_fn!r}")
    build, label = _factory(model, input_shape=input_shape, num_classes=num_classes,
                            hidden=tuple(int(h) for h in hidden))
    loss = loss_fn if loss_fn is not None else per_sample_cross_entropy
    method = check_model(build, input_shape=input_shape, num_classes=num_classes, label=label,
                         loss_fn=loss)
    opts = options if options is not None else TorchOptions()
    if opts.method is Method.GHOST and method is not Method.GHOST:
        opts = dataclasses.replace(opts, method=method)
    return TorchKernel(build=build, input_shape=tuple(input_shape), num_classes=num_classes,
                       label=label, loss_fn=loss, options=opts)


def _check_sized_for(kernel: Kernel, *, input_shape: tuple[int, ...], num_classes: int) -> None:
    """``ValueError`` if a ready kernel was made for other samples or classes than the data's
    (its ``input_shape`` or ``num_features``, where it has them, and its ``num_classes``)."""
    shape = getattr(kernel, "input_shape", None)  # a torch model's
    features = getattr(kernel, "num_features", None)  # softmax regression's (flattened)
    fits = (tuple(shape) == tuple(input_shape) if shape is not None
            else features is None or features == math.prod(input_shape))
    made = tuple(shape) if shape is not None else None if features is None else (features,)
    if not fits or kernel.num_classes != num_classes:
        raise ValueError(f"model must be a kernel made for the data's samples "
                         f"(input_shape={tuple(input_shape)}) and classes "
                         f"(num_classes={num_classes}), got a kernel made for "
                         f"{'input_shape=' + str(made) if made is not None else 'its samples'} "
                         f"and num_classes={kernel.num_classes}: make it with "
                         f"make_kernel(..., input_shape={tuple(input_shape)}, "
                         f"num_classes={num_classes})")


def _factory(model: str | UserFactory, *, input_shape: tuple[int, ...], num_classes: int,
             hidden: Sequence[int]) -> tuple[ModelFactory, str]:
    if model == "cnn":
        shape = tuple(input_shape)
        if len(shape) != 3 or shape[1] != shape[2] or shape[1] % 4:
            raise ValueError(f"model cnn (the paper's CNN) needs square images (C, H, H) with H "
                             f"divisible by 4, got input shape {shape}")

        def cnn(gen: torch.Generator) -> nn.Module:
            return PaperCNN(in_channels=shape[0], image_size=shape[1], num_classes=num_classes,
                            generator=gen)
        return cnn, "cnn"
    if model == "mlp":
        return seeded(mlp_factory(hidden), input_shape, num_classes), "mlp"
    if isinstance(model, str):
        return seeded(load_factory(model), input_shape, num_classes), model.rpartition(":")[2]
    name: Any = getattr(model, "__name__", type(model).__name__)
    return seeded(model, input_shape, num_classes), str(name)
