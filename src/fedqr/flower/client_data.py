"""A Flower client's data and model: its rows, loaded once per process, and the run's kernel.

A simulation worker serves many clients from one build of the data recipe; a SuperNode
(:mod:`fedqr.flower.node_main`) serves one client and keeps only its shard
(:data:`KEEP_RECIPE` ``= False``). The model is the run's kernel
(:func:`fedqr.models.zoo.make_kernel`, the one the simulator's round loop trains), attached to
the client's rows; used by :mod:`fedqr.flower.client_logic`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from fedqr._atomic import write_file_atomic
from fedqr.data import Dataset, Partition
from fedqr.flower.config import FlowerRunConfig
from fedqr.models.kernel import Attached, Kernel, KernelData
from fedqr.models.logreg import Norm

# Flower's simulation keeps one worker process alive across messages: data stay here.
_DATA: dict[tuple[object, ...], ClientData] = {}
_KERNELS: dict[tuple[object, ...], Kernel] = {}
_RECIPE: dict[tuple[object, ...], tuple[Dataset, Partition]] = {}
KEEP_RECIPE = True  # False in a SuperNode process, which serves one client: keep its shard only


def run_kernel(model: str, *, input_shape: tuple[int, ...], num_classes: int,
               hidden: Sequence[int] = (64,)) -> Kernel:
    """The kernel of ``model`` (:func:`fedqr.models.zoo.make_kernel`), built and checked once
    per process."""
    from fedqr.models.zoo import make_kernel

    key = (str(model), tuple(input_shape), num_classes, tuple(hidden))
    if key not in _KERNELS:
        _KERNELS[key] = make_kernel(str(model), input_shape=tuple(input_shape),
                                    num_classes=num_classes, hidden=tuple(hidden))
    return _KERNELS[key]


def input_shape(ds: Dataset) -> tuple[int, ...]:
    """One sample's shape: the image shape, or ``(num_features,)``."""
    return tuple(ds.image_shape) if ds.image_shape else (int(ds.x_train.shape[1]),)


@dataclass(frozen=True, kw_only=True)
class ClientData:
    """A client's own training rows, and the model the run trains on them.

    ``model`` is a model choice of :func:`fedqr.models.zoo.make_kernel` (``logreg``, ``mlp``
    with ``hidden``, ``cnn``, ``FILE.py:FUNCTION``); a sample has shape ``image_shape`` when
    set, else ``(p,)``.
    """

    x: np.ndarray  # (d_i, p) float32
    y: np.ndarray  # (d_i,) int64
    num_classes: int
    image_shape: tuple[int, ...] = ()  # (C, H, W) of image data, () otherwise
    model: str = "logreg"
    hidden: tuple[int, ...] = (64,)
    _attached: dict[tuple[object, ...], Attached] = field(default_factory=dict, compare=False,
                                                          repr=False)

    @property
    def kernel(self) -> Kernel:
        """The run's kernel for these rows' shape and classes."""
        return run_kernel(self.model, input_shape=self.image_shape or (self.x.shape[1],),
                          num_classes=self.num_classes, hidden=self.hidden)

    @property
    def theta_shape(self) -> tuple[int, ...]:
        """Shape of theta_t in messages: the kernel's ``param_shape``."""
        return self.kernel.param_shape

    def attached(self, *, norm: Norm, chunk_rows: int) -> Attached:
        """The kernel bound to these rows as one client (built once per norm and chunk size).

        The client evaluates nothing: its rows stand in for the kernel's test set.
        """
        key = (norm, chunk_rows)
        if key not in self._attached:
            x = torch.as_tensor(self.x, dtype=torch.float32)
            y = torch.as_tensor(self.y, dtype=torch.int64)
            data = KernelData(x=x, y=y, offsets=np.array([0, x.shape[0]], dtype=np.int64),
                              x_test=x, y_test=y, norm=norm, chunk_rows=chunk_rows)
            self._attached[key] = self.kernel.attach(data)
        return self._attached[key]


def load_client_data(cfg: FlowerRunConfig, *, client: int,
                     cache_dir: Path | None) -> ClientData:
    """Client ``client``'s rows of the partition, cached in memory and in ``cache_dir``."""
    if not 0 <= client < cfg.num_clients:
        raise ValueError(f"partition-id must be in [0, num_clients - 1={cfg.num_clients - 1}], "
                         f"got partition-id={client}")
    key = (*cfg.data_key(), client, cfg.model_name, cfg.hidden)
    if key not in _DATA:
        name = hashlib.sha256(repr(key[:-2]).encode()).hexdigest()[:16]
        path = cache_dir / f"data-{name}.npz" if cache_dir is not None else None
        if path is not None and path.is_file():
            with np.load(path) as f:
                x, y, k, shape = (f["x"], f["y"], int(f["k"]),
                                  tuple(int(v) for v in f["shape"]))
        else:
            ds, part = _recipe(cfg)
            idx = part.indices[client]
            x, y, k, shape = ds.x_train[idx], ds.y_train[idx], ds.num_classes, tuple(
                ds.image_shape or ())
            if path is not None:
                _save_npz(path, x=x, y=y, k=np.array(k), shape=np.array(shape, dtype=np.int64))
        _DATA[key] = ClientData(x=x, y=y, num_classes=k, image_shape=shape,
                                model=cfg.model_name, hidden=cfg.hidden_widths)
    return _DATA[key]


def _recipe(cfg: FlowerRunConfig) -> tuple[Dataset, Partition]:
    """The run's data set and partition, built once per process (a simulation worker serves
    many clients: each takes its shard from memory, not from a new build)."""
    key = cfg.data_key()
    if key in _RECIPE:
        return _RECIPE[key]
    _RECIPE.clear()  # one recipe at a time
    built = cfg.load_data()
    if KEEP_RECIPE:
        _RECIPE[key] = built
    return built


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    write_file_atomic(path, lambda p: np.savez(p, **arrays))  # type: ignore[arg-type]


__all__ = ["KEEP_RECIPE", "ClientData", "input_shape", "load_client_data", "run_kernel"]
