"""Flower: the client-side work of a Flower ClientApp and the server's strategy, in-process.

What is timed per round, all in this process:

1. the server side builds one TRAIN ``Message`` per selected client carrying theta in an
   ``ArrayRecord`` (Flower serialises the array into bytes) and a ``ConfigRecord``, as a
   ServerApp does;
2. the ``ClientApp``'s ``@app.train()`` handler is called on each message, as Flower's
   runtime calls it on a node: it decodes theta, computes the per-sample gradients of its
   batch (the full 6,000 rows for Laplace; a Poisson(0.01) sample for Gaussian) with
   ``torch.func.vmap(grad)``, clips each (l1 300 / l2 10), sums, adds the noise (Laplace /
   Gaussian) and replies with the noisy sum in an ``ArrayRecord`` and its row count in a
   ``MetricRecord``;
3. Flower's ``FedAvg.aggregate_train`` averages the replies (weighted by row count), the
   server steps theta (weight decay, learning rate) and evaluates the test loss over the
   10,000 test rows (a server-side evaluate function, as ``FedAvg.start(evaluate_fn=...)``).

Not timed: the transport (gRPC, or the simulation runtime's in-memory link state and its
worker pool), process start-up. Flower's own DP wrappers (``LocalDpMod``,
``DifferentialPrivacyClientSideFixedClipping``) clip a client's whole model update (user-level
DP, Gaussian noise only), not every sample's gradient, so the clipping and noise are the
ClientApp's own torch code, as a Flower user writes it. Flower's INFO log lines (one per
aggregation) are turned off.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from workload import (
    LR,
    WEIGHT_DECAY,
    Case,
    RoundClock,
    Workload,
    add_noise,
    clipped_sum,
    poisson_rows,
    selected,
    test_loss,
)


def run_flower(case: Case, wl: Workload, *, rounds: int, warmup: int) -> dict[str, Any]:
    from flwr.app import (
        Array,
        ArrayRecord,
        ConfigRecord,
        Context,
        Message,
        MessageType,
        MetricRecord,
        RecordDict,
    )
    from flwr.clientapp import ClientApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.supercore.task_identity import TaskIdentity

    logging.getLogger("flwr").setLevel(logging.ERROR)
    # what a ServerApp process has set by its runtime before it creates messages
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    gen = torch.Generator().manual_seed(0)
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        i = int(context.node_config["partition-id"])
        theta = torch.from_numpy(msg.content["arrays"]["theta"].numpy())
        x, y = wl.x[i], wl.y[i]
        rows = poisson_rows(len(y), case.q, gen)
        if rows is not None:
            x, y = x[rows], y[rows]
        d = max(len(y), 1)
        noisy = add_noise(clipped_sum(theta, x, y, case), case, gen) / d
        # the reply: the client's noisy mean gradient; FedAvg weights it by "num-examples"
        content = RecordDict({"arrays": ArrayRecord({"theta": Array(noisy.numpy())}),
                              "metrics": MetricRecord({"num-examples": d})})
        return Message(content, reply_to=msg)

    contexts = [Context(run_id=1, node_id=i + 1, node_config={"partition-id": i},
                        state=RecordDict(), run_config={}) for i in range(len(wl.x))]
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=1,
                      min_available_nodes=1)
    theta = np.zeros((10, wl.num_features), dtype=np.float32)
    clock = RoundClock(warmup=warmup)
    clock.start()
    for t in range(warmup + rounds):
        th = torch.from_numpy(theta)
        test_loss(th, wl)  # server-side evaluation of theta_t, every round
        replies = []
        for i in selected(t, case.b):
            msg = Message(RecordDict({"arrays": ArrayRecord({"theta": Array(theta)}),
                                      "config": ConfigRecord({"server-round": t + 1})}),
                          dst_node_id=i + 1, message_type=MessageType.TRAIN)
            replies.append(app(msg, contexts[i]))
        arrays, _ = strategy.aggregate_train(t + 1, replies)
        if arrays is None:
            raise RuntimeError(f"Flower's FedAvg aggregated no reply in round {t + 1}")
        g = torch.from_numpy(arrays["theta"].numpy())  # the row-weighted mean gradient
        theta = (th - LR * (g + WEIGHT_DECAY * th)).numpy()
        clock.tick()
    out: dict[str, Any] = clock.summary()
    out["final_test_loss"] = test_loss(torch.from_numpy(theta), wl)
    out["timed"] = ("in-process, no transport: server builds TRAIN Messages, ClientApp train "
                    "handler (torch.func per-sample grads, clip, sum, noise), "
                    "FedAvg.aggregate_train, server step, test loss")
    return out
