"""A plain per-client FedSGD-DPC loop (Algorithm 1 verbatim), the engine's reference.

Per-sample gradients come from autograd one client at a time; randomness is drawn through the
engine's own helpers in the engine's order, so both see the same Poisson batches and noise:
Laplace noise reply by reply, Gaussian noise as the engine draws it, once per repeat for the
aggregate, N(0, sum_j c_j^2 s_j^2) (its std computed here from the definition).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.func import grad, vmap

from fedqr.data import Dataset, Partition
from fedqr.models.sampling import poisson_positions
from fedqr.privacy import Mechanism
from fedqr.sim.budget import plan_client_privacy
from fedqr.sim.config import SimConfig
from fedqr.sim.engine import aggregation_weights, draw_noise
from fedqr.sim.schedule import make_schedule


def _sample_loss(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy((x @ theta.T).unsqueeze(0), y.unsqueeze(0))


def reference_run(ds: Dataset, part: Partition, cfg: SimConfig) -> np.ndarray:
    """Final parameters (R, k, p) of a per-client loop, float64 arithmetic."""
    n, b, r = cfg.num_clients, cfg.clients_per_round, cfg.repeats
    xs = [torch.as_tensor(ds.x_train[idx], dtype=torch.float64) for idx in part.indices]
    ys = [torch.as_tensor(ds.y_train[idx]) for idx in part.indices]
    sizes = part.sizes
    schedule = make_schedule(num_clients=n, clients_per_round=b, rounds=cfg.rounds,
                             selection=cfg.selection, repeats=r,
                             rng=np.random.default_rng(cfg.seed))
    privacy = plan_client_privacy(cfg, sizes=sizes, schedule=schedule)
    mech = cfg.privacy.mechanism
    q = cfg.privacy.sample_rate if mech is not Mechanism.LAPLACE else 1.0
    ord_ = 1 if mech is Mechanism.LAPLACE else 2
    gen = torch.Generator().manual_seed(cfg.seed)
    theta = torch.zeros(r, ds.num_classes, ds.x_train.shape[1], dtype=torch.float64)
    per_sample = vmap(grad(_sample_loss), in_dims=(None, 0, 0))
    for t in range(cfg.rounds):
        sel = schedule[:, t] if schedule.shape[0] == r else np.repeat(schedule[0, t][None], r, 0)
        batches = None
        if q < 1:
            pos, valid = poisson_positions(torch.as_tensor(sizes[sel]), sample_rate=q,
                                           generator=gen)
            batches = [[pos[a, j][valid[a, j]] for j in range(b)] for a in range(r)]
        group = privacy.group_of(r)
        std = torch.as_tensor(privacy.noise_std[group[:, None], sel], dtype=torch.float32)
        weights = aggregation_weights(cfg, sizes, sel)
        w32 = torch.as_tensor(weights, dtype=torch.float32).double()
        if mech is Mechanism.LAPLACE:  # every reply's own draw
            noise = draw_noise(mech, std, theta[0].numel(), gen).double()
        else:  # Gaussian: the aggregate's noise N(0, sum_j w_j^2 s_j^2), one draw per repeat
            total = (w32.pow(2) * std.double().pow(2)).sum(dim=1).sqrt().float()
            summed = draw_noise(mech, total, theta[0].numel(), gen).double()
            noise = torch.zeros(r, b, theta[0].numel(), dtype=torch.float64)
        new = torch.zeros_like(theta)
        for a in range(r):
            for j, i in enumerate(sel[a]):
                rows = slice(None) if batches is None else batches[a][j]
                x, y = xs[i][rows], ys[i][rows]
                gs = per_sample(theta[a], x, y)  # (m, k, p): materialised, on purpose
                norms = gs.flatten(1).norm(p=ord_, dim=1)
                scale = torch.clamp(cfg.privacy.clip / norms, max=1.0)
                g = (gs * scale[:, None, None]).sum(0) / (sizes[i] * q)
                g = g + cfg.weight_decay * theta[a]
                reply = theta[a] - cfg.lr.at(t) * (g + noise[a, j].view_as(g))
                new[a] += weights[a, j] * reply
            if mech is not Mechanism.LAPLACE:
                new[a] -= cfg.lr.at(t) * summed[a].view_as(new[a])
        theta = new
    return theta.numpy()
