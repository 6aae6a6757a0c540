"""A client that brings its own data and its own budget (``fedqr flower supernode``).

The node's settings come from its own command line (Flower's node config), never from the
server: the data file (``.npz`` with ``x`` ``(n, p)`` float and ``y`` ``(n,)`` int), the
budget ``eps`` / ``delta`` and the state folder of its ledger. The run (from the server)
says N, b, T, the mechanism, the clip, q, the learning rate and, optionally, the epsilon it
asks; a node whose budget is below what the run asks refuses, naming its budget, and its
ledger refuses any reply beyond its budget whatever the run says.

The node's randomness (Poisson batches and noise) is seeded by its own secret seed, kept in
``<state-dir>/noise-seed`` (made once from the operating system's secure generator), unless
the node's operator fixes ``noise-seed`` to reproduce a run (then whoever knows the seed can
recompute the noise: for tests and reproduction only).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedqr.flower.config import FlowerRunConfig

_CACHE: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray]] = {}


class BudgetRefused(RuntimeError):
    """The run asks more than this client's own budget."""


@dataclass(frozen=True, kw_only=True)
class NodeSettings:
    """What the client's operator set on its own machine."""

    data_file: Path
    eps: float
    delta: float
    state_dir: Path
    client_id: int | None = None  # this client's index i in 0..N-1, or None: the server picks
    noise_seed: int | None = None  # None: the node's own secret seed

    @classmethod
    def from_node_config(cls, node: Mapping[str, object]) -> NodeSettings | None:
        """The settings in Flower's node config, ``None`` for a node without ``data-file``."""
        if "data-file" not in node:
            return None
        for key in ("eps", "delta", "state-dir"):
            if key not in node:
                raise ValueError(f"node config with data-file must set {key}, got keys "
                                 f"{sorted(node)}")
        cid, seed = node.get("client-id", -1), node.get("noise-seed", -1)
        if not isinstance(cid, int) or not isinstance(seed, int):
            raise ValueError(f"client-id and noise-seed must be integers, got "
                             f"client-id={cid!r}, noise-seed={seed!r}")
        eps, delta = node["eps"], node["delta"]
        if not isinstance(eps, int | float) or not isinstance(delta, int | float):
            raise ValueError(f"eps and delta must be numbers, got eps={eps!r}, delta={delta!r}")
        return cls(data_file=Path(str(node["data-file"])), eps=float(eps), delta=float(delta),
                   state_dir=Path(str(node["state-dir"])), client_id=cid if cid >= 0 else None,
                   noise_seed=seed if seed >= 0 else None)

    def seed(self) -> int:
        """The node's noise seed: fixed by its operator, or its own secret (made once)."""
        if self.noise_seed is not None:
            return self.noise_seed
        path = self.state_dir / "noise-seed"
        if not path.is_file():
            self.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(str(secrets.randbits(63)))
        return int(path.read_text().strip())


def load_data_file(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``x`` (float32, ``(n, p)``) and ``y`` (int64, ``(n,)``) of a client's ``.npz`` file.

    Raises
    ------
    ValueError
        Naming the file and what is wrong with it.
    """
    try:
        stat = path.stat()
    except OSError:
        raise ValueError(f"--data: no such file: {path}") from None
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key in _CACHE:
        return _CACHE[key]
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {name: np.asarray(f[name]) for name in f.files if name in ("x", "y")}
            names = sorted(f.files)
    except (OSError, EOFError, ValueError, AttributeError) as e:  # not an npz (zip) file
        raise ValueError(f"--data: {path} is not a NumPy .npz file ({e})") from None
    if "x" not in arrays or "y" not in arrays:
        raise ValueError(f"--data: {path} must hold arrays 'x' and 'y', got {names}")
    x, y = arrays["x"], arrays["y"]
    if x.ndim != 2 or y.ndim != 1 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise ValueError(f"--data: {path} must hold x of shape (n, p) and y of shape (n,) with "
                         f"n >= 1, got x.shape={x.shape}, y.shape={y.shape}")
    if not np.issubdtype(x.dtype, np.number) or not np.isfinite(x).all():
        raise ValueError(f"--data: x in {path} must be finite numbers, got dtype {x.dtype}")
    if not np.issubdtype(y.dtype, np.integer) or int(y.min()) < 0:
        raise ValueError(f"--data: y in {path} must be integer labels >= 0, got dtype "
                         f"{y.dtype}, min {y.min()}")
    _CACHE[key] = (np.ascontiguousarray(x, dtype=np.float32), y.astype(np.int64))
    return _CACHE[key]


def check_fits(settings: NodeSettings, *, num_features: int, num_classes: int) -> int:
    """The number of rows, after checking the data fit the run's model."""
    x, y = load_data_file(settings.data_file)
    if x.shape[1] != num_features or int(y.max()) >= num_classes:
        raise ValueError(f"--data: {settings.data_file} has p={x.shape[1]} features and labels "
                         f"up to {int(y.max())}; the run's model needs p={num_features} and "
                         f"labels in [0, {num_classes - 1}]")
    return int(x.shape[0])


def effective_budget(settings: NodeSettings, cfg: FlowerRunConfig, *,
                     client: int | None) -> tuple[float, float]:
    """The (eps, delta) this client spends on the run: what the run asks, within its budget.

    Raises
    ------
    BudgetRefused
        If the run asks more than the client's own budget.
    """
    if cfg.client_budgets:
        return settings.eps, settings.delta
    i = 0 if len(cfg.eps) == 1 or client is None else client
    eps, delta = cfg.eps[min(i, len(cfg.eps) - 1)], cfg.delta[min(i, len(cfg.delta) - 1)]
    if eps > settings.eps * (1 + 1e-12) or delta > settings.delta * (1 + 1e-12):
        raise BudgetRefused(f"client budget is eps={settings.eps:g}, delta={settings.delta:g}; "
                            f"the run asks eps={eps:g}, delta={delta:g}: refused")
    return eps, delta


def run_for_client(cfg: FlowerRunConfig, settings: NodeSettings, *,
                   client: int) -> FlowerRunConfig:
    """The run as this client computes it: its budget, its seed."""
    eps, delta = effective_budget(settings, cfg, client=client)
    return dataclasses.replace(cfg, eps=(eps,), delta=(delta,), seed=settings.seed(),
                               client_budgets=False)

