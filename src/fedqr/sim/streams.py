"""Where a run's random numbers come from: Poisson batches and noise, per repeat or per reply.

A batched kernel (all repeats in one pass) draws every repeat's batches and noise from one
generator seeded by ``seed``; a sequential kernel gives repeat r its own generator seeded from
``(seed, r)`` (:func:`repeat_seeds`). With ``noise_seeding="per-reply"`` every reply's batch
and noise come from :func:`reply_generator`, so any process (the engine, a Flower client)
draws the same numbers for the same reply.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedqr.models.sampling import poisson_positions
from fedqr.privacy import Mechanism, NoiseMechanism, mechanism_for
from fedqr.sim.config import NoiseSeeding, SimConfig

__all__ = ["NOISE_STREAM", "SAMPLE_STREAM", "Streams", "draw_noise", "repeat_seeds",
           "reply_generator", "reply_positions"]

SAMPLE_STREAM, NOISE_STREAM = 0, 1  # the two per-reply random streams: Poisson batch, noise


def draw_noise(
    mechanism: Mechanism | NoiseMechanism, std: Tensor, num_params: int,
    generator: torch.Generator, *, param: Tensor | None = None,
) -> Tensor:
    """Per-coordinate noise of every reply, shape ``std.shape + (p,)``; ``std`` (and the
    noise parameter ``param``, default zeros: only quantising mechanisms read it) per reply."""
    spec = mechanism_for(mechanism) if isinstance(mechanism, Mechanism) else mechanism
    return spec.draw(std=std, param=param if param is not None else torch.zeros_like(std),
                     shape=(*std.shape, num_params), generator=generator)


def reply_generator(
    *, seed: int, repeat: int, round: int, client: int, stream: int,
    device: torch.device | str = "cpu",
) -> torch.Generator:
    """The generator of one reply's ``stream`` (``SAMPLE_STREAM`` or ``NOISE_STREAM``).

    Seeded from ``(seed, repeat, round, client, stream)`` through ``numpy.random.SeedSequence``.
    """
    words = np.random.SeedSequence([seed, repeat, round, client, stream]).generate_state(
        2, dtype=np.uint32)
    value = ((int(words[1]) << 32) | int(words[0])) & (2**63 - 1)
    return torch.Generator(device=device).manual_seed(value)


def reply_positions(
    size: int, *, sample_rate: float, generator: torch.Generator, device: torch.device
) -> tuple[Tensor, Tensor]:
    """Poisson batch of one reply of a client with ``size`` rows, both of shape ``(1, m)``."""
    sizes = torch.as_tensor(np.array([size], dtype=np.int64), device=device)
    return poisson_positions(sizes, sample_rate=sample_rate, generator=generator)


def repeat_seeds(seed: int, repeats: int) -> list[int]:
    """One 63-bit seed per repeat from ``numpy.random.SeedSequence(seed).spawn``: repeat r's
    seed does not depend on the number of repeats."""
    children = np.random.SeedSequence(seed).spawn(repeats)
    return [int(c.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)) for c in children]


def _pad(draws: list[list[tuple[Tensor, Tensor]]], device: torch.device) -> tuple[Tensor, Tensor]:
    """Stack ``draws[r][j] = (positions, valid)`` of shape ``(m_rj,)`` into ``(R, b, m)``."""
    m = max((p.shape[-1] for row in draws for p, _ in row), default=0)
    pos = torch.zeros(len(draws), len(draws[0]), m, dtype=torch.int64, device=device)
    valid = torch.zeros(len(draws), len(draws[0]), m, dtype=torch.bool, device=device)
    for r, row in enumerate(draws):
        for j, (p_rj, v_rj) in enumerate(row):
            pos[r, j, :p_rj.shape[-1]] = p_rj
            valid[r, j, :v_rj.shape[-1]] = v_rj
    return pos, valid


class Streams:
    """The generators of one run (see the module docstring)."""

    def __init__(self, *, config: SimConfig, device: torch.device, batched: bool) -> None:
        self.config, self.device, self.batched = config, device, batched
        self.per_reply = config.noise_seeding is NoiseSeeding.PER_REPLY
        seeds = [config.seed] if batched else repeat_seeds(config.seed, config.repeats)
        self.gens = [torch.Generator(device=device).manual_seed(s) for s in seeds]

    def _reply(self, r: int, t: int, client: int, stream: int) -> torch.Generator:
        return reply_generator(seed=self.config.seed, repeat=r, round=t, client=client,
                               stream=stream, device=self.device)

    def positions(self, sizes: np.ndarray, sel: np.ndarray, *, q: float,
                  round: int) -> tuple[Tensor, Tensor]:
        """Poisson batches of the selected clients: positions and validity, ``(R, b, m)``."""
        dev = self.device
        if self.per_reply:
            return _pad([[tuple(v[0] for v in reply_positions(
                int(sizes[c]), sample_rate=q, device=dev,
                generator=self._reply(r, round, int(c), SAMPLE_STREAM)))  # type: ignore[misc]
                for c in row] for r, row in enumerate(sel)], dev)
        if self.batched:
            return poisson_positions(torch.as_tensor(sizes[sel], device=dev), sample_rate=q,
                                     generator=self.gens[0])
        return _pad([list(zip(*poisson_positions(torch.as_tensor(sizes[row], device=dev),
                                                 sample_rate=q, generator=self.gens[r]),
                              strict=True)) for r, row in enumerate(sel)], dev)

    @property
    def draws_sums(self) -> bool:
        """Whether a round's noise is drawn for each repeat's aggregate at once
        (:meth:`noise_sum`) rather than reply by reply: with the run's generators (not
        per-reply seeding, whose point is each reply's own draw) and a mechanism closed under
        sums (Gaussian, none). The aggregate then has exactly the distribution of the sum
        of the replies' noises, at a b-th of the draws."""
        return not self.per_reply and self.config.privacy.spec.closed_under_sums

    def noise_sum(self, total_std: Tensor, num_params: int) -> Tensor:
        """The noise of each repeat's aggregate ``sum_j weights[r, j] noise_rj``,
        ``(R, num_params)``, from its std ``(R,)`` (the mechanism's ``sum_std`` of the
        weights and the replies' stds; needs :attr:`draws_sums`)."""
        spec = self.config.privacy.spec
        zero = torch.zeros_like(total_std)
        if self.batched:
            return spec.draw(std=total_std, param=zero, shape=(*total_std.shape, num_params),
                             generator=self.gens[0])
        return torch.stack([spec.draw(std=total_std[r], param=zero[r], shape=(num_params,),
                                      generator=self.gens[r])
                            for r in range(total_std.shape[0])])

    def noise(self, std: Tensor, param: Tensor, num_params: int, *, sel: np.ndarray,
              round: int) -> Tensor:
        """The noise of every reply, ``std.shape + (num_params,)``."""
        spec = self.config.privacy.spec
        if self.per_reply:
            return torch.stack([torch.stack([draw_noise(
                spec, std[r, j], num_params, self._reply(r, round, int(c), NOISE_STREAM),
                param=param[r, j]) for j, c in enumerate(row)]) for r, row in enumerate(sel)])
        if self.batched:
            return draw_noise(spec, std, num_params, self.gens[0], param=param)
        return torch.stack([draw_noise(spec, std[r], num_params, self.gens[r], param=param[r])
                            for r in range(std.shape[0])])
