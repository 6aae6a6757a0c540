"""``fedqr plan --method bound|paper``: the paper's bound U(T, b) and its minimisers.

Light imports only at the top (``fedqr --help`` stays fast: bench/cli_startup.py); the
estimator, the tables and the figures are imported when a bound is planned.
"""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fedqr._enums import Accountant, DatasetName, Mechanism, PartitionKind, Rounding
from fedqr.cli._common import (
    FIGURE_SUFFIXES,
    check_out_file,
    err,
    fail,
    fail_on,
    mechanism_for,
    out,
    write_file_atomic,
)
from fedqr.cli.estimate import check_budget as _check_budget
from fedqr.cli.estimate import estimate_spec as _spec

if TYPE_CHECKING:
    from fedqr.theory import ProblemConstants

__all__ = ["doc_constants", "plan_bound"]


def plan_bound(
    *, eps_list: list[float], mechanism: Mechanism, constants: Path | None,
    dataset: DatasetName | None, rounding: Rounding, t_max: int, accountant: Accountant,
    delta: float, partition: PartitionKind | None, alpha: float, num_clients: int,
    clip: float | None, sample_rate: float | None, weight_decay: float,
    proxy_fraction: float | None, seed: int, data_dir: Path | None, cache: bool,
    as_json: bool, plot: Path | None,
) -> None:
    """The paper's bound: optimal T and b for each budget eps (``--method bound|paper``)."""
    from fedqr._cli_checks import check_budget_applies, given
    from fedqr.cli.constants import estimate_for, read_constants
    from fedqr.cli.tables import print_gaussian, print_laplace
    from fedqr.data import DataNotFoundError
    from fedqr.data.presets import is_table_one_setting
    from fedqr.privacy import PaperBound
    from fedqr.theory import constants_from_json
    from fedqr.theory.tables import gaussian_rows, laplace_rows

    try:
        read = read_constants(constants) if constants is not None else None
        if read is not None and not given("mechanism"):  # the one they were estimated for
            mechanism = _estimated_mechanism(read[1]) or mechanism
        spec = mechanism_for(mechanism)
        check_budget_applies(mechanism, delta=delta)
        for e in eps_list:
            _check_budget(e, delta, mechanism)
        check_out_file("plot", plot, suffixes=FIGURE_SUFFIXES)
        if (constants is None) == (dataset is None):
            raise ValueError("give exactly one of --constants FILE or --dataset NAME, got "
                             f"constants={constants}, dataset={dataset}")
        if spec.bound is None:
            covered = ", ".join(m.value for m in Mechanism if mechanism_for(m).bound)
            raise ValueError(f"mechanism must be one the paper's bounds cover ({covered}; "
                             f"plan others with --method twin), got "
                             f"mechanism={mechanism.value!r}")
        if not isinstance(t_max, int) or t_max < 1:
            raise ValueError(f"t_max must be an integer >= 1, got t_max={t_max}")
        source: dict[str, Any]
        if dataset is not None:
            est = _spec(dataset, partition, num_clients, alpha, mechanism, clip, sample_rate,
                        weight_decay, proxy_fraction, seed)
            with err.status(f"estimating constants on {dataset.value} ..."):
                doc = estimate_for(est, data_dir=data_dir, eps=eps_list[0],
                                   delta=spec.client_delta(delta), use_cache=cache)
            base = constants_from_json(json.dumps(doc))
            source = {"dataset": dataset.value, "estimate": doc["estimate"]}
        else:
            assert constants is not None and read is not None
            base, doc = read
            _check_constants_fit(doc, base, mechanism=mechanism, clip=clip,
                                 sample_rate=sample_rate)
            source = {"constants_file": str(constants)}
        base = _for_mechanism(base, mechanism, delta)
        # the paper's two theorems give two tables (Theorem 3: closed forms; Theorem 4: an
        # accountant-calibrated grid): a branch on the theorem, not on the mechanism
        closed_form = spec.bound is PaperBound.THEOREM_3
        paper_ok = closed_form and is_table_one_setting(dataset, partition, base.N, base.xi)
        if closed_form:
            rows, panels = laplace_rows(base, eps_list, rounding=rounding)
        else:
            with err.status("calibrating the Gaussian noise over the (T, b) grid ..."):
                rows, panels = gaussian_rows(base, eps_list, t_max=t_max,
                                             accountant=accountant)
    except DataNotFoundError as e:
        raise fail_on(e) from None
    except ValueError as e:
        raise fail(str(e)) from None
    except (OverflowError, ZeroDivisionError):  # eps 1e308 or 1e-320 in the closed forms
        raise fail(f"eps must be a budget the bound's closed forms can compute in floating "
                   f"point, got eps={' '.join(f'{e:g}' for e in eps_list)} (they overflow "
                   f"there: a budget between about 1e-6 and 1e6 works)") from None
    result = {"mechanism": mechanism.value, "rounding": rounding.value, "source": source,
              "constants": json.loads(json.dumps(doc_constants(base))), "table": rows}
    if plot is not None:
        from fedqr.experiments.plots import plot_bound_grid

        write_file_atomic(plot, lambda p: plot_bound_grid(panels, p))
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    if closed_form:
        print_laplace(base, rows, compare_paper=paper_ok, source=source)
    else:
        print_gaussian(base, rows, t_max=t_max, source=source)
    if plot is not None:
        out.print(f"wrote {plot}")


