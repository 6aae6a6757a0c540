"""``fedqr flower run --rounds auto``: plan a federation's schedule from what its clients report.

The SuperNodes report their sizes d_i and their budgets (eps_i, delta_i) -- what each would
spend on the run, never more than its own budget, and never their data -- in a first message
(a *survey* run, :mod:`fedqr.flower.server_app`). The server then plans with the twin planner
(:func:`fedqr.planner.make_plan`) on a **public** proxy (a built-in data set, or a public data
file with ``--proxy-data``) split into N clients, with the reported sizes and budgets, and
runs the plan as an ordinary run. Planning reads only public data and the reported sizes: it
costs no privacy budget. No flwr here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedqr.data import Dataset, DatasetName, DataSpec, FederatedData, PartitionKind
from fedqr.data.proxy_prep import Preparation, prepared_built_in
from fedqr.data.public import load_proxy
from fedqr.data.source import DataSource, OwnData
from fedqr.flower.client_data import input_shape, run_kernel
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.server_logic import ClientReports, nodes_standardize, server_dataset
from fedqr.models.kernel import Kernel
from fedqr.planner import (
    DataUse,
    Plan,
    PlanNotUseful,
    ProxyChoice,
    Scenario,
    SearchSettings,
    make_plan,
)
from fedqr.sim.config import LearningRate

PROXY_DATASETS = (DatasetName.MNIST, DatasetName.DIGITS)
"""Public data sets a server may plan on (the twin trains logistic regression)."""


def reports_from_json(doc: dict[str, Any], *, num_clients: int) -> ClientReports:
    """The clients' reports as a survey wrote them (``reports.json``).

    Raises
    ------
    ValueError
        If they are not N sizes >= 1, N budgets eps > 0 and N deltas.
    """
    try:
        reports = ClientReports(sizes=tuple(int(v) for v in doc["sizes"]),
                                eps=tuple(float(v) for v in doc["eps"]),
                                delta=tuple(float(v) for v in doc["delta"]))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"reports must hold sizes, eps and delta lists, got {doc!r}") from None
    n = num_clients
    if not len(reports.sizes) == len(reports.eps) == len(reports.delta) == n or min(
            reports.sizes) < 1 or min(reports.eps) <= 0:
        raise ValueError(f"reports must give N={n} sizes >= 1 and budgets eps > 0, got {doc!r}")
    return reports


@dataclass(frozen=True, kw_only=True)
class AutoChoice:
    """Which of T, b, q the planner chooses, and the public proxy it plans on: a built-in
    data set (``proxy``) or a public data file (``proxy_data``, the ``--data`` format) with
    an optional class selection or label map (``proxy_classes``)."""

    rounds: bool
    clients_per_round: bool
    sample_rate: bool
    proxy: DatasetName | None = None
    proxy_data: str | None = None
    proxy_classes: str | None = None

    def __post_init__(self) -> None:
        if (self.proxy is None) == (self.proxy_data is None):
            raise ValueError("auto needs the public data the server plans on: give "
                             "--proxy-dataset NAME or --proxy-data FILE (one of them), got "
                             f"proxy_dataset={None if self.proxy is None else self.proxy.value}"
                             f", proxy_data={self.proxy_data!r}")
        if self.proxy is not None and self.proxy not in PROXY_DATASETS:
            allowed = ", ".join(d.value for d in PROXY_DATASETS)
            raise ValueError(f"proxy_dataset must be one of {allowed}, got "
                             f"proxy_dataset={self.proxy.value}")
        if self.proxy_classes is not None and self.proxy_data is None:
            raise ValueError("--proxy-classes selects the classes of a --proxy-data FILE on "
                             f"Flower, got proxy_classes={self.proxy_classes!r} without one")

    @property
    def label(self) -> str:
        """How the plan names the public data."""
        if self.proxy is not None:
            return self.proxy.value
        suffix = "" if self.proxy_classes is None else f", classes {self.proxy_classes}"
        return f"{Path(str(self.proxy_data)).name}{suffix}"


@dataclass(frozen=True, kw_only=True)
class FederationPlan:
    """The plan, the scenario it was made for, and the run that carries it out."""

    plan: Plan
    scenario: Scenario
    cfg: FlowerRunConfig
    reports: ClientReports

    def record(self) -> dict[str, Any]:
        """``result.json``'s ``plan`` object (as ``fedqr run --rounds auto`` writes it), plus
        the sizes and budgets the clients reported."""
        doc = self.plan.recommended_dict(mechanism=self.scenario.mechanism)
        r = self.reports
        return {**doc, "reported": {"sizes": list(r.sizes), "eps": list(r.eps),
                                    "delta": list(r.delta)}}


def proxy_spec(cfg: FlowerRunConfig, proxy: DatasetName) -> DataSpec:
    """The public proxy split into N clients the way the run's recipe splits data."""
    partition = cfg.partition if cfg.partition is not PartitionKind.BY_WRITER else (
        PartitionKind.IID)
    return DataSpec(dataset=proxy, partition=partition, alpha=cfg.alpha,
                    num_clients=cfg.num_clients, seed=cfg.seed + 1,
                    data_dir=Path(cfg.data_dir) if cfg.data_dir else None)


