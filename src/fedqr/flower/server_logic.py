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
from typing import Any

import numpy as np
import torch

from fedqr.data import Dataset
from fedqr.flower.config import FlowerRunConfig
from fedqr.models.factory import ModelSpec, build_model, flat_parameters, model_for
from fedqr.models.logreg_pass import evaluate
from fedqr.sim.budget import ClientPrivacy, plan_client_privacy
from fedqr.sim.config import SimConfig
from fedqr.sim.engine import aggregation_weights
from fedqr.sim.network_parts import NetworkOptions, evaluate_model, load_flat, place_model
from fedqr.sim.provenance import provenance
from fedqr.sim.result import RoundMetrics, SimResult
from fedqr.sim.schedule import make_schedule


class FlowerRunError(RuntimeError):
    """The run cannot go on (a client refused, too few replies, clients missing)."""


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
    theta: torch.Tensor  # (1, k, p) for logistic regression, (1, P) for a torch model
    model: ModelSpec
    network: torch.nn.Module | None = None  # the torch model theta is loaded into, if any
    history: list[RoundMetrics] = field(default_factory=list)
    stats: np.ndarray = field(default_factory=lambda: np.zeros(0))
    reported_eps: list[float] = field(default_factory=list)
    missing: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def start(cls, cfg: FlowerRunConfig, *, reported: ClientReports | None = None,
              dataset: Dataset | None = None) -> ServerRun:
        """Load the data, fix the schedule and every client's noise, theta_0 = 0.

        ``reported``: the sizes and budgets the clients reported (clients with their own
        data); then ``dataset`` (loaded when ``None``) only evaluates the model.
        """
        if reported is not None:
            cfg = dataclasses.replace(cfg, eps=reported.eps, delta=reported.delta,
                                      client_budgets=False)
            ds = dataset if dataset is not None else cfg.data_spec().load()
            sizes = np.asarray(reported.sizes, dtype=np.int64)
        else:
            ds, part = cfg.load_data()
            sizes = np.asarray(part.sizes, dtype=np.int64)
        sim = cfg.sim_config()
        schedule = make_schedule(num_clients=sim.num_clients,
                                 clients_per_round=sim.clients_per_round, rounds=sim.rounds,
                                 selection=sim.selection, repeats=1,
                                 rng=np.random.default_rng(sim.seed))
        spec = model_for(ds)
        privacy = plan_client_privacy(sim, sizes=sizes, schedule=schedule,
                                      num_params=spec.num_params)
        network = None
        if spec.is_network:  # theta_0 as the network engine draws it for repeat 0
            init = build_model(spec.name, dataset=ds,
                               generator=torch.Generator().manual_seed(sim.seed))
            theta = flat_parameters(init).unsqueeze(0)
            network = place_model(init, torch.device("cpu"),
                                  channels_last=NetworkOptions().channels_last)
        else:
            theta = torch.zeros(1, ds.num_classes, ds.x_train.shape[1], dtype=torch.float32)
        return cls(cfg=cfg, sim=sim, dataset=ds, sizes=sizes, schedule=schedule[0],
                   privacy=privacy, theta=theta, model=spec, network=network,
                   stats=np.zeros((3, 1, sim.num_clients)),
                   reported_eps=[0.0] * sim.num_clients)

    def selected(self, t: int) -> list[int]:
        """P_t, the clients of round t (round robin)."""
        return [int(c) for c in self.schedule[t]]

    def theta_numpy(self) -> np.ndarray:
        """theta_t, shape (k, p) (or (P,) for a torch model), as sent to the clients."""
        return self.theta[0].numpy().copy()

    def record(self, t: int) -> RoundMetrics:
        """Test loss and accuracy, training objective and spent epsilon of theta_t."""
        ds = self.dataset
        loss, correct = self._evaluate(ds.x_test, ds.y_test)
        train, _ = self._evaluate(ds.x_train, ds.y_train)
        reg = 0.5 * self.sim.weight_decay * float(self.theta.double().pow(2).sum())
        metrics = RoundMetrics(
            round=t, test_loss=[loss / len(ds.y_test)],
            test_accuracy=[correct / len(ds.y_test)],
            train_loss=[train / len(ds.y_train) + reg],
            epsilon_spent=[self._spent_eps()])
        self.history.append(metrics)
        return metrics

    def _evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
        """Summed cross-entropy and correct predictions of theta_t on ``(x, y)``."""
        xt, yt = torch.as_tensor(x), torch.as_tensor(y)
        if self.network is None:
            loss, correct = evaluate(xt, yt, self.theta, chunk_rows=self.sim.chunk_rows)
            return float(loss[0]), int(correct[0])
        opts = NetworkOptions()
        load_flat(self.network, self.theta[0])
        shape = self.dataset.image_shape or (self.dataset.num_features,)
        return evaluate_model(self.network, xt.view(-1, *shape), yt, chunk_rows=opts.eval_rows,
                              channels_last=opts.channels_last)

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
        if self.network is None:  # the operation of the engine that trains this model
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
        self.stats[1, 0, c] += reply.grad_norm / (std * math.sqrt(p)) if std > 0 else math.inf
        self.stats[2, 0, c] += 1

    def result(self) -> dict[str, Any]:
        """The ``result.json`` document of ``fedqr run``, plus a ``flower`` section."""
        res = SimResult.build(config=self.sim, dataset=self.dataset, sizes=self.sizes,
                              setup_privacy=self.privacy, history=self.history,
                              stats=self.stats, theta=self.theta.numpy())
        doc = res.to_json()
        final_eps = self._spent_eps()
        for i, client in enumerate(doc["clients"]):
            client["epsilon_spent"] = final_eps[i]
            client["per_repeat"]["epsilon_spent"] = [final_eps[i]]  # one repeat
            client["replies_received"] = int(self.stats[2, 0, i])
        doc["flower"] = {"run_config": self.cfg.to_run_config(), "missing_replies": self.missing}
        doc["provenance"] = provenance(model=self.model, device="cpu")
        return doc
