"""pfl (Apple's pfl-research): its simulation loop, its local DP mechanisms, its central
evaluation.

How pfl is made to do the same work:

- the loop is pfl's own: ``FederatedAlgorithm.run`` with a ``SimulatedBackend`` over a
  ``FederatedDataset`` of the 10 clients (``MinimizeReuseUserSampler``: a cycle over the
  clients, i.e. round robin), cohort size b, a ``PyTorchModel`` (weight 10 x 784, no bias)
  with a central ``torch.optim.SGD`` (learning rate, weight decay 0.01), and a
  ``CentralEvaluationCallback`` evaluating the test loss over the 10,000 test rows every round;
- the algorithm is ``FederatedAveraging`` with its client part (``train_one_user``) replaced:
  pfl clips a client's whole statistics (user-level DP), it has no per-sample clipping, so the
  client computes the per-sample gradients of its batch (full 6,000 rows for Laplace, a
  Poisson(0.01) sample for Gaussian) with ``torch.func.vmap(grad)``, clips each (l1 300 /
  l2 10) and returns minus their sum as its statistics, weighted by its row count;
- the noise is pfl's: its local privacy mechanism ``pfl.privacy.LaplaceMechanism`` (scale =
  clipping bound / epsilon = 600) or ``GaussianMechanism`` (std = relative std z * clipping
  bound = 1 * 10) is the backend's postprocessor of every client's statistics. Its
  ``constrain_sensitivity`` (clipping the client's whole sum to the bound) is turned off:
  the per-sample clipping already bounds the sensitivity of the sum, and clipping the sum to
  one sample's bound would be a different algorithm;
- the server: pfl's ``FederatedAveraging.process_aggregated_statistics`` (average over the
  total weight, then the central optimizer's step with the average as the gradient).

Training metrics off: ``evaluation_frequency`` is larger than the number of rounds (pfl then
evaluates the clients' local data only before round 0, a warm-up round) and the metrics are
not sent to the platform (which would print them every round).
"""

from __future__ import annotations

from typing import Any

import torch
from workload import (
    LAPLACE_SCALE,
    LR,
    WEIGHT_DECAY,
    Case,
    RoundClock,
    Workload,
    clipped_sum,
    poisson_rows,
)


class LogReg(torch.nn.Module):
    """Softmax regression without bias, with the ``loss`` and ``metrics`` pfl requires."""

    def __init__(self, p: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(10, p))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.T

    def loss(self, x: torch.Tensor, y: torch.Tensor, eval: bool = False) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self(x), y, reduction="sum")

    @torch.no_grad()
    def metrics(self, x: torch.Tensor, y: torch.Tensor, eval: bool = True) -> dict[str, Any]:
        from pfl.metrics import Weighted

        return {"loss": Weighted(float(self.loss(x, y)), len(y))}


def run_pfl(case: Case, wl: Workload, *, rounds: int, warmup: int) -> dict[str, Any]:
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.callback.central_evaluation import CentralEvaluationCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import MinimizeReuseUserSampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics
    from pfl.model.pytorch import PyTorchModel
    from pfl.privacy import GaussianMechanism, LaplaceMechanism
    from pfl.stats import MappedVectorStatistics

    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)  # pfl draws its noise from torch's global generator

    class PerSampleClipped(FederatedAveraging):
        """FedAvg whose client returns minus its per-sample-clipped gradient sum."""

        def train_one_user(self, initial_model_state, model, user_dataset, central_context):
            x, y = user_dataset.raw_data
            rows = poisson_rows(len(y), case.q, gen)
            if rows is not None:
                x, y = x[rows], y[rows]
            theta = model.variable_map["weight"].detach()
            s = clipped_sum(theta, x, y, case)
            return MappedVectorStatistics({"weight": -s}, weight=max(len(y), 1)), Metrics()

    def no_sum_clip(self, statistics, name_formatting_fn=None, seed=None):
        return statistics, Metrics()  # the per-sample clip bounds the sum's sensitivity

    if case.mechanism == "laplace":
        mech = LaplaceMechanism(clipping_bound=case.clip, epsilon=case.clip / LAPLACE_SCALE)
    else:
        mech = GaussianMechanism(clipping_bound=case.clip,
                                 relative_noise_stddev=case.noise_param / case.clip)
    mech.constrain_sensitivity = no_sum_clip.__get__(mech)

    class Clock(TrainingProcessCallback):
        def __init__(self) -> None:
            self.clock = RoundClock(warmup=warmup)

        def on_train_begin(self, *, model):
            self.clock.start()
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            self.clock.tick()
            return False, Metrics()

    users = {str(i): [wl.x[i], wl.y[i]] for i in range(len(wl.x))}
    train = FederatedDataset.from_slices(users, MinimizeReuseUserSampler(sorted(users)))
    module = LogReg(wl.num_features)
    model = PyTorchModel(module, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(module.parameters(), lr=LR,
                                                           weight_decay=WEIGHT_DECAY))
    evaluation = CentralEvaluationCallback(Dataset([wl.x_test, wl.y_test]),
                                           NNEvalHyperParams(local_batch_size=None),
                                           frequency=1)
    clock = Clock()
    backend = SimulatedBackend(training_data=train, val_data=None, postprocessors=[mech])
    params = NNAlgorithmParams(central_num_iterations=warmup + rounds,
                               evaluation_frequency=warmup + rounds + 1,
                               train_cohort_size=case.b, val_cohort_size=None)
    PerSampleClipped().run(params, backend, model,
                           NNTrainHyperParams(local_num_epochs=1, local_learning_rate=LR,
                                              local_batch_size=None),
                           NNEvalHyperParams(local_batch_size=None),
                           callbacks=[evaluation, clock], send_metrics_to_platform=False)
    out: dict[str, Any] = clock.clock.summary()
    out["final_test_loss"] = float(torch.nn.functional.cross_entropy(
        wl.x_test @ module.weight.detach().T, wl.y_test))
    out["timed"] = ("pfl's run loop: SimulatedBackend, per-client torch.func per-sample clip "
                    f"+ sum, pfl {type(mech).__name__} noise, FedAvg aggregation + central "
                    "SGD step, CentralEvaluationCallback test loss")
    return out
