"""A Flower client's data and model: its rows, loaded once per process, and the run's network.

A simulation worker serves many clients from one build of the data recipe; a SuperNode
(:mod:`fedqr.flower.node_main`) serves one client and keeps only its shard
(:data:`KEEP_RECIPE` ``= False``). Used by :mod:`fedqr.flower.client_logic`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedqr._atomic import write_file_atomic
from fedqr.data import Dataset, Partition
from fedqr.flower.config import FlowerRunConfig
from fedqr.models.factory import ModelName, build_network, default_model
from fedqr.sim.network_parts import NetworkOptions, place_model

# Flower's simulation keeps one worker process alive across messages: data stay here.
_DATA: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, int, tuple[int, ...]]] = {}
_MODELS: dict[tuple[object, ...], torch.nn.Module] = {}
_RECIPE: dict[tuple[object, ...], tuple[Dataset, Partition]] = {}
KEEP_RECIPE = True  # False in a SuperNode process, which serves one client: keep its shard only


@dataclass(frozen=True, kw_only=True)
class ClientData:
    """A client's own training rows, and the model the run trains on them."""

    x: np.ndarray  # (d_i, p) float32
    y: np.ndarray  # (d_i,) int64
    num_classes: int
    image_shape: tuple[int, ...] = ()  # (C, H, W) of image data, () otherwise
    model: ModelName = ModelName.LOGREG

    @property
    def theta_shape(self) -> tuple[int, ...]:
        """Shape of theta_t: ``(k, p)`` for logistic regression, ``(P,)`` flat otherwise."""
        if self.model is ModelName.LOGREG:
            return (self.num_classes, self.x.shape[1])
        return (num_params(self),)


def load_client_data(cfg: FlowerRunConfig, *, client: int,
                     cache_dir: Path | None) -> ClientData:
    """Client ``client``'s rows of the partition, cached in memory and in ``cache_dir``."""
    if not 0 <= client < cfg.num_clients:
        raise ValueError(f"partition-id must be in [0, num_clients - 1={cfg.num_clients - 1}], "
                         f"got partition-id={client}")
    key = (cfg.dataset.value, cfg.data_dir, cfg.fraction, cfg.seed, cfg.partition.value,
           cfg.alpha, cfg.num_clients, client)
    if key not in _DATA:
        name = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        path = cache_dir / f"data-{name}.npz" if cache_dir is not None else None
        if path is not None and path.is_file():
            with np.load(path) as f:
                _DATA[key] = (f["x"], f["y"], int(f["k"]), tuple(int(v) for v in f["shape"]))
        else:
            ds, part = _recipe(cfg)
            idx = part.indices[client]
            shape = tuple(ds.image_shape or ())
            _DATA[key] = (ds.x_train[idx], ds.y_train[idx], ds.num_classes, shape)
            if path is not None:
                _save_npz(path, x=_DATA[key][0], y=_DATA[key][1], k=np.array(ds.num_classes),
                          shape=np.array(shape, dtype=np.int64))
    x, y, k, shape = _DATA[key]
    return ClientData(x=x, y=y, num_classes=k, image_shape=shape,
                      model=default_model(cfg.dataset))


def _recipe(cfg: FlowerRunConfig) -> tuple[Dataset, Partition]:
    """The run's data set and partition, built once per process (a simulation worker serves
    many clients: each takes its shard from memory, not from a new build)."""
    key = (cfg.dataset.value, cfg.data_dir, cfg.fraction, cfg.seed, cfg.partition.value,
           cfg.alpha, cfg.num_clients)
    if key in _RECIPE:
        return _RECIPE[key]
    _RECIPE.clear()  # one recipe at a time
    built = cfg.load_data()
    if KEEP_RECIPE:
        _RECIPE[key] = built
    return built


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    write_file_atomic(path, lambda p: np.savez(p, **arrays))  # type: ignore[arg-type]


def num_params(data: ClientData) -> int:
    return sum(p.numel() for p in client_model(data).parameters())


def client_model(data: ClientData) -> torch.nn.Module:
    """The run's torch model (built once per process), placed as the network engine does."""
    key = (data.model, data.image_shape, data.num_classes)
    if key not in _MODELS:
        model = build_network(data.model, image_shape=data.image_shape or None,
                              num_classes=data.num_classes, generator=None)
        _MODELS[key] = place_model(model, torch.device("cpu"),
                                   channels_last=NetworkOptions().channels_last)
    return _MODELS[key]


__all__ = ["KEEP_RECIPE", "ClientData", "client_model", "load_client_data", "num_params"]
