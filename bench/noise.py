"""Benchmark: ms to draw one round of Laplace and Gaussian noise (R repeats x b replies x p).

Compares fedqr's samplers with the obvious alternatives on the paper's MNIST round shape
(10 repeats, b = 5 replies, p = 7,840 coordinates), checking each draw's variance first:

- ``fedqr-laplace``: :func:`fedqr.privacy.sample_laplace` (difference of two -log(1 - U)
  with float64 uniforms, cast to the scale's dtype);
- ``exponential_``: the difference of two ``Tensor.exponential_`` draws (fedqr's sampler
  before this benchmark);
- ``torch.distributions.Laplace``: its reparameterised inverse-CDF ``rsample``;
- ``fedqr-gaussian``: :func:`fedqr.privacy.sample_gaussian`, for scale.

``--twin``: the twin's summed Laplace noise of one group of ``--replies`` equal replies
(:func:`fedqr.planner.noise_sums.unit_sums`, ``sqrt(Gamma(n)) Z`` with a vectorised
Marsaglia-Tsang gamma, float32) against the same law drawn with torch's gamma sampler
(``torch._standard_gamma`` and ``randn`` in float64, planner version 18), on ``--repeats``
repeats x ``--params`` coordinates (3 x 50,890: a round of MNIST's 784-64-10 MLP; 3 x 7,840:
logistic regression), checking each one's variance first.

    python bench/noise.py [--threads 2] [--repeats 10] [--replies 5] [--reps 30]
    python bench/noise.py --twin [--repeats 3] [--params 50890] [--replies 1]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import torch
from _timing import best_seconds  # bench/ is on sys.path when run as a script

from fedqr.privacy import sample_gaussian, sample_laplace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--replies", type=int, default=5)
    ap.add_argument("--params", type=int, default=7840)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--twin", action="store_true", help="the twin's grouped Laplace sums")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.twin:
        twin(args)
        return
    shape = (args.repeats, args.replies, args.params)
    scale = torch.full((args.repeats, args.replies, 1), 2.0)
    gen = torch.Generator().manual_seed(0)

    def exponential() -> torch.Tensor:
        e = torch.empty((2, *shape))
        e.exponential_(generator=gen)
        return scale * (e[0] - e[1])

    laplace = torch.distributions.Laplace(torch.zeros(()), torch.tensor(2.0))
    methods: dict[str, tuple[Callable[[], torch.Tensor], float]] = {
        "fedqr-laplace": (lambda: sample_laplace(scale, shape, generator=gen), 2 * math.sqrt(2)),
        "exponential_": (exponential, 2 * math.sqrt(2)),
        "torch.distributions.Laplace": (lambda: laplace.rsample(shape), 2 * math.sqrt(2)),
        "fedqr-gaussian": (lambda: sample_gaussian(scale, shape, generator=gen), 2.0),
    }
    n = math.prod(shape)
    print(f"{n:,} draws per round ({args.threads} threads)")
    for name, (f, std) in methods.items():
        got = float(f().double().std())
        if abs(got / std - 1) > 0.02:
            raise SystemExit(f"{name}: std {got:.4f}, expected {std:.4f}")
        ms = 1e3 * best_seconds(f, args.reps)
        print(f"{name:>28}: {ms:7.2f} ms  ({1e6 * ms / n:5.1f} ns per draw)")


def twin(args: argparse.Namespace) -> None:
    """The twin's grouped Laplace sums by both samplers (module docstring)."""
    from fedqr.planner.noise_sums import unit_sums

    gen = torch.Generator().manual_seed(0)
    counts = torch.tensor([args.replies])
    shape = (args.repeats, 1, args.params)

    def torch_gamma() -> torch.Tensor:
        alpha = torch.full(shape, float(args.replies), dtype=torch.float64)
        gamma = torch._standard_gamma(alpha, generator=gen)
        z = torch.randn(shape, generator=gen, dtype=torch.float64)
        return gamma.sqrt_().mul_(z).float()

    methods = {"unit_sums (vectorised)": lambda: unit_sums(
        counts, repeats=args.repeats, num_params=args.params, generator=gen),
        "torch._standard_gamma (v18)": torch_gamma}
    n = math.prod(shape)
    print(f"{n:,} draws per round, {args.replies} replies per group ({args.threads} threads)")
    for name, f in methods.items():  # the std checked on a million draws or more
        got = float(torch.cat([f().flatten() for _ in range(-(-10**6 // n))]).double().std())
        if abs(got / math.sqrt(args.replies) - 1) > 0.02:
            raise SystemExit(f"{name}: std {got:.4f}, expected {math.sqrt(args.replies):.4f}")
        ms = 1e3 * best_seconds(f, args.reps)
        print(f"{name:>28}: {ms:7.2f} ms  ({1e6 * ms / n:5.1f} ns per draw)")


if __name__ == "__main__":
    main()
