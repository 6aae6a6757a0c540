"""A client that brings its own data and its own budget (``fedqr flower supernode``).

The node's settings come from its own command line (Flower's node config), never from the
server: the data file (one client's rows: :mod:`fedqr.flower.node_data`), its model (the
run's, or a model file of its own), the budget ``eps`` / ``delta`` and the state folder of its
ledger. The run (from the server) says N, b, T, the model, the mechanism, the clip, q, the
learning rate and, optionally, the epsilon it asks; a node whose budget is below what the run
asks refuses, naming its budget, and its ledger refuses any reply beyond its budget whatever
the run says.

The node's randomness (Poisson batches and noise) is seeded by its own secret seed, kept in
``<state-dir>/noise-seed`` (made once from the operating system's secure generator) and mixed
with each run's id, so that no two runs draw the same noise (two replies with the same noise
at different scales would give away the clipped gradient by their difference), unless the
node's operator fixes ``noise-seed`` to reproduce a run (then whoever knows the seed can
recompute the noise, and runs with that seed repeat it: for tests and reproduction only).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fedqr.flower.config import FlowerRunConfig, parse_widths
from fedqr.flower.node_data import NodeRows, read_node_rows

if TYPE_CHECKING:
    from fedqr.flower.client_data import ClientData
    from fedqr.flower.client_state import Budget

_DATA: dict[tuple[object, ...], ClientData] = {}


class BudgetRefused(RuntimeError):
    """The run asks more than this client's own budget."""


@dataclass(frozen=True, kw_only=True)
class NodeSettings:
    """What the client's operator set on its own machine.

    ``model`` and ``hidden`` (``""``: the run's) choose the model this node trains; a model
    file (``FILE.py:FUNCTION``) is only ever this node's own: a node never loads code the
    server names. ``client_column``, ``label_column`` and ``standardize`` say how its data file
    is read (:func:`fedqr.flower.node_data.read_node_rows`).
    """

    data_file: Path
    eps: float
    delta: float
    state_dir: Path
    client_id: int | None = None  # this client's index i in 0..N-1, or None: the server picks
    noise_seed: int | None = None  # None: the node's own secret seed
    model: str = ""
    hidden: str = ""
    client_column: str = "client"
    label_column: str = "label"
    standardize: bool = False

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
        text = {k: str(node.get(k, d)) for k, d in (("model", ""), ("hidden", ""),
                                                     ("client-column", "client"),
                                                     ("label-column", "label"))}
        return cls(data_file=Path(str(node["data-file"])), eps=float(eps), delta=float(delta),
                   state_dir=Path(str(node["state-dir"])), client_id=cid if cid >= 0 else None,
                   noise_seed=seed if seed >= 0 else None, model=text["model"],
                   hidden=text["hidden"], client_column=text["client-column"],
                   label_column=text["label-column"],
                   standardize=node.get("standardize", 0) not in (0, False, "0", "false"))

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

    def run_seed(self, run_key: str) -> int:
        """The seed of this node's randomness in run ``run_key``: its secret seed mixed with
        the run's id, so that every run draws fresh noise (two runs with the same noise would
        reveal the clipped gradient by differencing their replies, whatever their budgets). An
        operator's fixed ``noise-seed`` is used as given (reproduction only: its runs repeat
        their noise, see the module docstring)."""
        if self.noise_seed is not None:
            return self.noise_seed
        digest = hashlib.sha256(f"{self.seed()}:{run_key}".encode()).digest()
        return int.from_bytes(digest[:8], "big") >> 1  # 63 bits, as the secret

    def rows(self) -> NodeRows:
        """This node's rows, read and checked (cached)."""
        return read_node_rows(self.data_file, client_column=self.client_column,
                              label_column=self.label_column, standardize=self.standardize)


@dataclass(frozen=True, kw_only=True)
class RunModel:
    """The run's data shape and model, as the server describes them to the clients."""

    num_features: int
    num_classes: int
    image_shape: tuple[int, ...]
    model: str
    hidden: str


