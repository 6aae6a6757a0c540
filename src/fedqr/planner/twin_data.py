"""The twin's data: a proxy of each client's rows on the device, with the deployment's real
client sizes (what :mod:`fedqr.planner.twin` trains on), and its rows in the products'
format (:mod:`fedqr._precision`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from fedqr._precision import Products, products_of, twin_products
from fedqr.data import ClientData, Dataset, Partition
from fedqr.models.logreg import Norm
from fedqr.models.logreg_kernel import design_rows
from fedqr.models.logreg_pass import ClientLayout, client_layout
from fedqr.models.sparse_rows import SparseCache

__all__ = ["MIN_PROXY_ROWS", "Proxy", "make_proxy", "proxy_rows"]

MIN_PROXY_ROWS = 16
"""Fewest proxy rows of a client (all of them if it has fewer)."""


@dataclass(frozen=True)
class Proxy:
    """Client-sorted proxy rows on the device, and the deployment's real client sizes."""

    layout: ClientLayout
    x_test: Tensor
    y_test: Tensor
    proxy_sizes: NDArray[np.int64]  # m_i
    real_sizes: NDArray[np.int64]  # d_i
    norm: Norm
    test_sparse: SparseCache | None = None  # the test rows as CSR where that pays
    x_products: Tensor | None = None  # the rows in bfloat16 for the Poisson products, or None

    @property
    def products(self) -> Products:
        """The float format of the twin's products (:mod:`fedqr._precision`)."""
        return Products.FLOAT32 if self.x_products is None else Products.BFLOAT16

    @property
    def num_params(self) -> int:
        """k p of the logistic regression (p counts the intercept's column, if any)."""
        return int(self.layout.num_classes * self.layout.x.shape[1])


def proxy_rows(partition: Partition, *, share: float,
               rng: np.random.Generator) -> tuple[NDArray[np.int64], ...]:
    """A random ``share`` of every client's rows (at least :data:`MIN_PROXY_ROWS`)."""
    rows = []
    for idx in partition.indices:
        m = min(len(idx), max(MIN_PROXY_ROWS, math.ceil(share * len(idx))))
        rows.append(np.sort(rng.choice(idx, size=m, replace=False)).astype(np.int64))
    return tuple(rows)


def make_proxy(train: ClientData, *, rows: tuple[NDArray[np.int64], ...], test: Dataset,
               real_sizes: NDArray[np.int64], norm: Norm, device: torch.device,
               products: Products | str | None = None, intercept: bool = False) -> Proxy:
    """The twin's data: client i trains on ``train`` rows ``rows[i]``; evaluation on ``test``;
    ``products``: the products' format (default: :func:`fedqr._precision.twin_products`; a
    GPU always multiplies in float32); ``intercept``: the rows of softmax regression with
    an intercept (the model ``linear``: a column of ones appended, see
    :func:`~fedqr.models.logreg_kernel.design_rows`)."""
    ds = train.dataset
    order = np.concatenate(rows)
    sizes = np.array([len(r) for r in rows], dtype=np.int64)
    x = design_rows(torch.as_tensor(ds.x_train[order], dtype=torch.float32, device=device),
                    intercept=intercept)
    y = torch.as_tensor(ds.y_train[order], dtype=torch.int64, device=device)
    layout = client_layout(x, y, offsets=np.concatenate([[0], np.cumsum(sizes)]),
                           num_classes=ds.num_classes, norm=norm)
    x_test = design_rows(torch.as_tensor(test.x_test, dtype=torch.float32, device=device),
                         intercept=intercept)
    chosen = (products_of(products, name="products") if products is not None else None) \
        or twin_products()
    bf16 = device.type == "cpu" and chosen is Products.BFLOAT16
    return Proxy(layout=layout, x_test=x_test,
                 y_test=torch.as_tensor(test.y_test, dtype=torch.int64, device=device),
                 proxy_sizes=sizes, real_sizes=np.asarray(real_sizes, dtype=np.int64),
                 norm=norm,
                 test_sparse=SparseCache.of(x_test, [(0, x_test.shape[0])], transpose=False),
                 x_products=x.to(torch.bfloat16) if bf16 else None)
