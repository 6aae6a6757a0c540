"""The twin a plan simulates: which data it trains on (:class:`ProxyChoice`), and its proxy
for the scenario's model (:func:`build_twin`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from fedqr.data import ClientData
from fedqr.data.source import DataSource
from fedqr.models.kernel import Kernel
from fedqr.models.logreg_kernel import LogRegKernel
from fedqr.models.per_sample import Method
from fedqr.models.torch_kernel import TorchKernel
from fedqr.planner.budget import (
    DEFAULT_BUDGET_MAX_S,
    CostModel,
    TwinSize,
    default_budget_s,
    raised_budget_s,
    size_twin,
)
from fedqr.planner.kernels import for_twin, forward_flops, scenario_kernel
from fedqr.planner.public import PYTHON_CLASSES_HINT, check_fits, split_like_deployment
from fedqr.planner.scenario import DataUse, Scenario
from fedqr.planner.search import SearchSettings, auto_repeats, first_arms, first_grid
from fedqr.planner.twin import Proxy, make_proxy, proxy_rows
from fedqr.planner.twin_data import MIN_PROXY_ROWS
from fedqr.planner.twin_kernel import KernelProxy, make_kernel_proxy

__all__ = ["AUTO_PROXY_ROWS", "ProxyChoice", "Twin", "build_twin", "cost_model"]

AUTO_PROXY_ROWS = 4000
"""With ``share=None`` a clear proxy holds about this many rows in all (all rows if fewer)."""

@dataclass(frozen=True, kw_only=True)
class ProxyChoice:
    """Which data the twin trains on.

    Attributes
    ----------
    use:
        ``clear-proxy`` (a share of the clients' own data, read without privacy) or
        ``public-proxy`` (``public``: a data set that is not the clients').
    share:
        ``clear-proxy``: the share of each client's rows (``None``: about
        :data:`AUTO_PROXY_ROWS` rows in all).
    public:
        ``public-proxy``: the recipe of the public data set, split into N clients the way
        the deployment is (its test split is the twin's evaluation set).
    public_label:
        How the public data set is named in the plan's ``data_used``.
    """

    use: DataUse = DataUse.CLEAR_PROXY
    share: float | None = None
    public: DataSource | None = None
    public_label: str = ""

    def __post_init__(self) -> None:
        if self.share is not None and not 0 < self.share <= 1:
            raise ValueError(f"proxy_share must be in (0, 1], got proxy_share={self.share}")
        if (self.use is DataUse.PUBLIC_PROXY) != (self.public is not None):
            raise ValueError("a public proxy data set is needed for data use public-proxy "
                             "(and only then)")


def _auto_share(sizes: np.ndarray) -> float:
    return min(1.0, AUTO_PROXY_ROWS / float(sizes.sum()))


@dataclass(frozen=True)
class Twin:
    """The twin a plan simulates: its proxy, the model kernel (``None``: the logistic twin),
    how it was sized for its budget, and what it reads."""

    proxy: Proxy | KernelProxy
    kernel: Kernel | None
    size: TwinSize | None
    data_used: dict[str, Any]


def _train_data(choice: ProxyChoice, real: ClientData | None, sizes: np.ndarray, seed: int,
                draw: int, label_alpha: float | None) -> tuple[ClientData, dict[str, Any]]:
    if choice.use is DataUse.CLEAR_PROXY:
        assert real is not None  # make_plan builds the clients' data for a clear proxy
        return real, {"kind": DataUse.CLEAR_PROXY.value, "reads_private_data": True,
                      "warning": "the twin trains on a share of the clients' own data, read "
                                 "WITHOUT differential privacy (simulation only)"}
    assert choice.public is not None  # checked by ProxyChoice
    label = choice.public_label or str(choice.public.dataset)
    pub, split = split_like_deployment(choice.public, np.asarray(sizes, dtype=np.int64),
                                       seed=seed, draw=draw, label_alpha=label_alpha)
    if real is not None:
        check_fits(pub.dataset, features=real.dataset.num_features,  # the command line
                   classes=real.dataset.num_classes, option=f"the public proxy {label!r}",
                   classes_hint=PYTHON_CLASSES_HINT)  # checked it before: fedqr.plan's
    return pub, {"kind": DataUse.PUBLIC_PROXY.value, "proxy": label,
                 "reads_private_data": False, "reads_client_sizes": True, "split": split,
                 "client_facts_used": {
                     "split": split["client_facts"],
                     "noise": ["sizes", "budgets (eps, delta)"],
                     "labels": "none (no label counts are reported)"}}


def build_twin(scenario: Scenario, choice: ProxyChoice, real: ClientData | None,
               sizes: np.ndarray, device: torch.device, settings: SearchSettings, *,
               draw: int = 0, label_alpha: float | None = None,
               size: TwinSize | None = None) -> Twin:
    """The proxy of the scenario's model: the logistic twin's as always, any other model's
    sized to the time budget (:func:`fedqr.planner.budget.size_twin`).

    ``draw`` > 0 redraws the proxy (its rows, or the split of a public proxy) and
    ``label_alpha`` skews a public proxy's label mixes: the proxy-shift alternatives of
    :mod:`fedqr.planner.shift`, sized like the plan's own twin (``size``).
    """
    seed = scenario.data.seed
    train, info = _train_data(choice, real, sizes, seed, draw, label_alpha)
    model = scenario_kernel(scenario, train.dataset)
    kernel = for_twin(model)  # None: the logistic twin
    share = _auto_share(train.partition.sizes) if choice.share is None else choice.share
    norm = scenario.spec.norm
    row_seed = [seed, 3] if draw == 0 else [seed, 3, draw]

    if kernel is None:
        rows = proxy_rows(train.partition, share=share, rng=np.random.default_rng(row_seed))
        proxy: Proxy | KernelProxy = make_proxy(train, rows=rows, test=train.dataset,
                                                real_sizes=sizes, norm=norm, device=device,
                                                intercept=isinstance(model, LogRegKernel)
                                                and model.intercept)
        used: dict[str, Any] = {"share": _read_share(proxy.proxy_sizes, train),
                                "rows": int(proxy.proxy_sizes.sum())}
        if choice.use is DataUse.PUBLIC_PROXY:
            del used["share"]
        twin = Twin(proxy, None, None, _ordered(info, used))
    else:
        twin = _kernel_twin(scenario, kernel, train, info, sizes, device, settings, share,
                            row_seed, size)
    if draw == 0 and label_alpha is None:  # the plan's own twin: said once
        _warn_share_raised(choice, twin.data_used.get("share"))
        if choice.use is DataUse.PUBLIC_PROXY:
            _warn_scarce_classes(info["proxy"], train.dataset.y_train, train.dataset.y_test,
                                 train.dataset.num_classes)
    return twin


SCARCE_ROWS = 5
"""A public proxy's class with fewer training rows (or no evaluation row) draws a warning."""


def _warn_scarce_classes(label: str, y: np.ndarray, y_test: np.ndarray, k: int) -> None:
    """Warn where a public proxy holds a class on fewer than :data:`SCARCE_ROWS` training
    rows or on none of its evaluation rows (one on no training row is said when the proxy is
    read: :class:`fedqr.data.EmptyClassWarning`): the twin can hardly learn or score it, so the
    plan is made for the other classes (Switzerland's heart-disease records, 1 negative
    row of 46, planned the other hospitals 17% worse than their best schedule in a QA
    run)."""
    train = np.bincount(y, minlength=k)
    test = np.bincount(y_test, minlength=k)
    scarce = [c for c in range(k)  # a class without training rows: EmptyClassWarning's
              if 0 < train[c] and (train[c] < SCARCE_ROWS or test[c] == 0)]
    if not scarce:
        return
    counts = ", ".join(f"class {c}: {train[c]} of {len(y)} training rows, {test[c]} of "
                       f"{len(y_test)} evaluation rows" for c in scarce[:8])
    more = f", ... ({len(scarce)} classes in all)" if len(scarce) > 8 else ""
    warnings.warn(f"the public proxy {label!r} holds hardly any rows of some classes ({counts}"
                  f"{more}): the twin learns and scores them from almost nothing, so the plan "
                  f"is made for the other classes; a proxy with every class of the deployment "
                  f"on {SCARCE_ROWS} or more training rows and on its evaluation rows plans "
                  f"better", stacklevel=3)


def _warn_share_raised(choice: ProxyChoice, read: float | None) -> None:
    """Warn where a given ``proxy_share`` of the clients' rows was raised: every client gives
    the twin :data:`~fedqr.planner.twin_data.MIN_PROXY_ROWS` rows at least (all of a smaller
    client's)."""
    if choice.share is None or read is None or read <= choice.share * 1.01:
        return
    warnings.warn(f"proxy_share={choice.share:g} was raised to {read:.3g} of the rows: every "
                  f"client gives the twin at least {MIN_PROXY_ROWS} of its rows (all of them "
                  f"where it has fewer)", stacklevel=3)


def cost_model(proxy: KernelProxy) -> CostModel:
    """The cost model of the kernel twin on ``proxy``."""
    return CostModel(engine=proxy.engine.name, num_params=proxy.num_params,
                     num_clients=len(proxy.real_sizes), proxy_rows=int(proxy.proxy_sizes.sum()),
                     real_rows=int(proxy.real_sizes.sum()), test_rows=proxy.num_test,
                     features=int(proxy.data.x[0].numel()), flops=forward_flops(proxy.kernel))


def _kernel_twin(scenario: Scenario, kernel: Kernel, train: ClientData, info: dict[str, Any],
                 sizes: np.ndarray, device: torch.device, settings: SearchSettings,
                 share: float, row_seed: list[int], fixed: TwinSize | None) -> Twin:
    """The kernel twin at the size its budget buys (:func:`fedqr.planner.budget.size_twin`),
    or at the size ``fixed`` of the plan's own twin."""
    seed, norm = scenario.data.seed, scenario.spec.norm

    def build(sh: float, test_rows: np.ndarray | None) -> KernelProxy:
        rows = proxy_rows(train.partition, share=sh, rng=np.random.default_rng(row_seed))
        return make_kernel_proxy(kernel, train, rows=rows, test=train.dataset,
                                 real_sizes=sizes, norm=norm, device=device,
                                 test_rows=test_rows)

    def test_rows(count: int) -> np.ndarray | None:
        total = len(train.dataset.y_test)
        return None if count >= total else np.sort(np.random.default_rng([seed, 4]).choice(
            total, size=count, replace=False))

    if fixed is not None:
        proxy = build(fixed.share, test_rows(fixed.test_rows))
        size = fixed
    else:
        proxy = build(share, None)
        bs, qs = first_arms(scenario, np.asarray(sizes))
        cost = cost_model(proxy)
        if proxy.engine.name == "loop" and _takes_vmap(kernel):
            warnings.warn(VMAP_PRICE_WARNING.format(name=kernel.name), stacklevel=2)

        def sized(budget_s: float) -> TwinSize:
            return size_twin(
                budget_s=budget_s, arms=[(b, q) for b in bs for q in qs],
                grid_of=lambda tf: first_grid(scenario, settings if tf is None else replace(
                    settings, t_first=tf)),
                t_first=None if scenario.rounds is not None else settings.t_first,
                cost=cost, real_sizes=np.asarray(sizes), share=share,
                repeats=settings.repeats, auto_repeats=auto_repeats,
                last_resort=settings.time_budget_s is not None)  # a default is raised instead

        size = sized(settings.time_budget_s or default_budget_s(int(proxy.proxy_sizes.sum())))
        raised = raised_budget_s(size.budget_s, size.coarse_s)
        if settings.time_budget_s is None:  # a default budget may be raised (a given one never)
            if raised > size.budget_s:  # for an expensive model's first race
                size = sized(raised)
            size = replace(size, follow_s=DEFAULT_BUDGET_MAX_S)  # and for the leading arm
        if size.share != share or size.test_rows != proxy.num_test:
            proxy = build(size.share, test_rows(size.test_rows))
    used = {"share": _read_share(proxy.proxy_sizes, train), "rows": int(proxy.proxy_sizes.sum()),
            "test_rows": proxy.num_test, "model": kernel.name, "twin_engine": proxy.engine.name}
    return Twin(proxy, kernel, size, _ordered(info, used))


VMAP_PRICE_WARNING = (
    "model {name!r}: its per-sample gradients take torch.func.vmap (a trainable layer the "
    "ghost method does not take; it takes Linear, Conv1d, Conv2d, GroupNorm, LayerNorm and "
    "RMSNorm), which the twin's cost model prices like the ghost method: batches of such "
    "models took 0.8 to 6 times their estimate (docs/planner.md, \"What the planner gets "
    "wrong\"), so the plan may run past its time budget")
"""Warned once per plan of a model on the loop engine whose kernel takes ``vmap``."""


def _takes_vmap(kernel: Kernel) -> bool:
    """Whether a torch kernel's per-sample gradients take ``torch.func.vmap``."""
    return isinstance(kernel, TorchKernel) and kernel.options.method is Method.VMAP


def _read_share(proxy_sizes: np.ndarray, train: ClientData) -> float:
    """The share of the training rows the proxy holds: the requested share, raised where
    small clients give all their rows (:data:`~fedqr.planner.twin_data.MIN_PROXY_ROWS` at
    least), 1 where it holds them all (then no other draw of the proxy exists)."""
    return min(1.0, float(np.sum(proxy_sizes)) / float(np.sum(train.partition.sizes)))


def _ordered(info: dict[str, Any], used: dict[str, Any]) -> dict[str, Any]:
    """``kind`` first, then what the proxy holds, then the flags (as plans always wrote)."""
    return {"kind": info["kind"], **{k: v for k, v in info.items() if k == "proxy"}, **used,
            **{k: v for k, v in info.items() if k not in ("kind", "proxy")}}
