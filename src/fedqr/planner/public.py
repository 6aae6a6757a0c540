"""A public proxy from another source: checked against the model, split like the deployment.

A public data set (a file, or a built-in set with a class selection or label map) has its own
rows and clients, which are not the deployment's. The planner pools its training rows and
deals them to the deployment's N clients in proportion to the sizes ``d_i`` the clients
report (:func:`split_by_sizes`); the labels of a client are a uniform draw (the clients'
label counts are not released, so the split cannot mimic them). The twin then weighs every
reply by the real ``d_i`` and raises the Poisson rate to the real expected batch, as for any
proxy. A label-skewed draw of the same sizes (``label_alpha``) is one of the proxy-shift
alternatives of :mod:`fedqr.planner.shift`.

A built-in public recipe without a class selection, for a built-in deployment of the same N,
keeps the old rule: it is split by the deployment's own recipe (partition kind and alpha, a
setting of the simulation, not a client fact).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from fedqr.data import ClientData, DataSpec, Partition
from fedqr.data.source import DataSource
from fedqr.models.kernel import Kernel
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.models.torch_kernel import TorchKernel

__all__ = ["SKEW_ALPHA", "check_fits", "kernel_io", "split_by_recipe", "split_by_sizes",
           "split_like_deployment"]

SKEW_ALPHA = 0.5
"""Dirichlet concentration (times the number of classes, around the pool's class shares) of
the label-skewed proxy-shift alternatives: each client's label mix is drawn from it."""


class Shaped(Protocol):
    """Anything with a number of features and of classes (a data set)."""

    @property
    def num_features(self) -> int: ...

    @property
    def num_classes(self) -> int: ...


def kernel_io(kernel: Kernel | None) -> tuple[int, int] | None:
    """``(features, classes)`` a model takes (``None``: not known from the kernel)."""
    if isinstance(kernel, LogRegKernel):
        return kernel.num_features, kernel.num_classes
    if isinstance(kernel, TorchKernel):
        return int(np.prod(kernel.input_shape)), kernel.num_classes
    return None


CLASSES_HINT = "select or map its classes with --proxy-classes"
"""How a command line selects a proxy's classes (:func:`check_fits`'s default hint)."""
PYTHON_CLASSES_HINT = ("select or map its classes with proxy_classes='0-9' (a range, a list "
                       "'0,1,5' or a label map file), or "
                       "fedqr.data.public.select_proxy_classes(proxy, '0-9')")
"""The same in Python (``fedqr.plan(proxy=...)``)."""


def check_fits(proxy: Shaped, *, features: int, classes: int, option: str,
               what: str = "the deployment", classes_hint: str = CLASSES_HINT) -> None:
    """Raise a ``ValueError`` naming ``option`` unless the proxy (anything with
    ``num_features`` and ``num_classes``) has ``features`` features and ``classes`` classes
    (the model's input and output); ``classes_hint`` says how to select its classes."""
    if proxy.num_features != features or proxy.num_classes != classes:
        hint = (f"; {classes_hint}" if proxy.num_classes != classes
                and proxy.num_features == features else "")
        raise ValueError(
            f"{option} must have {what}'s {features} features and {classes} classes (the "
            f"model's input and output), got {proxy.num_features} features and "
            f"{proxy.num_classes} classes{hint}")


def _targets(pool_rows: int, sizes: NDArray[np.int64]) -> NDArray[np.int64]:
    """Rows of every proxy client: ``d_i`` if the pool holds them all, else scaled down."""
    n_clients = len(sizes)
    if pool_rows < n_clients:
        raise ValueError(f"the public proxy has {pool_rows} training rows, fewer than the "
                         f"deployment's {n_clients} clients: it cannot be split like it")
    total = int(sizes.sum())
    if total <= pool_rows:
        return np.asarray(sizes, dtype=np.int64)
    m: NDArray[np.int64] = np.maximum(1, np.floor(sizes * (pool_rows / total))).astype(np.int64)
    while m.sum() > pool_rows:  # the floor of one row per client can overshoot
        m[int(np.argmax(m))] -= 1
    return m


def split_by_sizes(labels: NDArray[np.int64], sizes: NDArray[np.int64], *,
                   rng: np.random.Generator, label_alpha: float | None = None) -> Partition:
    """Deal the pool's rows (their ``labels``) to ``len(sizes)`` clients of ``sizes`` rows
    (scaled down if the pool is smaller), without replacement.

    ``label_alpha=None``: uniform draws (every client gets the pool's label mix up to
    sampling). Else client i's labels follow class shares drawn from a Dirichlet of
    concentration ``label_alpha * k * p`` (``p`` the pool's class shares, ``k`` the classes);
    a class that runs out is replaced by the classes that still have rows.
    """
    m = _targets(len(labels), np.asarray(sizes, dtype=np.int64))
    if label_alpha is None:
        perm = rng.permutation(len(labels))
        cuts = np.concatenate([[0], np.cumsum(m)])
        return Partition(indices=tuple(np.sort(perm[a:b]) for a, b in pairwise(cuts)))
    classes, inverse = np.unique(labels, return_inverse=True)
    left = [list(rng.permutation(np.flatnonzero(inverse == c))) for c in range(len(classes))]
    share = np.bincount(inverse) / len(labels)
    parts: list[NDArray[np.int64]] = [np.empty(0, dtype=np.int64)] * len(m)
    for i in rng.permutation(len(m)):
        want = rng.multinomial(int(m[i]), rng.dirichlet(label_alpha * len(classes) * share))
        rows: list[int] = []
        for c in range(len(classes)):
            take = min(int(want[c]), len(left[c]))
            rows += left[c][:take]
            left[c] = left[c][take:]
        while len(rows) < m[i]:  # a class ran out: fill from those with rows left
            avail = np.array([len(v) for v in left], dtype=np.float64)
            c = int(rng.choice(len(left), p=avail / avail.sum()))
            rows.append(left[c].pop(0))
        parts[i] = np.sort(np.asarray(rows, dtype=np.int64))
    return Partition(indices=tuple(parts))


def split_by_recipe(public: DataSource, n_clients: int) -> bool:
    """Whether a public proxy keeps its recipe's split (a built-in recipe of N clients)."""
    return isinstance(public, DataSpec) and public.num_clients == n_clients


def split_like_deployment(public: DataSource, sizes: NDArray[np.int64], *, seed: int,
                          draw: int = 0, label_alpha: float | None = None
                          ) -> tuple[ClientData, dict[str, Any]]:
    """The public proxy's client data for a deployment of client sizes ``sizes``, and what
    the split used (for the plan's ``data_used``).

    ``draw`` (0: the plan's own) redraws the split (the recipe's seed, or the deal by sizes);
    ``label_alpha`` gives the clients skewed label mixes (:func:`split_by_sizes`).
    """
    n = len(sizes)
    if label_alpha is None and split_by_recipe(public, n):
        assert isinstance(public, DataSpec)  # split_by_recipe says so
        spec = public if draw == 0 else DataSpec(
            dataset=public.dataset, fraction=public.fraction, partition=public.partition,
            alpha=public.alpha, num_clients=n, seed=public.seed + draw,
            data_dir=public.data_dir)
        return spec.build(), {"by": f"the recipe of {public.dataset.value} "
                                    f"({spec.partition_kind.value}, N={n})",
                              "client_facts": ["N"]}
    pool = public.build().dataset
    part = split_by_sizes(pool.y_train, sizes, rng=np.random.default_rng([seed, 5, draw]),
                          label_alpha=label_alpha)
    used = np.concatenate(part.indices)
    labels = "uniform draw (label counts not reported)" if label_alpha is None else (
        f"skewed: Dirichlet({label_alpha:g} k p) label mix per client")
    return ClientData(dataset=pool, partition=part), {
        "by": f"the pooled public training rows ({pool.num_train}) dealt to the N={n} "
              f"clients in proportion to their reported sizes ({int(used.size)} rows used)",
        "labels": labels, "client_facts": ["N", "sizes"]}

