"""The paper's evaluation (Section VII, MNIST and FEMNIST) as one resumable sweep, plus planner
validation.

Every run is a :class:`~fedqr.experiments.runs.RunSpec` tagged with the experiment grid it
belongs to; a ``manifest.json`` in the output folder lists them with the plans and the bound's
predictions, so figures can be redrawn from the stored runs alone (``fedqr plot``).

Settings (paper Section VII): N = 10 clients, eta_t = 0.05 / (1 + 0.01 t), weight decay 0.01;
Laplace eps in {1, 5, 10}; Gaussian xi2 = 10, q = 0.01, delta = 1e-5, eps in {0.1, 0.5, 1},
T = 100; b in {1, 5, 10}; T in {10, 50, 100, 150, 200, 250, 500}; 10 repeats.

* MNIST (:data:`MNIST`): softmax regression, two digits per client, Laplace xi1 = 300.
* FEMNIST (:data:`FEMNIST`): the paper's CNN, whole writers per client, Laplace xi1 = 200.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedqr._atomic import DamagedFileError, read_json, write_file_atomic, write_json_atomic
from fedqr._precision import Arithmetic
from fedqr.data import Dataset, DatasetName, Partition, PartitionKind
from fedqr.experiments.runs import RunSpec, RunStore, execute, prepare_data
from fedqr.privacy import Mechanism, PaperBound, mechanism_for
from fedqr.sim.config import EvalTrain, PrivacyConfig, SimConfig
from fedqr.theory import ProblemConstants, plan_gaussian
from fedqr.theory.bounds import laplace_bound
from fedqr.theory.estimate import regularised_optimum
from fedqr.theory.laplace import t_star_int
from fedqr.theory.paper import PAPER_TABLE_ONE, implied_ratios

N = 10
PAPER_MECHANISMS = (Mechanism.LAPLACE, Mechanism.GAUSSIAN)
"""The paper's two experiments: the noise of its Theorem 3 and of its Theorem 4. Every choice
of the sweep that differs between them (budgets, planner, headline T) is asked of the
mechanism's :attr:`~fedqr.privacy.NoiseMechanism.bound`, its q of the mechanism object."""
DELTA = 1e-5
GAUSSIAN_T = 100
PAPER_T_STAR = {1: "T_joint", 5: "T_b5", 10: "T_b10"}


@dataclass(frozen=True)
class Settings:
    """Sizes of the sweep (``FULL`` is the paper's; ``QUICK`` a smoke-size version)."""

    repeats: int
    T_grid: tuple[int, ...]
    b_grid: tuple[int, ...]
    laplace_eps: tuple[float, ...]
    gaussian_eps: tuple[float, ...]
    fractions: tuple[float, ...]
    curve_points: int
    """Evaluations along a run drawn in the loss-per-round figure (:func:`is_curve`); every
    other run is evaluated at round 0 and at the end only, which is all its figures use."""
    estimate_proxy: float | None
    arithmetic: str = "float32"
    """:class:`fedqr._precision.Arithmetic` of the runs (``fedqr reproduce --arithmetic``)."""


@dataclass(frozen=True)
class Target:
    """One data set of the paper's evaluation: data, partition, clip bounds and model kind."""

    dataset: DatasetName
    partition: PartitionKind
    clip_overrides: Mapping[Mechanism, float]
    """The paper's clip where it is not the mechanism's ``default_clip`` (MNIST's)."""
    convex: bool
    """Softmax regression (constants of :func:`~fedqr.theory.estimate.estimate_constants_many`
    with the default kernel, distance to theta*) rather than the CNN (the kernel of
    :func:`fedqr.sim.network_constants.network_kernel`)."""

    def clip(self, mech: Mechanism) -> float:
        """The paper's clip bound of ``mech`` on this data set."""
        return self.clip_overrides.get(mech, mechanism_for(mech).default_clip)

    @property
    def paper_table(self) -> Mapping[float, Mapping[str, int]]:
        """The paper's Table I row of this data set."""
        return PAPER_TABLE_ONE[self.dataset.value]


MNIST = Target(dataset=DatasetName.MNIST, partition=PartitionKind.TWO_DIGITS,
               clip_overrides={}, convex=True)
FEMNIST = Target(dataset=DatasetName.FEMNIST, partition=PartitionKind.BY_WRITER,
                 clip_overrides={Mechanism.LAPLACE: 200.0}, convex=False)
TARGETS = {t.dataset.value: t for t in (MNIST, FEMNIST)}