def node_preparation(cfg: FlowerRunConfig, ds: Dataset) -> Preparation:
    """How the SuperNodes' rows are prepared, which the public proxy follows: standardised
    by their own statistics where the server standardises its ``--test-data`` (every node
    must then use ``--standardize``; :func:`~fedqr.flower.server_logic.check_node_scaling`
    refuses a run whose nodes differ), as given under ``--no-standardize``, and scaled as a
    built-in set (one mean and std per channel) where the server evaluates on one. ``ds``:
    the server's data set (its sample shape)."""
    shape = tuple(ds.image_shape) if ds.image_shape is not None else (
        (int(ds.x_train.shape[1]),) if cfg.test_data else None)
    return Preparation(standardize=nodes_standardize(cfg) or not cfg.test_data,
                       input_shape=shape)


def public_source(cfg: FlowerRunConfig, choice: AutoChoice, *, ds: Dataset) -> DataSource:
    """The public data the server plans on, prepared as the nodes' rows are
    (:func:`node_preparation`; ``ds``: the server's data set): the built-in set split like
    the run (:func:`proxy_spec`; re-standardised per feature for a test file of rows), or the
    ``--proxy-data`` file read and standardised by its own statistics, its classes selected
    (:func:`fedqr.data.public.load_proxy`)."""
    like = node_preparation(cfg, ds)
    if choice.proxy is not None:
        spec = proxy_spec(cfg, choice.proxy)
        if not cfg.test_data:
            return spec  # a built-in run: the proxy is scaled as the run's data set
        return prepared_built_in(spec, like, seed=spec.seed)
    return load_proxy(Path(str(choice.proxy_data)), classes=choice.proxy_classes,
                      client_column=cfg.client_column, label_column=cfg.label_column,
                      seed=cfg.seed + 1, like=like)


def public_dataset(public: DataSource) -> Dataset:
    """The public data as one data set (its shape and classes size the run's model)."""
    return public.load() if isinstance(public, DataSpec) else public.build().dataset


def _federation_data(cfg: FlowerRunConfig, choice: AutoChoice,
                     public: DataSource | None) -> DataSource:
    """The scenario's data: the built-in recipe of N clients, or the public file's rows dealt
    round robin to N clients (the planner deals the public rows again by the reported sizes;
    the server holds none of the clients' rows)."""
    if choice.proxy is not None:
        return DataSpec(dataset=choice.proxy, num_clients=cfg.num_clients, seed=cfg.seed,
                        data_dir=Path(cfg.data_dir) if cfg.data_dir else None)
    assert isinstance(public, OwnData)  # a proxy file is read as OwnData
    d, n = public.data, cfg.num_clients
    if len(d.y) < n:
        raise ValueError(f"proxy_data must have at least N={n} training rows to stand in for "
                         f"N clients, got {len(d.y)} ({choice.proxy_data})")
    return OwnData(data=FederatedData.from_arrays(
        x=d.x, y=d.y, client=np.arange(len(d.y)) % n, x_test=d.x_test, y_test=d.y_test,
        standardize=False, num_classes=d.num_classes, input_shape=d.input_shape, name=d.name,
        seed=public.seed, feature_names=d.feature_names), seed=public.seed)