def _check_constants_fit(doc: dict[str, Any], base: "ProblemConstants", *,
                         mechanism: Mechanism, clip: float | None,
                         sample_rate: float | None) -> None:
    """Options the constants file already fixes are refused where they disagree with it, not
    ignored: the clip (``xi``, which the constants were estimated with), the mechanism's norm
    (l1 for Laplace, l2 for Gaussian: G and Lambda_2 are measured in it), and a sampling rate
    for a mechanism that reads every row."""
    spec = mechanism_for(mechanism)
    if clip is not None and clip != base.xi:
        raise ValueError(f"clip is fixed by --constants (xi={base.xi:g}, the clip they were "
                         f"estimated with), got clip={clip:g}: leave --clip out, or estimate "
                         f"again with --clip {clip:g}")
    estimated = _estimated_mechanism(doc)
    if estimated is not None:
        was = mechanism_for(estimated)
        if was.norm is not spec.norm:
            raise ValueError(
                f"mechanism must clip in the norm the constants were estimated with "
                f"({estimated.value}: {was.norm.value}), got mechanism={mechanism.value!r} "
                f"({spec.norm.value}): estimate again with --mechanism {mechanism.value}")
    if sample_rate is not None:
        spec.check(clip=base.xi, sample_rate=sample_rate)


def _estimated_mechanism(doc: dict[str, Any]) -> Mechanism | None:
    """The mechanism a constants file was estimated for (``None``: it does not say)."""
    estimated = (doc.get("estimate") or {}).get("spec", {}).get("mechanism")
    if isinstance(estimated, str) and estimated in {m.value for m in Mechanism}:
        return Mechanism(estimated)
    return None


def _for_mechanism(c: "ProblemConstants", mechanism: Mechanism,
                   delta: float) -> "ProblemConstants":
    """Budgets of the mechanism: its delta (0 for pure DP) and its batch rate (1 without
    sampling)."""
    from dataclasses import replace

    spec = mechanism_for(mechanism)
    return replace(c, delta_i=(spec.client_delta(delta),) * c.N, q=spec.batch_rate(c.q))


def doc_constants(c: "ProblemConstants") -> dict[str, Any]:
    """The constants as the JSON document of :func:`fedqr.theory.constants_to_json`."""
    from fedqr.theory import constants_to_json

    out_doc: dict[str, Any] = json.loads(constants_to_json(c))
    out_doc.pop("eps_i", None)
    return out_doc
