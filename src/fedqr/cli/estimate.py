"""``fedqr estimate``: the bound's constants of a workload (a data set or ``--data FILE``, and
a model), and the options ``fedqr plan --method bound`` shares with it."""

# Fast --help (0.5 s, bench/cli_startup.py): only light modules at the top (the command
# imports torch and NumPy when it runs), and no "from __future__ import annotations" (typer
# reads the options from the annotations at every start; strings would cost ~1,000 compiles
# and evals, a tenth of the budget).
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fedqr._enums import DatasetName, Mechanism, PartitionKind
from fedqr._options import (
    AlphaOpt,
    DataDirOpt,
    NumClientsOpt,
)
from fedqr._validate import check_in_range, check_positive, check_seed
from fedqr.cli._common import (
    check_out_file,
    err,
    fail,
    fail_on,
    mechanism_for,
    out,
    write_json_atomic,
)
from fedqr.cli.data_options import (
    ClientColumnOpt,
    DataFileOpt,
    HiddenOpt,
    LabelColumnOpt,
    ModelOpt,
    StandardizeOpt,
    TestDataOpt,
    TestShareOpt,
)

if TYPE_CHECKING:
    from fedqr.cli.constants import EstimateSpec

__all__ = [
    "AlphaOpt",
    "CacheOpt",
    "ClipOpt",
    "DataDirOpt",
    "PartitionOpt",
    "PlanSeedOpt",
    "ProxyOpt",
    "SeedOpt",
    "WdOpt",
    "check_budget",
    "estimate",
    "estimate_spec",
]

DatasetOpt = Annotated[DatasetName | None, typer.Option(
    help="Data set to estimate on (default mnist; or --data FILE).")]
PartitionOpt = Annotated[PartitionKind | None, typer.Option(
    help="Partition into clients (default: by-writer for femnist, else two-digits).")]
MechOpt = Annotated[Mechanism, typer.Option(
    help="laplace or discrete-laplace (l1 clip), or gaussian (l2 clip); not none.")]
ClipOpt = Annotated[float | None, typer.Option(
    help="Clip xi (default: the paper's, 300 laplace (femnist 200), 10 gaussian).")]
