"""``fedqr run``: simulate FedSGD-DPC and write result.json and a plot."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from fedqr._validate import check_positive, int_or_auto, rate_or_auto
from fedqr.cli._common import check_out_dir, fail, floats, out, progress, staged, warn_diverged
from fedqr.cli._common import device as _device
from fedqr.cli.scenario import (
    proxy_choice,
    run_planner,
    scenario_from_options,
)
from fedqr.data import DataNotFoundError, DatasetName, DataSpec, PartitionKind
from fedqr.models.factory import ModelName
from fedqr.planner import DataUse, PlanNotUseful
from fedqr.privacy import Accountant, Mechanism, PrivacyBudgetExceeded, mechanism_for
from fedqr.sim.config import (
    Aggregation,
    LearningRate,
    LrSchedule,
    PrivacyConfig,
    Selection,
    SimConfig,
    parse_train_eval,
)

DEFAULT_CLIP = {m: mechanism_for(m).default_clip for m in Mechanism}
"""The paper's clip bounds (MNIST; FEMNIST's Laplace bound is :data:`FEMNIST_LAPLACE_CLIP`)."""
FEMNIST_LAPLACE_CLIP = 200.0
_CLIP_OVERRIDES = {(DatasetName.FEMNIST, Mechanism.LAPLACE): FEMNIST_LAPLACE_CLIP}
"""The paper's per-data-set exceptions to a mechanism's default clip (a table, not a branch)."""


def default_clip(dataset: DatasetName, mechanism: Mechanism) -> float:
    """The paper's clip bound for ``dataset`` and ``mechanism``."""
    return _CLIP_OVERRIDES.get((dataset, mechanism), mechanism_for(mechanism).default_clip)


