"""The run configuration of the Flower app: the ``[tool.flwr.app.config]`` table.

Flower hands a run configuration to the ServerApp and every ClientApp as a flat mapping of
kebab-case keys to ``bool | int | float | str``. :class:`FlowerRunConfig` is that mapping as a
validated, frozen value object; :meth:`FlowerRunConfig.sim_config` is the equivalent
:class:`~fedqr.sim.config.SimConfig` (one repeat, round robin, per-reply seeding), so the
Flower run and the in-process engine run the same experiment.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from fedqr.data import Dataset, DatasetName, DataSpec, FederatedData, Partition, PartitionKind
from fedqr.data.presets import default_model_name
from fedqr.flower.run_values import parse_floats, parse_value, parse_widths
from fedqr.privacy import Accountant, Mechanism, mechanism_for
from fedqr.sim.config import (
    Aggregation,
    EvalTrain,
    LearningRate,
    NoiseSeeding,
    PrivacyConfig,
    Selection,
    SimConfig,
)

RunConfigValue = bool | int | float | str
__all__ = ["FlowerRunConfig", "RunConfigValue", "parse_floats", "parse_widths"]


@dataclass(frozen=True, kw_only=True)
class FlowerRunConfig:
    """One FedSGD-DPC run on Flower (N clients, b replies per round, T rounds).

    Attributes
    ----------
    num_clients, clients_per_round, rounds:
        N, b, T. Clients are chosen round robin (Algorithm 1).
    dataset, data_dir, fraction:
        Data set, folder searched first (``""``: fedqr's default search, ``$FEDQR_DATA``) and
        the stratified share of its training set used (``1.0``: all).
    partition, alpha:
        How the training set is split into N clients, seeded by ``seed``.
    data_file, test_data, test_share, client_column, label_column, standardize:
        Your own federated data instead of ``dataset``, as ``fedqr run --data`` reads it (a
        ``.npz``, ``.csv`` or ``.parquet`` file, an absolute path; ``test_share`` ``0``: none):
        the server and every client read it alike, each client keeps its own rows. With
        ``client_data`` (the clients bring their rows), ``test_data`` alone is the server's
        test set (standardised by its own statistics with ``standardize``).
    model, hidden:
        ``logreg``, ``linear``, ``mlp`` (hidden widths ``hidden``, e.g. ``"64,32"``), ``cnn`` or
        ``FILE.py:FUNCTION``; ``""``: the data set's paper model (:mod:`fedqr.data.presets`).
    mechanism, eps, delta, clip, sample_rate, accountant:
        Client-side privacy, as in ``fedqr run``; ``eps`` and ``delta`` hold one value or N.
    lr, lr_decay, weight_decay, aggregation:
        eta_t = lr / (1 + lr_decay t), L2 regularisation, server combination rule.
    seed:
        Seeds partition and every reply's Poisson batch and noise, per reply
        ``(seed, round, client)``, so a Flower run reproduces the engine's trajectory.
    round_timeout:
        Seconds the server waits for a round's replies; a reply still missing then is lost.
    connect_timeout:
        Seconds the server waits for all N clients to connect before round 0.
    min_replies:
        The run stops with an error when a round gets fewer replies than this (1..b).
    client_data:
        The clients bring their own data and budgets (``fedqr flower supernode --data``): the
        server's data set only evaluates the model and fixes its shape, and the sizes and
        budgets are what the clients report.
    client_budgets:
        With ``client_data``: every client spends its own budget (``eps`` and ``delta`` are
        then unused); otherwise ``eps`` and ``delta`` are what the run asks, and a client
        whose budget is smaller refuses.
    survey:
        With ``client_data``: only ask the clients for their sizes and budgets (written to
        ``reports.json`` in ``out_dir``) and train nothing; ``fedqr flower run --rounds auto``
        plans from them.
    state_dir:
        Folder of the clients' ledgers (``client-<i>`` per client) unless a node's own
        ``state-dir`` node config says otherwise.
    out_dir:
        Where the ServerApp writes ``result.json`` and ``model.npz`` (or ``error.json``).
    """

    num_clients: int = 10
    clients_per_round: int = 10
    rounds: int = 10
    dataset: DatasetName = DatasetName.MNIST
    data_dir: str = ""
    fraction: float = 1.0
    partition: PartitionKind = PartitionKind.TWO_DIGITS
    alpha: float = 0.5
    data_file: str = ""
    test_data: str = ""
    test_share: float = 0.0
    client_column: str = "client"
    label_column: str = "label"
    standardize: bool = True
    model: str = ""
    hidden: str = "64"
    mechanism: Mechanism = Mechanism.GAUSSIAN
    eps: tuple[float, ...] = (1.0,)
    delta: tuple[float, ...] = (1e-5,)
    clip: float = 10.0
    sample_rate: float = 0.01
    accountant: Accountant = Accountant.RDP
    lr: float = 0.05
    lr_decay: float = 0.01
    weight_decay: float = 0.01
    aggregation: Aggregation = Aggregation.PAPER
    seed: int = 0
    round_timeout: float = 120.0
    connect_timeout: float = 120.0
    min_replies: int = 1
    client_data: bool = False
    client_budgets: bool = False
    survey: bool = False
    state_dir: str = ""
    out_dir: str = ""

    def __post_init__(self) -> None:
        if not 0 < self.fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got fraction={self.fraction}")
        if not self.alpha > 0 or math.isinf(self.alpha):
            raise ValueError(f"alpha must be > 0 and finite, got alpha={self.alpha}")
        for name in ("round_timeout", "connect_timeout"):
            value = getattr(self, name)
            if not value > 0 or math.isinf(value):
                raise ValueError(f"{name} must be > 0 and finite, got {name}={value}")
        self._check_data()
        self.sim_config()  # N, b, T, privacy and learning rate, checked by SimConfig
        if not 1 <= self.min_replies <= self.clients_per_round:
            raise ValueError(f"min_replies must be in [1, clients_per_round="
                             f"{self.clients_per_round}], got min_replies={self.min_replies}")

    def sim_config(self) -> SimConfig:
        """The in-process engine's configuration of the same experiment."""
        return SimConfig(
            num_clients=self.num_clients, clients_per_round=self.clients_per_round,
            rounds=self.rounds, selection=Selection.ROUND_ROBIN, aggregation=self.aggregation,
            lr=LearningRate(eta0=self.lr, decay=self.lr_decay), weight_decay=self.weight_decay,
            privacy=PrivacyConfig(mechanism=self.mechanism, eps=self.eps, delta=self.delta,
                                  clip=self.clip, sample_rate=self.sample_rate,
                                  # the one that accounts it (Laplace: pure), as fedqr run's
                                  accountant=mechanism_for(self.mechanism).accountant(
                                      self.accountant) or self.accountant),
            repeats=1, seed=self.seed, eval_every=1, noise_seeding=NoiseSeeding.PER_REPLY,
            train_eval=EvalTrain.NONE if self.server_test_only else EvalTrain.EVERY)

    def _check_data(self) -> None:
        if not 0 <= self.test_share < 1:
            raise ValueError(f"test_share must be in (0, 1) (0: none), got "
                             f"test_share={self.test_share}")
        if self.test_share and not self.data_file:
            raise ValueError(f"test_share needs a data file (--data), got test_share="
                             f"{self.test_share}")
        if self.test_share and self.test_data:
            raise ValueError("give a test file (test_data) or test_share, not both")
        if self.client_data and self.data_file:
            raise ValueError("the clients bring their own rows (fedqr flower supernode --data): "
                             "the server holds none; give it a test set with --test-data, got "
                             f"--data {self.data_file}")
        parse_widths(self.hidden)

    @property
    def own_data(self) -> bool:
        """Whether the run's data are a file (``data_file``, or the server's ``test_data``)."""
        return bool(self.data_file or self.test_data)

    @property
    def server_test_only(self) -> bool:
        """Whether the server holds a test set only (clients with their own rows and
        ``test_data``): it evaluates no training objective."""
        return self.client_data and bool(self.test_data)

    @property
    def model_name(self) -> str:
        """The model trained: ``model``, or the paper's for the data set (a file: ``linear``)."""
        return self.model or default_model_name(None if self.own_data else self.dataset)

    @property
    def hidden_widths(self) -> tuple[int, ...]:
        """``hidden`` as widths."""
        return parse_widths(self.hidden)

    def to_run_config(self) -> dict[str, RunConfigValue]:
        """The ``[tool.flwr.app.config]`` table (kebab-case keys)."""
        doc: dict[str, RunConfigValue] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = ",".join(repr(v) for v in value)
            elif isinstance(value, StrEnum):
                value = value.value
            elif isinstance(value, float) and math.isinf(value):
                value = "inf"  # the none mechanism's clip: TOML and JSON carry no infinity
            doc[f.name.replace("_", "-")] = value
        return doc

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> FlowerRunConfig:
        """Parse Flower's run configuration; missing keys take their defaults.

        Raises
        ------
        ValueError
            Naming the key, the allowed values and the value given.
        """
        known = {f.name.replace("_", "-"): f for f in dataclasses.fields(cls)}
        unknown = sorted(set(run_config) - set(known))
        if unknown:
            raise ValueError(f"run config keys must be among {sorted(known)}, got {unknown}")
        kwargs: dict[str, Any] = {}
        for key, value in run_config.items():
            name = known[key].name
            default = getattr(cls, name, None)
            kwargs[name] = parse_value(key, value, default)
        return cls(**kwargs)

    def data_spec(self) -> DataSpec:
        """The run's data recipe (the same as ``fedqr run`` with these options)."""
        return DataSpec(dataset=self.dataset, fraction=self.fraction, partition=self.partition,
                        alpha=self.alpha, num_clients=self.num_clients, seed=self.seed,
                        data_dir=Path(self.data_dir) if self.data_dir else None)

    def federated(self) -> FederatedData:
        """The data file as ``fedqr run --data`` reads it with these options and seed."""
        return FederatedData.from_file(
            Path(self.data_file), client_column=self.client_column,
            label_column=self.label_column, test_path=self.test_data or None,
            test_share=self.test_share or None, standardize=self.standardize, seed=self.seed)

    def load_data(self) -> tuple[Dataset, Partition]:
        """The data set and its partition, exactly as every client and the server see them.

        Raises
        ------
        ValueError
            If the data file's clients are not ``num_clients``.
        """
        if self.data_file:
            own = self.federated()
            if own.num_clients != self.num_clients:
                raise ValueError(f"num_clients must match the clients of --data "
                                 f"({own.num_clients}), got num_clients={self.num_clients}")
            data = own.to_client_data()
        else:
            data = self.data_spec().build()
        return data.dataset, data.partition

    def data_key(self) -> tuple[object, ...]:
        """What the clients' rows depend on (a data file by its path, size and time)."""
        key: tuple[object, ...] = (self.dataset.value, self.data_dir, self.fraction, self.seed,
                                   self.partition.value, self.alpha, self.num_clients)
        if self.data_file:
            files = tuple((p, os.stat(p).st_size, os.stat(p).st_mtime_ns)
                          for p in (self.data_file, self.test_data) if p)
            key += (files, self.test_share, self.client_column, self.label_column,
                    self.standardize)
        return key