FULL = Settings(repeats=10, T_grid=(10, 50, 100, 150, 200, 250, 500), b_grid=(1, 5, 10),
                laplace_eps=(1.0, 5.0, 10.0), gaussian_eps=(0.1, 0.5, 1.0),
                fractions=tuple(round(0.1 * k, 1) for k in range(1, 11)), curve_points=25,
                estimate_proxy=None)
QUICK = Settings(repeats=3, T_grid=(10, 50), b_grid=(1, 10), laplace_eps=(1.0, 10.0),
                 gaussian_eps=(0.5, 1.0), fractions=(0.3, 1.0), curve_points=10,
                 estimate_proxy=0.2)
QUICK_FEMNIST = Settings(repeats=2, T_grid=(10, 25), b_grid=(1, 5), laplace_eps=(1.0, 5.0),
                         gaussian_eps=(0.5, 1.0), fractions=(0.5, 1.0), curve_points=5,
                         estimate_proxy=0.05)
"""FEMNIST's ``--quick``: a Laplace client-round clips all ~5,700 samples of the client
(about 1.5 s on 2 CPU threads), so b = 10, eps = 10 and T >= 50 are left to the full run."""


def settings_for(target: Target, *, quick: bool) -> Settings:
    """The sweep size of ``target``: the paper's (``FULL``) or its ``--quick`` version."""
    if not quick:
        return FULL
    return QUICK if target.convex else QUICK_FEMNIST


def settings_from(doc: dict[str, Any]) -> Settings:
    """:class:`Settings` from its ``asdict`` form (lists back to tuples)."""
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in doc.items()}
    return Settings(**fields)


def headline_T(target: Target, mech: Mechanism | str, eps: float, b: int) -> int | None:
    """The T a b is run at in the loss-per-round and versus-b/eps figures: the paper's T*(b)
    (Laplace, the data set's Table I) or T = 100 (Gaussian)."""
    if mechanism_for(mech).bound is PaperBound.THEOREM_4:
        return GAUSSIAN_T
    paper = target.paper_table.get(eps)
    return paper[PAPER_T_STAR[b]] if paper and b in PAPER_T_STAR else None


def is_curve(target: Target, entry: Mapping[str, Any], base: float) -> bool:
    """Whether the loss-per-round figure draws the run of ``entry`` (at the base data fraction,
    T = 100 or the paper's T*(b)), so it is evaluated ``curve_points`` times, not twice.

    Depends only on the run's configuration, so entries of different experiments that share
    a configuration still share one stored run.
    """
    T = entry["T"]
    return entry["fraction"] == base and T > 0 and T in (
        GAUSSIAN_T, headline_T(target, entry["mechanism"], entry["eps"], entry["b"]))


