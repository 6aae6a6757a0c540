"""Opacus: one FedSGD-DPC round = for each selected client, Opacus' per-sample gradients of the
summed cross-entropy of its batch, clipped per sample, summed, noised; the server averages and
steps; the test loss over the 10,000 test rows.

How Opacus is made to do the same work:

- the model is an ``opacus.GradSampleModule`` around ``nn.Linear(784, 10, bias=False)`` with
  ``loss_reduction="sum"``: one forward and backward of a client's batch gives its per-sample
  gradients ``weight.grad_sample`` (B x 10 x 784), Opacus' own hooks (its DP-SGD path);
- Gaussian: the batch is drawn by Opacus' Poisson sampler (``UniformWithReplacementSampler``,
  q = 0.01, the sampler of its ``DPDataLoader``; its indices select the rows directly instead
  of going through a DataLoader's per-row collation) and Opacus' ``DPOptimizer.pre_step()``
  clips every per-sample gradient to l2 norm 10, sums them and adds N(0, (z * 10)^2) noise
  (``loss_reduction="sum"``: no division); the optimizer's own step is not taken (the server
  does the step), ``p.grad`` is the client's reply;
- Laplace: Opacus has neither an l1 clip nor Laplace noise, so the per-sample gradients from
  its hooks are clipped to l1 norm 300 and summed here, as Opacus' ``clip_and_accumulate``
  does for l2 (norms, clamp(clip / norm, max=1), einsum), and Laplace noise is added by hand
  (``workload.add_noise``); each client's full batch (6,000 rows) goes through in one pass.
"""

from __future__ import annotations

from typing import Any

import torch
from workload import Case, RoundClock, Workload, add_noise, selected, server_step, test_loss


def run_opacus(case: Case, wl: Workload, *, rounds: int, warmup: int) -> dict[str, Any]:
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler

    gen = torch.Generator().manual_seed(0)
    gsm = GradSampleModule(torch.nn.Linear(wl.num_features, 10, bias=False),
                           loss_reduction="sum")
    weight = gsm._module.weight
    with torch.no_grad():
        weight.zero_()
    opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=0.0), noise_multiplier=1.0,
                      max_grad_norm=case.clip, expected_batch_size=None,
                      loss_reduction="sum", generator=gen)
    samplers = [iter(()) for _ in wl.x]  # per client, Opacus' Poisson sampler (Gaussian)

    def batch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if case.q >= 1.0:
            return wl.x[i], wl.y[i]
        idx = next(samplers[i], None)
        if idx is None:  # the sampler yields 1/q batches: start a new one
            samplers[i] = iter(UniformWithReplacementSampler(
                num_samples=len(wl.y[i]), sample_rate=case.q, generator=gen))
            idx = next(samplers[i])
        return wl.x[i][idx], wl.y[i][idx]

    def reply(i: int) -> tuple[torch.Tensor, int]:
        x, y = batch(i)
        opt.zero_grad(set_to_none=True)  # clears grad, grad_sample and summed_grad
        if len(y) == 0:  # an empty Poisson batch: the reply is noise alone
            return add_noise(torch.zeros_like(weight), case, gen), 0
        loss = torch.nn.functional.cross_entropy(gsm(x), y, reduction="sum")
        loss.backward()
        if case.mechanism == "gaussian":
            opt.pre_step()  # Opacus: l2 clip per sample, sum, Gaussian noise -> p.grad
            return weight.grad.detach().clone(), len(y)
        gs = weight.grad_sample  # (B, 10, p): Opacus' per-sample gradients
        norms = gs.flatten(1).norm(p=1, dim=1)
        scale = torch.clamp(case.clip / (norms + 1e-6), max=1.0)
        return add_noise(torch.einsum("i,ijk->jk", scale, gs), case, gen), len(y)

    clock = RoundClock(warmup=warmup)
    clock.start()
    for t in range(warmup + rounds):
        test_loss(weight.detach(), wl)  # theta_t's test loss, every round
        replies = [reply(i) for i in selected(t, case.b)]
        with torch.no_grad():
            weight.copy_(server_step(weight.detach(), [r for r, _ in replies],
                                     [d for _, d in replies]))
        clock.tick()
    out: dict[str, Any] = clock.summary()
    out["final_test_loss"] = test_loss(weight.detach(), wl)
    out["timed"] = ("the whole round in one process: Opacus GradSampleModule per-sample "
                    "gradients, " + ("DPOptimizer.pre_step (l2 clip, sum, Gaussian noise)"
                                     if case.mechanism == "gaussian" else
                                     "l1 clip + sum + Laplace noise by hand")
                    + ", server step, test loss")
    return out