def default_eval_every(dataset: DatasetName, rounds: int) -> int:
    """Every round, except for femnist (about 20 evaluations: each costs seconds on a CPU)."""
    return max(1, rounds // 20) if dataset is DatasetName.FEMNIST else 1


def run(
    dataset: Annotated[DatasetName, typer.Option(
        help="Data set: mnist and digits train softmax regression, femnist the paper's CNN.")]
        = DatasetName.MNIST,
    partition: Annotated[PartitionKind | None, typer.Option(
        help="two-digits: the paper's non-iid split; iid; dirichlet (see --alpha); by-writer "
             "(FEMNIST's whole writers). Default: by-writer for femnist, else two-digits.")]
        = None,
    alpha: Annotated[float, typer.Option(help="Dirichlet concentration (> 0).")] = 0.5,
    fraction: Annotated[float, typer.Option(
        help="Share of the training set used, in (0, 1]: a class-stratified subset drawn "
             "from --seed (the test set stays whole).")] = 1.0,
    num_clients: Annotated[int, typer.Option(help="N, the number of clients.")] = 10,
    model: Annotated[ModelName | None, typer.Option(
        help="Model trained (default: the data set's paper model: cnn for femnist, else "
             "logreg).")] = None,
    clients_per_round: Annotated[str, typer.Option(
        help="b, replies per round (1..N), or 'auto': planned (see fedqr plan).")] = "10",
    rounds: Annotated[str, typer.Option(
        help="T, the number of queries (rounds), or 'auto': planned (see fedqr plan).")]
        = "100",
    mechanism: Annotated[Mechanism, typer.Option(help="Client-side DP mechanism.")]
        = Mechanism.GAUSSIAN,
    eps: Annotated[str, typer.Option(help="Epsilon per client: one value or N comma-separated.")]
        = "1.0",
    delta: Annotated[str, typer.Option(help="Delta per client (Gaussian): one or N values.")]
        = "1e-5",
    clip: Annotated[float | None, typer.Option(
        help="Per-sample clip xi (l1 for laplace, l2 for gaussian). Default: the paper's, "
             "laplace 300 (femnist 200), gaussian 10; none without noise.")]
        = None,
    sample_rate: Annotated[str | None, typer.Option(
        help="q, Poisson sampling rate of the local batch (gaussian default 0.01; laplace 1), "
             "or 'auto' (gaussian): planned.")]
        = None,
    accountant: Annotated[Accountant, typer.Option(help="Accountant for gaussian: rdp or pld.")]
        = Accountant.RDP,
    lr: Annotated[float, typer.Option(help="Initial learning rate eta0.")] = 0.05,
    lr_decay: Annotated[float, typer.Option(help="eta_t = lr / (1 + lr_decay t).")] = 0.01,
    lr_schedule: Annotated[LrSchedule, typer.Option(
        help="inverse-time: lr / (1 + lr_decay t); constant; theory: 2 / (mu (t + gamma)).")]
        = LrSchedule.INVERSE_TIME,
    mu: Annotated[float | None, typer.Option(help="Strong convexity mu (theory schedule).")]
        = None,
    gamma: Annotated[float | None, typer.Option(help="gamma = 2 lambda / mu (theory schedule).")]
        = None,
    weight_decay: Annotated[float, typer.Option(help="L2 regularisation (strong convexity).")]
        = 0.01,
    selection: Annotated[Selection, typer.Option(help="Client selection.")]
        = Selection.ROUND_ROBIN,
    aggregation: Annotated[Aggregation, typer.Option(help="Server aggregation rule.")]
        = Aggregation.PAPER,
    repeats: Annotated[int, typer.Option(
        help="Independent repeats: one batch for mnist/digits, one after another for femnist.")]
        = 1,
    seed: Annotated[int, typer.Option(help="Seed for partition, schedule and noise.")] = 0,
    eval_every: Annotated[int | None, typer.Option(
        help="Evaluate every this many rounds. Default: every round; femnist about 20 "
             "evaluations (each is a forward pass over the test set).")] = None,
    eval_train: Annotated[str, typer.Option(
        help="When the training objective is evaluated: every (at every evaluation), end (the "
             "final one only), none, or sample:N (at every evaluation, estimated from N "
             "training rows, with its standard error).")] = "end",
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder (result.json, PNG).")]
        = Path("runs/latest"),
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    data_dir: Annotated[Path | None, typer.Option(help="Folder with the data files.")] = None,
    data_use: Annotated[DataUse, typer.Option(
        help="With auto: what the planner's twin trains on (see fedqr plan).")]
        = DataUse.CLEAR_PROXY,
    proxy_dataset: Annotated[DatasetName | None, typer.Option(
        help="With auto: the public proxy (public-proxy, private-pilot).")] = None,
    pilot_share: Annotated[float | None, typer.Option(
        help="With auto and private-pilot: share of each budget the pilot spends.")] = None,
) -> None:
    """Simulate FedSGD-DPC and write result.json and a loss/accuracy plot."""
    plan_doc: dict[str, object] | None = None
    try:
        check_out_dir("out", out_dir)
        check_positive("alpha", alpha)
        train_eval, train_eval_rows = parse_train_eval(eval_train)
        rounds_n = int_or_auto("rounds", rounds, low=0)
        b_n = int_or_auto("clients_per_round", clients_per_round, low=1)
        q_opt = rate_or_auto(sample_rate,
                             default=mechanism_for(mechanism).default_sample_rate)
        if rounds_n is None or b_n is None or q_opt is None:
            scenario = scenario_from_options(
                dataset=dataset, partition=partition, alpha=alpha, fraction=fraction,
                num_clients=num_clients, mechanism=mechanism, eps=eps, delta=delta, clip=clip,
                sample_rate=q_opt, accountant=accountant, lr=lr, lr_decay=lr_decay,
                lr_schedule=lr_schedule, weight_decay=weight_decay, aggregation=aggregation,
                seed=seed, data_dir=data_dir, rounds=rounds_n, clients_per_round=b_n,
                model=model)
            choice = proxy_choice(data_use=data_use, proxy_share=None,
                                  proxy_dataset=proxy_dataset, scenario=scenario,
                                  pilot_share=pilot_share)
            the_plan = run_planner(scenario, choice, twin_repeats=None, device=_device(device),
                                   use_cache=True, pilot_share=pilot_share)
            the_plan.check_useful()
            rec = the_plan.recommended
            rounds_n, b_n, q_opt = rec.rounds, rec.clients_per_round, rec.sample_rate
            plan_doc = the_plan.recommended_dict(mechanism=mechanism)
            left = the_plan.privacy_cost.get("budget_left_for_run")
            if isinstance(left, dict):  # a private pilot spent part of the budget
                eps = ",".join(repr(e) for e in left["eps"])
                delta = ",".join(repr(d) for d in left["delta"]) if \
                    mechanism_for(mechanism).needs_delta else delta
            out.print(f"plan: T={rounds_n}, b={b_n}"
                      + (f", q={q_opt:g}" if mechanism_for(mechanism).batch_rate(0.5) < 1
                         else "")
                      + f" ({the_plan.message})")
        t_run, b_run, q_final = rounds_n, b_n, q_opt
        config = SimConfig(
            num_clients=num_clients, clients_per_round=b_run, rounds=t_run,
            selection=selection, aggregation=aggregation,
            lr=LearningRate(schedule=lr_schedule, eta0=lr, decay=lr_decay, mu=mu, gamma=gamma),
            weight_decay=weight_decay,
            privacy=PrivacyConfig(
                mechanism=mechanism, eps=floats("eps", eps), delta=floats("delta", delta),
                clip=clip if clip is not None else default_clip(dataset, mechanism),
                sample_rate=q_final, accountant=accountant),
            repeats=repeats, seed=seed,
            eval_every=eval_every if eval_every is not None
            else default_eval_every(dataset, t_run),
            train_eval=train_eval, train_eval_rows=train_eval_rows)
        dev = _device(device)
    except PlanNotUseful as e:
        raise fail(f"{e}; nothing was run", code=1) from None
    except DataNotFoundError as e:
        raise fail(str(e), code=1) from None
    except ValueError as e:
        raise fail(str(e)) from None
    try:
        data = DataSpec(dataset=dataset, fraction=fraction, partition=partition, alpha=alpha,
                        num_clients=num_clients, seed=seed, data_dir=data_dir).build()
    except DataNotFoundError as e:
        raise fail(str(e), code=1) from None
    except ValueError as e:
        raise fail(str(e)) from None
    ds, part = data.dataset, data.partition
    from fedqr.experiments.plots import plot_training
    from fedqr.models.factory import model_for
    from fedqr.sim.engine import simulate
    from fedqr.sim.provenance import provenance

    try:
        model_spec = model_for(ds, name=model)
    except ValueError as e:
        raise fail(str(e)) from None
    if model_spec.is_network:  # the paper's CNN, per-sample clipping in chunks
        from fedqr.sim.network import simulate_network as simulate

    started = time.perf_counter()
    with progress("FedSGD-DPC") as bar:
        task = bar.add_task(f"{mechanism.value} b={b_run} x{repeats}", total=t_run)
        try:
            result = simulate(ds, part, config, device=dev,
                              on_round=lambda t: bar.update(task, completed=t))
        except PrivacyBudgetExceeded as e:
            raise fail(str(e), code=1) from None
        except ValueError as e:
            raise fail(str(e)) from None
    elapsed = time.perf_counter() - started
    doc = result.to_json()
    doc["wall_time_s"] = elapsed
    if plan_doc is not None:
        achieved = doc["summary"]["final_test_loss_mean"]  # type: ignore[index]
        doc["plan"] = {**plan_doc, "achieved_test_loss": achieved}
    doc["provenance"] = provenance(model=model_spec, device=dev)
    # write both files to a staging folder first: a failure leaves no partial output behind
    from fedqr.cli._common import write_json_atomic

    warn_diverged(doc)
    with staged(out_dir) as stage:
        write_json_atomic(stage / "result.json", doc)
        plot_training(doc, stage / "training.png")
    _summary(doc, elapsed, out_dir)
    if plan_doc is not None:
        pred = plan_doc["predicted_test_loss"]
        assert isinstance(pred, dict)
        out.print(f"planned test loss {pred['mean']:.4f} +- {pred['stderr']:.4f}, achieved "
                  f"{doc['plan']['achieved_test_loss']:.4f}")  # type: ignore[index]


def _summary(doc: dict[str, object], elapsed: float, out_dir: Path) -> None:
    summary = doc["summary"]
    assert isinstance(summary, dict)
    clients = doc["clients"]
    assert isinstance(clients, list)
    table = Table(title="clients", show_lines=False)
    for col in ("id", "d_i", "replies", "eps spent", "noise std", "clipped", "SNR"):
        table.add_column(col, justify="right")
    for c in clients[:12]:
        table.add_row(str(c["id"]), str(c["num_samples"]), str(c["replies"]),
                      _fmt(c["epsilon_spent"]), _fmt(c["noise_std"]),
                      f"{c['clipped_fraction']:.1%}", _fmt(c["snr"]))
    out.print(table)
    out.print(f"final test accuracy {_fmt(summary['final_test_accuracy_mean'])} "
              f"+- {_fmt(summary['final_test_accuracy_std'])}, test loss "
              f"{_fmt(summary['final_test_loss_mean'])}  ({elapsed:.1f} s)")
    out.print(f"wrote {out_dir / 'result.json'} and {out_dir / 'training.png'}")


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v[:3]) + (", ...]" if len(v) > 3 else "]")
    return "-" if v is None else str(v)
