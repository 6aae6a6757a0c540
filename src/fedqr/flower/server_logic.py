"""The server's side of FedSGD-DPC, without Flower: schedule, aggregation, metrics, result.

:class:`ServerRun` holds theta_t and everything ``result.json`` needs; the Flower ServerApp
only moves messages. Missing replies: a selected client whose reply does not arrive within the
round's timeout (its node died, its message was lost) is counted as having sent back the model
it was sent, ``theta^i = theta_t``; the aggregation rule and every other client's weight stay
as Algorithm 1 has them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedqr.data import Dataset, Partition
from fedqr.flower.client_data import input_shape, run_kernel
from fedqr.flower.config import FlowerRunConfig
from fedqr.models.kernel import Attached, Kernel, KernelData
from fedqr.sim.budget import ClientPrivacy, plan_client_privacy
from fedqr.sim.config import SimConfig
from fedqr.sim.loop import aggregation_weights
from fedqr.sim.provenance import model_record, provenance
from fedqr.sim.result import RoundMetrics, SimResult
from fedqr.sim.schedule import make_schedule


def server_dataset(cfg: FlowerRunConfig) -> Dataset:
    """What the server of a run whose clients bring their own rows evaluates on: the built-in
    data set, or the test file ``test_data`` (then its rows are both splits, and no training
    objective is reported)."""
    if not cfg.test_data:
        return cfg.data_spec().load()
    from fedqr.flower.node_data import read_node_rows

    rows = read_node_rows(Path(cfg.test_data), option="--test-data",
                          client_column=cfg.client_column, label_column=cfg.label_column,
                          standardize=cfg.standardize, one_client=False)
    k = rows.num_classes if rows.num_classes is not None else max(int(rows.y.max()) + 1, 2)
    return Dataset(name=rows.name, x_train=rows.x, y_train=rows.y, x_test=rows.x,
                   y_test=rows.y, num_classes=k,
                   image_shape=rows.input_shape if len(rows.input_shape) == 3 else None)


def _kernel_data(ds: Dataset, part: Partition, sim: SimConfig) -> KernelData:
    """The server's rows as the round loop lays them out (:func:`fedqr.sim.loop.kernel_data`:
    training rows sorted by client), for a partition of any number of clients."""
    order = np.concatenate(part.indices)
    return KernelData(
        x=torch.as_tensor(ds.x_train[order], dtype=torch.float32),
        y=torch.as_tensor(ds.y_train[order], dtype=torch.int64),
        offsets=np.concatenate([[0], np.cumsum(part.sizes)]).astype(np.int64),
        x_test=torch.as_tensor(ds.x_test, dtype=torch.float32),
        y_test=torch.as_tensor(ds.y_test, dtype=torch.int64),
        norm=sim.privacy.spec.norm, chunk_rows=sim.chunk_rows)


class FlowerRunError(RuntimeError):
    """The run cannot go on (a client refused, too few replies, clients missing)."""


def nodes_standardize(cfg: FlowerRunConfig) -> bool:
    """Whether the SuperNodes must standardise their rows (``fedqr flower supernode
    --standardize``): where the server standardises its ``--test-data`` file by its own
    statistics. A server evaluating on a built-in set (standardised by its fixed mean and
    std) or on a ``--no-standardize`` test file needs rows scaled as given."""
    return bool(cfg.test_data) and cfg.standardize


def check_node_scaling(cfg: FlowerRunConfig, standardized: list[bool | None]) -> None:
    """Every SuperNode prepares its rows as the server evaluates (and plans on) them.

    ``standardized``: each client's ``--standardize`` as its node reported it (``None``: not
    reported). A model trained on rows of another scale than the test set's is evaluated
    (and a plan made on a proxy of another scale) at the wrong scale, silently: on three
    heart-disease hospitals, raw node features under a standardised test set gave a test
    loss of 0.611 against 0.551 (docs/deployment.md).

    Raises
    ------
    FlowerRunError
        Naming the clients whose setting differs and the options that agree.
    """
    want = nodes_standardize(cfg)
    off = [i for i, s in enumerate(standardized) if s is not None and s != want]
    if not off:
        return
    if cfg.test_data:
        server = ("standardises --test-data by its own statistics" if want else
                  "reads --test-data as given (--no-standardize)")
        fix = ("start them with --standardize, or fedqr flower run with --no-standardize"
               if want else "start them without --standardize, or fedqr flower run without "
               "--no-standardize")
    else:
        server = (f"evaluates on the built-in {cfg.dataset.value}, standardised by its fixed "
                  f"mean and std")
        fix = ("start them without --standardize, their files scaled as the built-in set "
               "(docs/deployment.md, 'The clients')")
    given = "--standardize" if not want else "--no-standardize (the default)"
    raise FlowerRunError(
        f"the SuperNodes of clients {off} read their rows with {given} while the server "
        f"{server}: the model would be trained on another scale than it is evaluated "
        f"(and planned) on; {fix}")


@dataclass(frozen=True, kw_only=True)
class ClientReply:
    """A reply as the server received it."""

    client: int
    theta: np.ndarray  # (k, p) float32
    rows: int
    clipped_fraction: float
    grad_norm: float
    epsilon_spent: float


@dataclass(frozen=True, kw_only=True)
class ClientReports:
    """What clients with their own data told the server: their sizes and budgets, by index."""

    sizes: tuple[int, ...]
    eps: tuple[float, ...]
    delta: tuple[float, ...]


@dataclass(kw_only=True)
class ServerRun:
    """theta_t, the schedule and the record of one Flower run."""

    cfg: FlowerRunConfig
    sim: SimConfig
    dataset: Dataset
    sizes: np.ndarray
    schedule: np.ndarray  # (T, b)
    privacy: ClientPrivacy
    theta: torch.Tensor  # (1, *kernel.param_shape): (1, k, p) for logistic regression
    kernel: Kernel
    model: Attached  # the kernel bound to the server's evaluation rows
    train_rows: bool = True  # whether the server holds training rows (else: no objective)
    history: list[RoundMetrics] = field(default_factory=list)
    stats: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (2, 1, N): clipped, sampled
    reported_eps: list[float] = field(default_factory=list)
    missing: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def start(cls, cfg: FlowerRunConfig, *, reported: ClientReports | None = None,
              dataset: Dataset | None = None) -> ServerRun:
        """Load the data, fix the schedule and every client's noise, and theta_0 (the kernel's
        initial parameters for repeat 0, as the round loop draws them).

        ``reported``: the sizes and budgets the clients reported (clients with their own
        data); then ``dataset`` (loaded when ``None``) only evaluates the model.
        """
        if reported is not None:
            cfg = dataclasses.replace(cfg, eps=reported.eps, delta=reported.delta,
                                      client_budgets=False)
            ds = dataset if dataset is not None else server_dataset(cfg)
            sizes = np.asarray(reported.sizes, dtype=np.int64)
            part = Partition(indices=(np.arange(ds.num_train, dtype=np.int64),))
        else:
            ds, part = cfg.load_data()
            sizes = np.asarray(part.sizes, dtype=np.int64)
        sim = cfg.sim_config()
        schedule = make_schedule(num_clients=sim.num_clients,
                                 clients_per_round=sim.clients_per_round, rounds=sim.rounds,
                                 selection=sim.selection, repeats=1,
                                 rng=np.random.default_rng(sim.seed))
        kernel = run_kernel(cfg.model_name, input_shape=input_shape(ds),
                            num_classes=ds.num_classes, hidden=cfg.hidden_widths)
        privacy = plan_client_privacy(sim, sizes=sizes, schedule=schedule,
                                      num_params=kernel.num_params)
        theta = kernel.init(repeats=1, generator=torch.Generator().manual_seed(sim.seed))
        data = _kernel_data(ds, part, sim)
        return cls(cfg=cfg, sim=sim, dataset=ds, sizes=sizes, schedule=schedule[0],
                   privacy=privacy, theta=theta.view(1, *kernel.param_shape), kernel=kernel,
                   model=kernel.attach(data), train_rows=not cfg.server_test_only,
                   stats=np.zeros((3, 1, sim.num_clients)),
                   rows=np.zeros((2, 1, sim.num_clients)),
                   reported_eps=[0.0] * sim.num_clients)

    def selected(self, t: int) -> list[int]:
        """P_t, the clients of round t (round robin)."""
        return [int(c) for c in self.schedule[t]]

    def theta_numpy(self) -> np.ndarray:
        """theta_t, shape (k, p) (or (P,) for a torch model), as sent to the clients."""
        return self.theta[0].numpy().copy()

    def record(self, t: int) -> RoundMetrics:
        """Test loss and accuracy, training objective and spent epsilon of theta_t."""
        flat = self.theta.view(1, -1)
        loss, acc = self.model.test_metrics(flat)
        train = self.model.train_objective(flat, None, sel=None,
                                           weight_decay=self.sim.weight_decay)
        metrics = RoundMetrics(round=t, test_loss=loss, test_accuracy=acc,
                               train_loss=train if self.train_rows else None,
                               epsilon_spent=[self._spent_eps()])
        self.history.append(metrics)
        return metrics

    def _spent_eps(self) -> list[float | None]:
        """Per client: the larger of the server's count of received replies and the client's
        own report (which also counts replies charged but lost on the way)."""
        server = self.privacy.ledgers.spent_eps()[0]
        return [None if s is None else max(s, self.reported_eps[i])
                for i, s in enumerate(server)]

    def apply_round(self, t: int, *, replies: dict[int, ClientReply],
                    lost: dict[int, str]) -> None:
        """theta_{t+1} = sum_i c_i theta^i over P_t, theta^i = theta_t for a lost reply.

        Raises
        ------
        FlowerRunError
            If fewer than ``min_replies`` replies arrived.
        """
        sel = self.selected(t)
        if len(replies) < self.cfg.min_replies:
            raise FlowerRunError(
                f"round {t}: {len(replies)} of {len(sel)} replies arrived, fewer than "
                f"min_replies={self.cfg.min_replies}; lost: {lost}")
        flat = self.theta.view(1, 1, -1)
        rows = []
        for c in sel:
            if c in replies:
                rows.append(torch.as_tensor(replies[c].theta, dtype=torch.float32).view(1, 1, -1))
                self._account(c, replies[c])
            else:
                rows.append(flat)
                self.missing.append({"round": t, "client": c, "reason": lost.get(c, "no reply")})
        stacked = torch.cat(rows, dim=1)  # (1, b, k p)
        weights = aggregation_weights(self.sim, self.sizes, np.array([sel]))
        c_t = torch.as_tensor(weights, dtype=torch.float32)
        if self.kernel.batched:  # the round loop's product for this kernel (sim.loop)
            self.theta = torch.bmm(c_t.unsqueeze(1), stacked).view(self.theta.shape)
        else:
            self.theta = (c_t[0] @ stacked[0]).view(self.theta.shape)

    def _account(self, c: int, reply: ClientReply) -> None:
        ledger, event = self.privacy.ledgers.ledgers[0][c], self.privacy.ledgers.events[0][c]
        if ledger is not None and event is not None and not ledger.would_exceed(event):
            ledger.charge(event)  # the server's own count of what it received
        self.reported_eps[c] = max(self.reported_eps[c], reply.epsilon_spent)
        std = float(self.privacy.noise_std[0, c])
        p = self.theta[0].numel()
        self.stats[0, 0, c] += reply.clipped_fraction
        self.rows[:, 0, c] += (reply.clipped_fraction * reply.rows, reply.rows)  # pooled
        self.stats[1, 0, c] += reply.grad_norm / (std * math.sqrt(p)) if std > 0 else math.inf
        self.stats[2, 0, c] += 1

    def result(self) -> dict[str, Any]:
        """The ``result.json`` document of ``fedqr run``, plus a ``flower`` section."""
        res = SimResult.build(config=self.sim, dataset=self.dataset, sizes=self.sizes,
                              setup_privacy=self.privacy, history=self.history,
                              stats=self.stats, theta=self.theta.numpy(), rows=self.rows)
        doc = res.to_json()
        final_eps = self._spent_eps()
        for i, client in enumerate(doc["clients"]):
            client["epsilon_spent"] = final_eps[i]
            client["per_repeat"]["epsilon_spent"] = [final_eps[i]]  # one repeat
            client["replies_received"] = int(self.stats[2, 0, i])
        run_config = self.cfg.to_run_config()
        if self.cfg.own_data:  # a built-in recipe's options are not the run's: not recorded
            for key in ("dataset", "data-dir", "fraction", "partition", "alpha"):
                run_config.pop(key, None)
        doc["flower"] = {"run_config": run_config, "missing_replies": self.missing}
        doc["provenance"] = provenance(model=model_record(self.kernel), device="cpu")
        if self.cfg.data_file:  # what fedqr run --data records of the file
            from fedqr.data.source import OwnData

            doc["data"] = OwnData(data=self.cfg.federated(), seed=self.cfg.seed).identity()
        return doc
