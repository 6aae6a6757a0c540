"""The bar a trained model must clear: the test loss of predicting the label frequencies.

The plan's ``useful`` compares the predicted loss with the untrained model's (``log k`` for
softmax regression from zero). On imbalanced labels that bar is low: a model can beat the
uniform prediction and still lose to a constant that predicts each class with its frequency
(UCI Adult: 75% of the test labels are one class). The plan therefore also reports the test
cross-entropy of that constant,

    L_prior = - (1 / n_test) sum_j log f(y_j),

with ``f`` the deployment's label frequencies as the twin's proxy estimates them: each proxy
row of client i stands for ``d_i / m_i`` of the client's rows (the share the proxy drew, or the
public rows dealt to it), and every class gets half a row more (Krichevsky-Trofimov), so a
class the proxy never saw has a finite loss. It is evaluated on the twin's test rows, where the
prediction is. The frequencies are read from the proxy's labels: for a clear proxy that is
the clients' data read without privacy (as the twin reads it), for a public proxy the public
rows' labels, which may differ from the clients' (the plan says which).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from torch import Tensor

from fedqr.planner.twin_data import Proxy
from fedqr.planner.twin_kernel import KernelProxy

__all__ = ["IMBALANCED", "label_prior_loss", "prior_note", "proxy_prior_loss"]

SMOOTHING = 0.5
"""Rows added to every class count (Krichevsky-Trofimov): a class no proxy row holds keeps a
finite loss."""

IMBALANCED = 0.9
"""Labels count as imbalanced where predicting their frequencies has at most this share of
the test loss of predicting every class alike (UCI Adult, 75% of one class: 0.5576 / 0.6931
= 0.80 in ``fedqr plan --data adult.npz``; classes of equal shares: 1)."""


def label_prior_loss(*, y: Tensor, offsets: NDArray[np.int64], real_sizes: NDArray[np.int64],
                     y_test: Tensor, num_classes: int) -> float:
    """Test cross-entropy of predicting the deployment's label frequencies.

    Parameters
    ----------
    y:
        The proxy's training labels, sorted by client (client i: ``offsets[i]:offsets[i+1]``).
    offsets:
        ``(N + 1,)`` row offsets of the proxy's clients.
    real_sizes:
        ``d_i`` of the deployment's clients: client i's proxy rows are weighted ``d_i / m_i``.
    y_test:
        The labels the twin evaluates on.
    num_classes:
        k.

    Returns
    -------
    float
        ``- mean_j log f(y_test_j)``; ``nan`` without test rows.
    """
    labels = y.detach().cpu().numpy().astype(np.int64)
    m: NDArray[np.int64] = np.diff(np.asarray(offsets, dtype=np.int64)).astype(np.int64)
    if len(m) != len(real_sizes):
        raise ValueError(f"offsets give {len(m)} clients, real_sizes {len(real_sizes)}")
    per_row = np.repeat(np.asarray(real_sizes, dtype=np.float64) / np.maximum(m, 1), m)
    counts = np.bincount(labels, weights=per_row, minlength=num_classes)[:num_classes]
    scale = float(counts.sum()) / max(len(labels), 1)  # weighted rows per proxy row
    freq = (counts + SMOOTHING * scale) / (counts.sum() + SMOOTHING * scale * num_classes)
    test = y_test.detach().cpu().numpy().astype(np.int64)
    if len(test) == 0:
        return math.nan
    return float(-np.log(freq[test]).mean())


def proxy_prior_loss(proxy: Proxy | KernelProxy) -> float:
    """:func:`label_prior_loss` of a twin's proxy (the logistic or the kernel twin's)."""
    if isinstance(proxy, Proxy):
        lay = proxy.layout
        return label_prior_loss(y=lay.y, offsets=lay.offsets, real_sizes=proxy.real_sizes,
                                y_test=proxy.y_test, num_classes=lay.num_classes)
    data = proxy.data
    return label_prior_loss(y=data.y, offsets=data.offsets, real_sizes=proxy.real_sizes,
                            y_test=data.y_test, num_classes=proxy.kernel.num_classes)


def prior_note(predicted: float, prior: float, *, public: bool, model: str = "",
               uniform: float = math.nan, margin: float = 0.0) -> str:
    """The plan message's note on the label frequencies: where the predicted loss does not
    beat them, that it does not; where it beats them by less than ``margin`` (a share of the
    prior's loss: the plan's own usefulness margin), that it does so barely; for ``model``
    ``logreg``, which has no intercept and so cannot learn them, also where they are
    imbalanced (:data:`IMBALANCED` of ``uniform``, the loss of predicting every class alike),
    that ``linear`` has one. Empty otherwise, or where there is no prior."""
    if not math.isfinite(prior):
        return ""
    source = "the public proxy's labels" if public else "the proxy's labels"
    if predicted < prior:
        barely = (f"; it beats predicting the label frequencies (estimated from {source}: a "
                  f"test loss of {prior:.4f}) by only {1 - predicted / prior:.1%}, less than "
                  f"{margin:.0%}: within what the twin can tell, the trained model may learn "
                  f"no more than the class shares" if predicted >= (1 - margin) * prior
                  else "")
        if model != "logreg" or not prior < IMBALANCED * uniform:
            return barely
        return barely + (f"; the labels are imbalanced (predicting their frequencies has a "
                         f"test loss of {prior:.4f}, every class alike {uniform:.4f}) and "
                         f"logreg has no intercept to learn them: --model linear "
                         f"(model='linear'), softmax regression with one, may do better")
    other = ("another model may: logreg has no intercept, so it cannot learn the label "
             "frequencies; --model linear (model='linear') is softmax regression with one"
             if model == "logreg" else "another model may")
    return (f"; but predicting the label frequencies (estimated from {source}) has a test "
            f"loss of {prior:.4f}, no higher: this model, trained under this budget, does "
            f"not beat that constant (a larger budget, a smaller clip or {other})")