def _sim(target: Target, mech: Mechanism, eps: float, b: int, T: int, s: Settings, *,
         curve: bool) -> SimConfig:
    return SimConfig(
        num_clients=N, clients_per_round=b, rounds=T, repeats=s.repeats, seed=0,
        eval_every=max(1, T // s.curve_points) if curve else max(1, T),
        train_eval=EvalTrain.EVERY,  # the paper's figures plot the training objective
        arithmetic=Arithmetic(s.arithmetic),
        privacy=PrivacyConfig(mechanism=mech, eps=eps, delta=DELTA, clip=target.clip(mech),
                              sample_rate=mechanism_for(mech).default_sample_rate))


def _data(target: Target, data_dir: Path | None, fraction: float) -> tuple[Dataset, Partition]:
    return prepare_data(target.dataset, fraction=fraction, partition=target.partition, seed=0,
                        num_clients=N, data_dir=data_dir)


def _constants(target: Target, ds: Dataset, part: Partition, s: Settings,
               ) -> dict[str, dict[str, Any]]:
    """Each paper mechanism's constants by name, from one shared estimate (the curvature, the
    GD run and the local optima do not depend on the mechanism's clipping)."""
    from fedqr.theory import constants_to_json
    from fedqr.theory.estimate import ClipSetting, estimate_constants_many

    clips = []
    for mech in PAPER_MECHANISMS:
        spec = mechanism_for(mech)
        clips.append(ClipSetting(clip=target.clip(mech), norm=spec.norm, eps=1.0,
                                 delta=spec.client_delta(DELTA),
                                 sample_rate=spec.default_sample_rate))
    kernel = None
    if not target.convex:
        from fedqr.sim.network_constants import network_kernel

        kernel = network_kernel(ds)
    ests = estimate_constants_many(dataset=ds, partition=part, clips=clips, kernel=kernel,
                                   proxy_fraction=s.estimate_proxy,
                                   rng=np.random.default_rng(1))
    docs = {}
    for mech, est in zip(PAPER_MECHANISMS, ests, strict=True):
        doc: dict[str, Any] = json.loads(constants_to_json(est.constants))
        doc["reads_private_data"] = est.reads_private_data
        docs[mech.value] = doc
    return docs


def _grid(target: Target, mech: Mechanism, c: ProblemConstants, s: Settings, base: float,
          ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Runs of one mechanism: (b, T) grid per eps with the planner's and the paper's choices."""
    # the paper's experiments differ per theorem (Table I's grid and closed-form optimum for
    # Theorem 3, the accountant-calibrated planner for Theorem 4): these branches choose an
    # experiment design and a planner, not how a reply is made
    spec = mechanism_for(mech)
    closed_form = spec.bound is PaperBound.THEOREM_3
    entries, plans = [], {}
    for eps in _eps_list(s, mech):
        ce = c.with_budget(eps=eps, delta=spec.client_delta(DELTA))
        extra: dict[int, set[int]] = {b: set() for b in s.b_grid}
        if closed_form:
            from fedqr.theory.laplace import joint_optimum_int

            j = joint_optimum_int(ce)
            fed = (int(j.T), int(j.b))
            paper = target.paper_table.get(eps)
            for b in s.b_grid:
                extra[b].add(t_star_int(ce, b=b))
                if paper and b in PAPER_T_STAR:
                    extra[b].add(paper[PAPER_T_STAR[b]])
            paper_joint = (paper["T_joint"], 1) if paper else None
        else:
            gplan = plan_gaussian(ce, T_max=max(*s.T_grid, GAUSSIAN_T))
            fed, paper_joint = (gplan.T, gplan.b), (GAUSSIAN_T, N)
        extra.setdefault(fed[1], set()).add(fed[0])
        if paper_joint is not None:
            extra.setdefault(paper_joint[1], set()).add(paper_joint[0])
        plans[str(eps)] = {"fedqr": list(fed), "paper": paper_joint and list(paper_joint)}
        for b in sorted(extra):
            for T in sorted(set(s.T_grid) | extra[b]):
                entries.append({"experiment": "grid", "mechanism": mech.value, "eps": eps,
                                "b": b, "T": T, "fraction": base,
                                "U_pred": float(laplace_bound(ce, T=T, b=b))
                                if closed_form else float(gplan.grid_U[T, b - 1])})
    return entries, plans


def _eps_list(s: Settings, mech: Mechanism) -> tuple[float, ...]:
    """The budgets of the paper's experiment with ``mech`` (Theorem 3's or Theorem 4's)."""
    return s.laplace_eps if mechanism_for(mech).bound is PaperBound.THEOREM_3 else s.gaussian_eps


def _fractions(target: Target, s: Settings, base: float) -> list[dict[str, Any]]:
    """Accuracy at the plan over data fractions: Laplace at the paper's implied joint optimum
    for that fraction, Gaussian at (T = 100, b = N)."""
    ratios = implied_ratios(target.paper_table)
    out = []
    for f in s.fractions:
        for mech in PAPER_MECHANISMS:
            for eps in _eps_list(s, mech):
                T, b = (ratios.scaled(fraction=f).joint(eps=eps, N=N)
                        if mechanism_for(mech).bound is PaperBound.THEOREM_3 else (GAUSSIAN_T, N))
                out.append({"experiment": "fraction", "mechanism": mech.value, "eps": eps,
                            "b": b, "T": T, "fraction": round(base * f, 6), "data_fraction": f})
    return out


def spec_of(target: Target, entry: dict[str, Any], s: Settings, *, base: float) -> RunSpec:
    """The run of a manifest entry (``base``: the manifest's base data fraction)."""
    mech = Mechanism(entry["mechanism"])
    return RunSpec(dataset=target.dataset, fraction=entry["fraction"],
                   partition=target.partition, data_seed=0,
                   config=_sim(target, mech, entry["eps"], entry["b"], entry["T"], s,
                               curve=is_curve(target, entry, base)))


def target_of(doc: dict[str, Any]) -> Target:
    """The :class:`Target` of a manifest (manifests before FEMNIST are MNIST's)."""
    return TARGETS[doc.get("dataset", "mnist")]


def _stored_settings(doc: dict[str, Any]) -> Settings | None:
    """The settings a stored manifest was built with (``None`` if unreadable)."""
    try:
        return settings_from(doc.get("settings", {}))
    except TypeError:  # written by a version with other settings fields
        return None


def _rekeyed(doc: dict[str, Any], target: Target, s: Settings, path: Path) -> dict[str, Any]:
    """``doc`` with every entry's run key recomputed by this version of fedqr (a manifest
    written by an older version keeps its constants and plans; its runs are looked up, and
    run when missing, under the current keys)."""
    keys = [spec_of(target, e, s, base=doc["base_fraction"]).key() for e in doc["entries"]]
    if keys != [e["key"] for e in doc["entries"]]:
        for e, key in zip(doc["entries"], keys, strict=True):
            e["key"] = key
        write_json_atomic(path, doc)
    return doc


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest in ``path``; :class:`DamagedFileError` naming it if it is not one."""
    doc = read_json(path)
    ok = isinstance(doc, dict) and isinstance(doc.get("entries"), list) and all(
        isinstance(e, dict) and isinstance(e.get("key"), str) for e in doc["entries"])
    if not (ok and all(isinstance(doc.get(k), dict) for k in ("constants", "plans", "settings"))
            and isinstance(doc.get("base_fraction"), int | float)):
        raise DamagedFileError(f"{path} is damaged: not a reproduce manifest (an object with "
                               "'entries', 'constants', 'plans', 'settings', 'base_fraction')")
    out: dict[str, Any] = doc
    return out


def _stored_manifest(path: Path, status: Callable[[str], None]) -> dict[str, Any] | None:
    try:
        return read_manifest(path)
    except FileNotFoundError:
        return None
    except DamagedFileError as e:
        status(f"{e}; rebuilding it")
        return None


def build_manifest(out: Path, target: Target, s: Settings, *, base: float,
                   data_dir: Path | None, status: Callable[[str], None]) -> dict[str, Any]:
    """Estimate the constants, plan, and list every run (reused from ``out`` if present)."""
    path = out / "manifest.json"
    doc = _stored_manifest(path, status)
    if doc is not None:
        if (_stored_settings(doc) == s and doc.get("base_fraction") == base
                and target_of(doc) == target):
            return _rekeyed(doc, target, s, path)
    ds, part = _data(target, data_dir, base)
    entries: list[dict[str, Any]] = []
    plans = {}
    status(f"estimating the {' and '.join(m.value for m in PAPER_MECHANISMS)} constants "
           "(no privacy: an analysis step)")
    consts = _constants(target, ds, part, s)
    for mech in PAPER_MECHANISMS:
        from fedqr.theory import constants_from_json

        grid, plans[mech.value] = _grid(target, mech,
                                        constants_from_json(json.dumps(consts[mech.value])),
                                        s, base)
        entries += grid
    entries += _fractions(target, s, base)
    if target.convex:
        status("computing the non-private optimum theta* (for ||theta_T - theta*||^2)")
        theta = regularised_optimum(ds.x_train, ds.y_train, num_classes=ds.num_classes,
                                    weight_decay=0.01)
        write_file_atomic(out / "theta_star.npy", lambda p: np.save(p, theta))
    for e in entries:
        e["key"] = spec_of(target, e, s, base=base).key()
    doc = {"dataset": target.dataset.value, "settings": asdict(s), "base_fraction": base,
           "constants": consts, "plans": plans, "entries": entries}
    write_json_atomic(path, doc)
    return doc


def run_manifest(doc: dict[str, Any], out: Path, *, data_dir: Path | None,
                 device: str | torch.device, on_run: Callable[[RunSpec, bool], None],
                 on_round: Callable[[RunSpec, int], None] | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
    """Run every entry not yet stored (each stored as it finishes; a damaged stored run is
    recomputed and named through ``warn``)."""
    target = target_of(doc)
    s = settings_from(doc["settings"])
    base = doc["base_fraction"]
    dist2 = None
    if target.convex:
        theta_star = torch.as_tensor(np.load(out / "theta_star.npy"))

        def dist2(spec: RunSpec, ds: Dataset, theta: np.ndarray) -> dict[str, Any]:
            if spec.fraction != base:
                return {}
            diff = torch.as_tensor(theta, dtype=torch.float64) - theta_star
            return {"dist2_to_opt": diff.pow(2).sum(dim=(1, 2)).tolist()}

    specs = [spec_of(target, e, s, base=base) for e in doc["entries"]]
    execute(specs, store=RunStore(out, warn=warn), data_dir=data_dir, device=device, extra=dist2,
            on_run=on_run, on_round=on_round)