QOpt = Annotated[float | None, typer.Option(help="Sampling rate q (gaussian default 0.01).")]
DeltaOpt = Annotated[float, typer.Option(help="delta per client (gaussian, discrete-laplace).")]
WdOpt = Annotated[float, typer.Option(help="L2 regularisation; mu >= weight decay.")]
ProxyOpt = Annotated[float | None, typer.Option(
    help="Estimate on this random share of each client's data, in (0, 1), instead of all of it.")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the partition (and proxy draw).")]
PlanSeedOpt = Annotated[int, typer.Option(
    help="Seed of the partition, the proxy draw and the twin's simulations: the plan depends "
         "on it (fedqr run --rounds auto --seed S runs the plan of --seed S).")]
CacheOpt = Annotated[bool, typer.Option(
    help="Reuse a cached estimate for the same settings (not with a model file).")]


def _checked(mechanism: Mechanism, num_clients: int, alpha: float, seed: int,
             sample_rate: float | None) -> float:
    """Check the options every estimate shares; the sampling rate q."""
    from fedqr.privacy.spec import check_private

    check_private(mechanism)
    if not num_clients >= 2:
        raise ValueError(f"num_clients must be >= 2, got num_clients={num_clients}")
    check_positive("alpha", alpha)
    check_seed("seed", seed)
    q = mechanism_for(mechanism).default_sample_rate if sample_rate is None else sample_rate
    if not 0 < q <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got sample_rate={q}")
    return q


def estimate_spec(dataset: DatasetName, partition: PartitionKind | None, num_clients: int,
                  alpha: float, mechanism: Mechanism, clip: float | None,
                  sample_rate: float | None, weight_decay: float, proxy_fraction: float | None,
                  seed: int) -> "EstimateSpec":
    """The spec of an estimate on a built-in data set with its paper model (presets filled)."""
    q = _checked(mechanism, num_clients, alpha, seed, sample_rate)
    from fedqr.cli.constants import EstimateSpec
    from fedqr.data.presets import default_clip, default_partition

    return EstimateSpec(
        dataset=dataset, partition=default_partition(dataset) if partition is None else partition,
        num_clients=num_clients, alpha=alpha, mechanism=mechanism,
        clip=default_clip(dataset, mechanism) if clip is None else clip,
        sample_rate=q, weight_decay=weight_decay, proxy_fraction=proxy_fraction, seed=seed)


def check_budget(eps: float, delta: float, mechanism: Mechanism) -> None:
    """``eps > 0`` and ``delta`` in the mechanism's range."""
    check_positive("eps", eps)
    check_in_range("delta", delta, 0, 1, low_open=mechanism_for(mechanism).needs_delta,
                   high_open=True)


def estimate(
    dataset: DatasetOpt = None,
    data: DataFileOpt = None,
    test_data: TestDataOpt = None,
    test_share: TestShareOpt = None,
    client_column: ClientColumnOpt = "client",
    label_column: LabelColumnOpt = "label",
    standardize: StandardizeOpt = True,
    model: ModelOpt = None,
    hidden: HiddenOpt = "64",
    partition: PartitionOpt = None,
    alpha: AlphaOpt = 0.5,
    num_clients: NumClientsOpt = None,
    mechanism: MechOpt = Mechanism.LAPLACE,
    clip: ClipOpt = None,
    sample_rate: QOpt = None,
    eps: Annotated[float, typer.Option(help="Budget written into the file.")] = 1.0,
    delta: DeltaOpt = 1e-5,
    weight_decay: WdOpt = 0.01,
    proxy_fraction: ProxyOpt = None,
    seed: SeedOpt = 0,
    out_path: Annotated[Path, typer.Option("--out", help="Constants JSON to write.")]
        = Path("constants.json"),
    data_dir: DataDirOpt = None,
    cache: CacheOpt = True,
) -> None:
    """Estimate mu, lambda, G, Gamma, Y0, Lambda_i of a workload: a data set and partition, or
    your --data FILE, with its model (no privacy!)."""
    from fedqr.data import DataNotFoundError
    from fedqr.theory import constants_from_json

    try:
        from fedqr._cli_checks import check_alpha_applies, check_budget_applies
        from fedqr.cli.scenario import check_full_batch_rate
        from fedqr.data.presets import default_partition

        check_budget_applies(mechanism, delta=delta)  # Laplace: pure eps-DP, no delta
        check_full_batch_rate(mechanism, None if sample_rate is None else str(sample_rate))
        if data is None:  # a data file's alpha is refused with its other recipe options
            check_alpha_applies((partition or default_partition(
                dataset or DatasetName.MNIST)).value, alpha)
        delta_used = mechanism_for(mechanism).client_delta(delta)
        check_budget(eps, delta_used, mechanism)
        check_out_file("out_path", out_path)
        opts = _Options(dataset=dataset, data=data, test_data=test_data, test_share=test_share,
                        client_column=client_column, label_column=label_column,
                        standardize=standardize, model=model, hidden=hidden,
                        partition=partition, alpha=alpha, num_clients=num_clients,
                        mechanism=mechanism, clip=clip, sample_rate=sample_rate,
                        weight_decay=weight_decay, proxy_fraction=proxy_fraction, seed=seed,
                        data_dir=data_dir)
        doc = _estimate_doc(opts, eps=eps, delta=delta_used, cache=cache)
        c = constants_from_json(json.dumps(doc))
    except (DataNotFoundError, OSError) as e:  # data found nowhere (2) or unreadable (1)
        raise fail_on(e) from None
    except ValueError as e:
        raise fail(str(e)) from None
    share = f"a {proxy_fraction:.0%} share of" if proxy_fraction else "all of"
    err.print(f"[yellow]note:[/] the estimate read {share} the clients' data WITHOUT "
              "differential privacy (--proxy-fraction reads less of it, still without "
              "privacy); to read none of it, estimate on public data of the same kind (--data "
              "PUBLIC_FILE) and plan with its constants (fedqr plan --constants)")
    write_json_atomic(out_path, doc)
    out.print(f"mu={c.mu:.4g} lambda={c.lam:.4g} gamma={c.gamma:.4g} G={c.G:.4g} "
              f"Gamma={c.Gamma:.4g} Y0={c.Y0:.4g} (clipped at theta_0: "
              f"{doc['estimate']['clipped_fraction']['theta_0']:.1%})")
    out.print(f"wrote {out_path}")


@dataclass(frozen=True)
class _Options:
    """The workload options of ``fedqr estimate``."""

    dataset: DatasetName | None
    data: Path | None
    test_data: Path | None
    test_share: float | None
    client_column: str
    label_column: str
    standardize: bool
    model: str | None
    hidden: str
    partition: PartitionKind | None
    alpha: float
    num_clients: int | None
    mechanism: Mechanism
    clip: float | None
    sample_rate: float | None
    weight_decay: float
    proxy_fraction: float | None
    seed: int
    data_dir: Path | None


def _estimate_doc(o: _Options, *, eps: float, delta: float, cache: bool) -> dict[str, Any]:
    """Check the options, build the spec (and a data file's workload), estimate or read the
    cache."""
    from fedqr._cli_checks import check_hidden_applies
    from fedqr.cli.constants import estimate_for
    from fedqr.data.presets import default_model_name

    if o.data is not None:
        return _own_estimate(o, eps=eps, delta=delta, cache=cache)
    for name, given in (("test_data", o.test_data), ("test_share", o.test_share)):
        if given is not None:
            raise ValueError(f"{name} needs --data FILE, got {name}={given}")
    dataset = o.dataset or DatasetName.MNIST
    check_hidden_applies(o.model or default_model_name(dataset), o.hidden)
    model, widths = _model_key(o.model, o.hidden, dataset)
    spec = replace(estimate_spec(dataset, o.partition,
                                 10 if o.num_clients is None else o.num_clients, o.alpha,
                                 o.mechanism, o.clip, o.sample_rate, o.weight_decay,
                                 o.proxy_fraction, o.seed), model=model, hidden=widths)
    with err.status("estimating constants (Hessian eigenvalues, local optima) ..."):
        return estimate_for(spec, data_dir=o.data_dir, eps=eps, delta=delta,
                            use_cache=cache and _cacheable(model))


def _own_estimate(o: _Options, *, eps: float, delta: float, cache: bool) -> dict[str, Any]:
    """The estimate of a data file (``--data``) and its model."""
    from fedqr.cli.constants import EstimateSpec, estimate_for
    from fedqr.cli.scenario import workload
    from fedqr.data.presets import default_clip
    from fedqr.data.source import OwnData

    work = workload(  # refuses the built-in options (--dataset, --partition, --data-dir)
        dataset=o.dataset, partition=o.partition, alpha=o.alpha, fraction=1.0,
        num_clients=o.num_clients, seed=o.seed, data_dir=o.data_dir, data=o.data,
        test_data=o.test_data, test_share=o.test_share, client_column=o.client_column,
        label_column=o.label_column, standardize=o.standardize, model=o.model,
        hidden=o.hidden)
    source, kernel, client_data = work.data, work.kernel, work.build()
    assert isinstance(source, OwnData)  # --data was given
    if source.num_clients < 2:  # said of the file, not of --num-clients (not typed)
        raise ValueError(f"data must hold at least 2 clients for the bound's constants, got "
                         f"{source.num_clients} client in data={str(o.data)!r}")
    model, widths = _model_key(o.model, o.hidden, None)
    spec = EstimateSpec(
        dataset=None, partition=None, num_clients=source.num_clients, alpha=None,
        mechanism=o.mechanism, clip=default_clip(None, o.mechanism) if o.clip is None
        else o.clip, sample_rate=_checked(o.mechanism, source.num_clients, o.alpha, o.seed,
                                          o.sample_rate),
        weight_decay=o.weight_decay, proxy_fraction=o.proxy_fraction, seed=o.seed,
        model=model, hidden=widths, data=source.data.digest)
    with err.status(f"estimating constants of {kernel.name} on {o.data} ..."):
        return estimate_for(spec, data_dir=None, eps=eps, delta=delta,
                            use_cache=cache and _cacheable(model),
                            workload=(client_data, kernel), identity=source.identity())


def _model_key(model: str | None, hidden: str,
               dataset: DatasetName | None) -> tuple[str | None, str | None]:
    """``(model, hidden)`` of the spec: ``(None, None)`` for the data's default model."""
    from fedqr.cli.data_options import parse_hidden
    from fedqr.data.presets import default_model_name

    if model is None or (model == default_model_name(dataset) and model != "mlp"):
        return None, None
    if model == "mlp":
        return model, ",".join(str(h) for h in parse_hidden(hidden))
    return model, None


def _cacheable(model: str | None) -> bool:
    """A model file can change under the same name: its estimates are not cached."""
    return model is None or model in ("logreg", "linear", "mlp", "cnn")