def run_kernel_of(cfg: FlowerRunConfig, ds: Dataset) -> Kernel:
    """The run's model for the shape and classes of ``ds`` (the server's data)."""
    return run_kernel(cfg.model_name, input_shape=input_shape(ds), num_classes=ds.num_classes,
                      hidden=cfg.hidden_widths)


def federation_scenario(cfg: FlowerRunConfig, reports: ClientReports, *,
                        choice: AutoChoice, kernel: Kernel | None = None,
                        public: DataSource | None = None) -> Scenario:
    """The planner's scenario: the run's settings and model (``kernel``; ``None``: the proxy's
    paper model) with the clients' reported budgets; T, b and q left to the planner where
    ``choice`` says so (``public``: the proxy file's source, for a ``--proxy-data`` choice)."""
    if not len(reports.sizes) == len(reports.eps) == len(reports.delta) == cfg.num_clients:
        raise ValueError(f"reports must come from N={cfg.num_clients} clients, got "
                         f"{len(reports.sizes)} sizes, {len(reports.eps)} budgets")
    return Scenario(
        data=_federation_data(cfg, choice, public), mechanism=cfg.mechanism, eps=reports.eps,
        delta=reports.delta, clip=cfg.clip,
        sample_rate=None if choice.sample_rate else cfg.sample_rate,
        accountant=cfg.accountant,
        rounds=None if choice.rounds else cfg.rounds,
        clients_per_round=None if choice.clients_per_round else cfg.clients_per_round,
        lr=LearningRate(eta0=cfg.lr, decay=cfg.lr_decay), weight_decay=cfg.weight_decay,
        aggregation=cfg.aggregation, kernel=kernel)


def plan_federation(cfg: FlowerRunConfig, reports: ClientReports, *, choice: AutoChoice,
                    settings: SearchSettings | None = None, use_cache: bool = True,
                    progress: Callable[[str, int], None] | None = None) -> FederationPlan:
    """Plan T, b (and q) for clients that reported ``reports``; the run to submit next.

    The planned run spends each client's reported budget (what the client itself said it
    would spend), never more: with ``cfg.client_budgets`` every client spends its own,
    otherwise the run's ``eps``/``delta``, which the clients checked against their budgets
    before reporting. Each client's ledger refuses any overspending anyway.

    Raises
    ------
    PlanNotUseful
        If no schedule is predicted to beat the untrained model (run nothing).
    ValueError
        If the scenario cannot be planned (a non-private mechanism, a model the twin does not
        simulate, bad reports).
    """
    source = public_source(cfg, choice, ds=server_dataset(cfg))
    scenario = federation_scenario(cfg, reports, choice=choice, public=source,
                                   kernel=run_kernel_of(cfg, public_dataset(source)))
    public = ProxyChoice(use=DataUse.PUBLIC_PROXY, public=source, public_label=choice.label)
    plan = make_plan(scenario, proxy=public, sizes=np.asarray(reports.sizes, dtype=np.int64),
                     settings=settings or SearchSettings(seed=cfg.seed), use_cache=use_cache,
                     progress=progress)
    plan.check_useful()
    rec = plan.recommended
    planned = dataclasses.replace(
        cfg, rounds=rec.rounds, clients_per_round=rec.clients_per_round,
        sample_rate=rec.sample_rate if scenario.poisson else cfg.sample_rate,
        min_replies=min(cfg.min_replies, rec.clients_per_round))
    return FederationPlan(plan=plan, scenario=scenario, cfg=planned, reports=reports)


__all__ = ["PROXY_DATASETS", "AutoChoice", "FederationPlan", "PlanNotUseful",
           "federation_scenario", "node_preparation", "plan_federation", "proxy_spec",
           "public_dataset", "public_source", "reports_from_json", "run_kernel_of"]
