"""The Flower ClientApp: one FedSGD-DPC client (Message API).

``query``: the client tells the server which partition it holds (cheap: in a deployment every
message starts a fresh process, so this handler imports neither torch nor dp-accounting).
``train``: theta_t in, theta_t - eta_t (g + w) out, the ledger charged and saved first.

Node configuration (``flower-supernode --node-config``): ``partition-id`` (the client's index
i in 0..N-1, set by Flower's simulation engine itself) and, optionally, ``state-dir`` (where
this client keeps its ledger; default ``<run config state-dir>/client-<i>``) and
``data-dir``. A refusal (budget exhausted, a replayed round, a request that does not fit) is
sent back as an error reply with code :data:`REFUSED` and a message that says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp

if TYPE_CHECKING:
    from fedqr.flower.client_logic import Reply
    from fedqr.flower.config import FlowerRunConfig
    from fedqr.flower.own_data import RunModel

REFUSED = 4201
"""Error code of a reply the client refuses to send (budget, replay, bad request)."""
FAILED = 4202
"""Error code of a client that could not compute its reply (data, configuration)."""

app = ClientApp()


def _partition_id(context: Context) -> int:
    node = context.node_config
    if "partition-id" not in node:
        raise ValueError("node config must set partition-id (0..N-1), got "
                         f"node config keys {sorted(node)}")
    pid = node["partition-id"]
    if not isinstance(pid, int) or isinstance(pid, bool) or pid < 0:
        raise ValueError(f"partition-id must be an integer >= 0, got partition-id={pid!r}")
    return pid


def _settings(context: Context) -> tuple[FlowerRunConfig, int, Path]:
    from fedqr.flower.config import FlowerRunConfig

    run_config = dict(context.run_config)
    node = context.node_config
    if "data-dir" in node:
        run_config["data-dir"] = str(node["data-dir"])
    cfg = FlowerRunConfig.from_run_config(run_config)
    pid = _partition_id(context)
    if "state-dir" in node:
        state_dir = Path(str(node["state-dir"]))
    elif cfg.state_dir:
        state_dir = Path(cfg.state_dir) / f"client-{pid}"
    else:
        raise ValueError("state-dir must be set (node config state-dir, or run config "
                         "state-dir) so that the client's ledger persists, got none")
    return cfg, pid, state_dir


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _error(message: Message, code: int, exc: BaseException) -> Message:
    return Message(Error(code=code, reason=f"{type(exc).__name__}: {exc}"), reply_to=message)


@app.query()
def query(message: Message, context: Context) -> Message:
    """Which partition this node holds (or, with its own data: its size and budget); with a
    ``check`` record, whether the run fits what the client's ledger has left."""
    if "check" in message.content.config_records:
        return _check(message, context)
    if "data-file" in context.node_config:
        from fedqr.flower.own_data import BudgetRefused

        try:
            info = _own_info(message, context)
        except BudgetRefused as exc:
            return _error(message, REFUSED, exc)
        except Exception as exc:
            return _error(message, FAILED, exc)
        return Message(RecordDict({"info": info}), reply_to=message)
    try:
        pid = _partition_id(context)
    except Exception as exc:  # reported to the server, which stops with this message
        return _error(message, FAILED, exc)
    info = ConfigRecord({"partition-id": pid})
    return Message(RecordDict({"info": info}), reply_to=message)


def _run_model(message: Message) -> RunModel:
    """The run's data shape and model, as the server describes them."""
    from fedqr.flower.own_data import RunModel

    rec = message.content.config_records["model"]
    p, k, shape = rec["num-features"], rec["num-classes"], str(rec["image-shape"])
    if not isinstance(p, int) or not isinstance(k, int):
        raise ValueError(f"the server's model record must give integers, got p={p!r}, k={k!r}")
    return RunModel(num_features=p, num_classes=k,
                    image_shape=tuple(int(v) for v in shape.split(",") if v),
                    model=str(rec.get("model", "logreg")), hidden=str(rec.get("hidden", "64")))


def _own_info(message: Message, context: Context) -> ConfigRecord:
    from fedqr.flower.config import FlowerRunConfig
    from fedqr.flower.own_data import (
        NodeSettings,
        check_budget_left,
        effective_budget,
        node_data,
    )
    from fedqr.privacy.spec import unspent_budget

    settings = NodeSettings.from_node_config(context.node_config)
    if settings is None:
        raise ValueError("node config must set data-file")
    cfg = FlowerRunConfig.from_run_config(context.run_config)
    size = int(node_data(settings, _run_model(message)).x.shape[0])
    eps, delta = effective_budget(settings, cfg, client=settings.client_id)
    if unspent_budget(cfg.mechanism, "eps") is None:  # a run without noise spends none
        check_budget_left(settings, eps=eps, whole=cfg.client_budgets,
                          run_key=str(message.metadata.run_id))
    cid = -1 if settings.client_id is None else settings.client_id
    return ConfigRecord({"partition-id": cid, "num-samples": size, "eps": eps, "delta": delta,
                         "standardize": int(settings.standardize)})