def node_data(settings: NodeSettings, run: RunModel) -> ClientData:
    """This node's rows and the model it trains, after checking both fit the run.

    Raises
    ------
    ValueError
        If the rows' features or labels do not fit, or the run's model is a file this node
        was not given (``--model``), or the node's model is not the run's.
    """
    rows = settings.rows()
    f = settings.data_file
    if rows.x.shape[1] != run.num_features or int(rows.y.max()) >= run.num_classes:
        raise ValueError(f"--data: {f} has p={rows.x.shape[1]} features and labels up to "
                         f"{int(rows.y.max())}; the run's model needs p={run.num_features} "
                         f"and labels in [0, {run.num_classes - 1}]")
    model = settings.model or run.model
    if not settings.model and ":" in run.model:
        raise ValueError(f"the run trains the model {run.model!r}, a Python file: a SuperNode "
                         "never loads code the server names; give this node the model with "
                         "--model FILE.py:FUNCTION (its own copy)")
    label = run.model.rpartition(":")[2]
    if model.rpartition(":")[2] != label:
        raise ValueError(f"--model {model} is not the run's model {label!r}")
    key = (str(f.resolve()), settings.client_column, settings.label_column,
           settings.standardize, model, settings.hidden or run.hidden, run)
    if key not in _DATA:
        from fedqr.flower.client_data import ClientData

        _DATA.clear()  # one client per node
        _DATA[key] = ClientData(x=rows.x, y=rows.y, num_classes=run.num_classes,
                                image_shape=run.image_shape, model=model,
                                hidden=parse_widths(settings.hidden or run.hidden))
    return _DATA[key]


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


def run_for_client(cfg: FlowerRunConfig, settings: NodeSettings, *, client: int,
                   run_key: str) -> FlowerRunConfig:
    """The run ``run_key`` as this client computes it: its budget, its seed for this run."""
    eps, delta = effective_budget(settings, cfg, client=client)
    return dataclasses.replace(cfg, eps=(eps,), delta=(delta,),
                               seed=settings.run_seed(run_key),
                               client_budgets=False)


def ledger_budget(settings: NodeSettings, budget: Budget) -> Budget:
    """The budget of this node's ledger: the node's own (eps, delta), and the client id its
    ledger was made with (the server's index for a new ledger).

    The server numbers nodes without ``client-id`` afresh in every run (in the order their
    node ids sort), and a node may be given ``client-id`` later; its state folder is bound to
    its rows (``owner.json``), so its ledger is the node's whatever number a run gives it (a
    number that changed was refused as another client's ledger, and the advice to start
    afresh would have forgotten what the node spent).
    """
    from fedqr.flower.client_state import read_state

    own = dataclasses.replace(budget, eps=settings.eps, delta=settings.delta)
    state = read_state(settings.state_dir)
    if state is not None:
        own = dataclasses.replace(own, client_id=state.ledger.client_id)
    return own


def check_budget_left(settings: NodeSettings, *, eps: float, whole: bool, run_key: str) -> None:
    """Refuse, when the clients report (before the server plans), a run this node's ledger
    cannot take beside its earlier runs (nothing is charged).

    ``whole``: the run asks every client's whole budget (no ``--eps``), which no ledger that
    spent anything can take. Otherwise, for a ledger of pure eps-DP (Laplace: budgets add up
    exactly), asking more than is left. A run already begun (a restarted node) is not
    refused here: its replies are the ledger's to check. Other accountants are checked at
    the server's check before round 0, when the run's noise is known.

    Raises
    ------
    BudgetRefused
        Saying what was spent and what the run asks.
    """
    from fedqr.flower.client_state import read_state

    state = read_state(settings.state_dir)
    if state is None or state.ledger.replies == 0 or state.answered.get(run_key):
        return
    ledger = state.ledger
    spent, left = ledger.spent()[0], ledger.spendable_eps  # None: not additive (RDP, PLD)
    if whole:
        raise BudgetRefused(
            f"client budget is eps={ledger.eps_budget:g}, of which eps={spent:.6g} was spent "
            f"in earlier runs; a run without --eps asks every client's whole budget: refused "
            f"before the plan (nothing charged); run with --eps"
            + (f" at most {left:.6g}, what is left" if left is not None and left > 0
               else " this node's ledger can still take" if left is None
               else "; nothing is left of it: this client can take part in no further run"))
    if left is not None and eps > left * (1 + 1e-12):
        raise BudgetRefused(
            f"client budget is eps={ledger.eps_budget:g}, of which eps={spent:.6g} was spent "
            f"in earlier runs; the run asks eps={eps:g}, more than the {left:.6g} left: "
            f"refused before the plan (nothing charged)")
