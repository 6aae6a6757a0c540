"""``fedqr flower run --rounds auto --clients-per-round auto [--sample-rate auto]``.

The options are checked before anything is submitted; then a survey run asks the SuperNodes
for their sizes and budgets, the server plans on the public ``--proxy-dataset`` or
``--proxy-data`` file (:mod:`fedqr.flower.auto`), and the plan runs as an ordinary run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from fedqr._validate import MAX_ROUNDS, int_or_auto, rate_or_auto
from fedqr.data import DatasetName
from fedqr.flower.auto import AutoChoice, FederationPlan, federation_scenario, plan_federation
from fedqr.flower.config import FlowerRunConfig
from fedqr.flower.server_logic import ClientReports


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """T, b and q as given: a value, or ``None`` for ``auto``."""

    rounds: int | None
    clients_per_round: int | None
    sample_rate: float | None

    @property
    def auto(self) -> bool:
        """Whether the planner chooses any of them."""
        return None in (self.rounds, self.clients_per_round, self.sample_rate)


def parse_schedule(*, rounds: str, clients_per_round: str, sample_rate: str | None,
                   default_rate: float, offer_auto: bool = True) -> Schedule:
    """``--rounds``, ``--clients-per-round`` and ``--sample-rate``, each a value or ``auto``
    (``offer_auto=False``: a command without the planner, whose messages leave ``auto`` out;
    :func:`auto_choice` refuses it there).

    Raises
    ------
    ValueError
        Naming the option, its range and the value given.
    """
    return Schedule(rounds=int_or_auto("rounds", rounds, low=1, high=MAX_ROUNDS,
                                       offer_auto=offer_auto),
                    clients_per_round=int_or_auto("clients_per_round", clients_per_round,
                                                  low=1, offer_auto=offer_auto),
                    sample_rate=rate_or_auto(sample_rate, default=default_rate,
                                             offer_auto=offer_auto))


def auto_choice(schedule: Schedule, *, command: str, remote: bool,
                proxy_dataset: DatasetName | None, proxy_data: Path | None = None,
                proxy_classes: str | None = None) -> AutoChoice | None:
    """What the planner chooses (``None``: nothing, a fixed schedule).

    Raises
    ------
    ValueError
        If ``auto`` is asked outside ``fedqr flower run`` or without a public proxy
        (``--proxy-dataset`` or ``--proxy-data``), or a proxy option without ``auto``.
    """
    given = [f"--{n}={v}" for n, v in (("proxy-dataset", proxy_dataset and proxy_dataset.value),
                                       ("proxy-data", proxy_data),
                                       ("proxy-classes", proxy_classes)) if v is not None]
    if not schedule.auto:
        if given:
            raise ValueError("--proxy-dataset, --proxy-data and --proxy-classes are used only "
                             "by fedqr flower run with --rounds, --clients-per-round or "
                             "--sample-rate auto, got " + ", ".join(given))
        return None
    if not remote:
        raise ValueError(f"auto (--rounds, --clients-per-round, --sample-rate) is planned from "
                         f"the sizes and budgets that SuperNodes report: fedqr flower run only "
                         f"(fedqr run --rounds auto plans a simulation), got {command}")
    if proxy_dataset is None and proxy_data is None:
        raise ValueError("auto needs --proxy-dataset mnist|digits or --proxy-data FILE: the "
                         "public data the server plans on (it never reads the clients' data), "
                         "got none")
    if proxy_data is not None and not proxy_data.is_file():
        raise ValueError(f"proxy_data must be an existing .npz, .csv or .parquet file, got "
                         f"proxy_data={str(proxy_data)!r} (no such file)")
    return AutoChoice(rounds=schedule.rounds is None,
                      clients_per_round=schedule.clients_per_round is None,
                      sample_rate=schedule.sample_rate is None, proxy=proxy_dataset,
                      proxy_data=None if proxy_data is None else str(proxy_data.resolve()),
                      proxy_classes=proxy_classes)


def check_plannable(cfg: FlowerRunConfig, choice: AutoChoice) -> None:
    """Everything the plan needs that can be checked before the clients are asked.

    Raises
    ------
    ValueError
        A mechanism without noise, a model the twin cannot train, a proxy whose features or
        classes differ from the run's data.
    """
    from fedqr.flower.auto import public_dataset, public_source, run_kernel_of
    from fedqr.flower.server_logic import server_dataset

    n = cfg.num_clients
    real = server_dataset(cfg)
    kernel = run_kernel_of(cfg, real)
    source = public_source(cfg, choice, ds=real)
    federation_scenario(cfg, ClientReports(sizes=(1,) * n, eps=cfg.eps * n if len(
        cfg.eps) == 1 else cfg.eps, delta=cfg.delta * n if len(cfg.delta) == 1 else cfg.delta),
        choice=choice, kernel=kernel, public=source)  # the scenario's own checks (mechanism..)
    public = public_dataset(source)
    option = "--proxy-dataset" if choice.proxy is not None else "--proxy-data"
    if (public.x_train.shape[1], public.num_classes) != (real.x_train.shape[1],
                                                         real.num_classes):
        raise ValueError(
            f"{option} must have the run's features and classes ({real.name}: "
            f"{real.x_train.shape[1]} features, {real.num_classes} classes), got "
            f"{option} {choice.label} with {public.x_train.shape[1]} features, "
            f"{public.num_classes} classes")


def plan_remote(cfg: FlowerRunConfig, *, choice: AutoChoice, address: str, ca: Path | None,
                work: Path, timeout_s: float, console: Console) -> FederationPlan:
    """Survey the SuperLink's clients, plan, and return the run to submit.

    Raises
    ------
    fedqr.flower.auto.PlanNotUseful
        If no schedule helps (nothing is run).
    FlowerRunFailed, LaunchError
        If the survey fails (a client refuses, clients missing).
    """
    from fedqr.flower.auto import reports_from_json
    from fedqr.flower.runner import survey_remote

    survey_work = work / "survey"
    survey_work.mkdir(parents=True, exist_ok=True)
    doc = survey_remote(cfg, address=address, ca=ca, work=survey_work, timeout_s=timeout_s)
    reports = reports_from_json(doc, num_clients=cfg.num_clients)
    console.print(f"clients report sizes {list(reports.sizes)}, eps "
                  f"{[round(e, 6) for e in reports.eps]}; planning on public "
                  f"{choice.label}")
    fed = plan_federation(cfg, reports, choice=choice)
    r = fed.cfg
    console.print(f"plan: T={r.rounds}, b={r.clients_per_round}"
                  + (f", q={r.sample_rate:g}" if fed.scenario.poisson else "")
                  + f" ({fed.plan.message})")
    return fed