def _own_run(message: Message, context: Context, *, record: str) -> dict[str, Any]:
    """A client with its own data and budget: :func:`~fedqr.flower.client_logic.answer_round`'s
    arguments but the round and model (the server's client id is in ``record``)."""
    from fedqr.flower.client_logic import client_budget
    from fedqr.flower.config import FlowerRunConfig
    from fedqr.flower.own_data import NodeSettings, ledger_budget, node_data, run_for_client

    settings = NodeSettings.from_node_config(context.node_config)
    if settings is None:
        raise ValueError("node config must set data-file")
    cfg = FlowerRunConfig.from_run_config(context.run_config)
    client = message.content.config_records[record]["client-id"]
    if not isinstance(client, int) or (settings.client_id not in (None, client)):
        raise ValueError(f"the server calls this node client {client!r}, its --client-id is "
                         f"{settings.client_id}")
    data = node_data(settings, _run_model(message))
    run_key = str(message.metadata.run_id)
    run = run_for_client(cfg, settings, client=client, run_key=run_key)
    budget = client_budget(run.sim_config(), client=client)
    own = None if budget is None else ledger_budget(settings, budget)
    return {"cfg": run, "client": client, "run_key": run_key, "state_dir": settings.state_dir,
            "data": data, "ledger_budget": own}


def _own_reply(message: Message, context: Context, rnd: int, theta: object) -> Reply:
    """One reply of a client with its own data and budget."""
    import numpy as np

    from fedqr.flower.client_logic import answer_round

    return answer_round(**_own_run(message, context, record="config"), round=rnd,
                        theta=np.asarray(theta))


def _check(message: Message, context: Context) -> Message:
    """The server's check before round 0 (:func:`~fedqr.flower.client_logic.check_run`):
    the replies the run asks of this client, or a refusal; nothing is charged."""
    from fedqr.flower.client_logic import check_run
    from fedqr.flower.own_data import BudgetRefused

    try:
        if "data-file" in context.node_config:
            asked, spent = check_run(**_own_run(message, context, record="check"))
        else:
            cfg, pid, state_dir = _settings(context)
            client = _int(message.content.config_records["check"]["client-id"])
            if client != pid:
                raise ValueError(f"the server calls this node client {client}, it holds "
                                 f"partition-id={pid}")
            asked, spent = check_run(cfg, client=pid, run_key=str(message.metadata.run_id),
                                     state_dir=state_dir)
    except BudgetRefused as exc:
        return _error(message, REFUSED, exc)
    except Exception as exc:
        return _error(message, FAILED, exc)
    return Message(RecordDict({"check": ConfigRecord({"replies": asked,
                                                      "epsilon-spent": spent})}),
                   reply_to=message)


@app.train()
def train(message: Message, context: Context) -> Message:
    """Clipped gradient, noise, ledger charged and persisted, reply theta_t - eta_t (g + w)."""
    import numpy as np
    import torch

    from fedqr.flower.client_logic import answer_round
    from fedqr.flower.client_state import ReplayRefused
    from fedqr.flower.own_data import BudgetRefused
    from fedqr.privacy import PrivacyBudgetExceeded

    torch.set_num_threads(1)  # N clients share the machine's cores
    try:
        rnd = message.content.config_records["config"]["round"]
        if not isinstance(rnd, int) or isinstance(rnd, bool):
            raise ValueError(f"round must be an integer, got round={rnd!r}")
        theta = message.content.array_records["theta"]["theta"].numpy()
        if "data-file" in context.node_config:
            pid = _int(message.content.config_records["config"]["client-id"])
            reply = _own_reply(message, context, rnd, theta)
        else:
            cfg, pid, state_dir = _settings(context)
            reply = answer_round(cfg, client=pid, round=rnd, theta=np.asarray(theta),
                                 run_key=str(message.metadata.run_id), state_dir=state_dir)
    except (PrivacyBudgetExceeded, ReplayRefused, BudgetRefused) as exc:
        return _error(message, REFUSED, exc)
    except Exception as exc:
        return _error(message, FAILED, exc)
    metrics = MetricRecord({
        "partition-id": pid, "round": rnd, "num-samples": reply.num_samples, "rows": reply.rows,
        "clipped-fraction": reply.clipped_fraction, "grad-norm": reply.grad_norm,
        "noise-std": reply.noise_std, "epsilon-spent": reply.epsilon_spent,
        "replies-charged": reply.replies_charged,
    })
    content = RecordDict({"theta": ArrayRecord({"theta": Array(reply.theta)}),
                          "metrics": metrics})
    return Message(content, reply_to=message)
