"""``fedqr audit``: an empirical lower bound on a scenario's epsilon (a canary attack)."""

# Fast --help (0.5 s, bench/cli_startup.py): only light modules at the top (the commands
# import torch, dp-accounting and flwr when they run), and no
# "from __future__ import annotations" (typer reads the options from the annotations at
# every start; strings would cost ~1,000 compiles and evals, a tenth of the budget).
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from fedqr._enums import Accountant, Mechanism, ThreatModel
from fedqr.cli._common import check_out_file, fail, mechanism_for, out, write_json_atomic
from fedqr.cli.run_options import AccountantOpt


def _check_out(path: Path | None) -> None:
    """Refuse an output path that cannot be written, before any work (a trial file, as every
    command's ``--out``: a folder the user may not write into, ``/proc``, is found out)."""
    check_out_file("out_file", path)


def audit(
    mechanism: Annotated[Mechanism, typer.Option(
        metavar="[laplace|gaussian]",  # the others are refused, with the reason
        help="Client-side DP mechanism to audit: laplace or gaussian (the densities the canary "
             "game is derived for).")]
        = Mechanism.GAUSSIAN,
    eps: Annotated[float, typer.Option(help="Claimed epsilon of every client (> 0).")] = 1.0,
    delta: Annotated[float, typer.Option(help="Claimed delta (gaussian; laplace claims 0).")]
        = 1e-5,
    clip: Annotated[float | None, typer.Option(
        help="Per-sample clip xi (l1 laplace, l2 gaussian); the canary's norm. Default: "
             "laplace 300, gaussian 10.")] = None,
    sample_rate: Annotated[float | None, typer.Option(
        help="q, Poisson sampling rate (gaussian default 0.01; laplace 1).")] = None,
    accountant: AccountantOpt = Accountant.RDP,
    num_clients: Annotated[int, typer.Option(help="N, the number of clients.")] = 10,
    clients_per_round: Annotated[int, typer.Option(help="b, replies per round (1..N).")] = 10,
    rounds: Annotated[int, typer.Option(help="T, the number of queries (rounds).")] = 100,
    seed: Annotated[int, typer.Option(help="Seed of every draw of the audit.")] = 0,
    trials: Annotated[int, typer.Option(
        help="Simulated runs per world (with and without the canary), >= 10; half choose "
             "the test, half evaluate it.")] = 10_000,
    one_reply_trials: Annotated[int, typer.Option(
        help="Simulated single replies per world of the one-reply audit, >= 10.")]
        = 4_000_000,
    confidence: Annotated[float, typer.Option(
        help="Probability that every reported lower bound holds, in (0, 1).")] = 0.95,
    threat_model: Annotated[ThreatModel, typer.Option(
        help="What the adversary sees: replies (every reply of the client), final-model "
             "(only theta_T), one-reply (one reply with the canary in its batch, against "
             "the per-reply claim the accountant composes), both (replies and "
             "final-model) or all.")] = ThreatModel.ALL,
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="Write the audit as JSON to this file.")] = None,
) -> None:
    """Attack a scenario with a worst-case canary and bound its epsilon from below.

    Exits 0 when no bound exceeds its claim, 1 when one does (a privacy violation, proven
    with the stated confidence; the JSON is still written), 2 on bad input.
    """
    from fedqr._cli_checks import check_accountant_applies, check_budget_applies, given
    from fedqr.audit import AuditConfig, run_audit

    try:
        # defaults as fedqr run on MNIST (the audit's figures do not depend on the clip)
        check_accountant_applies(mechanism, accountant)
        check_budget_applies(mechanism, delta=delta)  # laplace claims delta 0
        spec = mechanism_for(mechanism)
        if not given("accountant"):  # the mechanism's own (Laplace: pure), as fedqr run's
            accountant = spec.accountant(Accountant.RDP) or Accountant.RDP
        q = sample_rate if sample_rate is not None else spec.default_sample_rate
        config = AuditConfig(
            mechanism=mechanism, eps=eps, delta=delta,
            clip=clip if clip is not None else spec.default_clip, sample_rate=q,
            accountant=accountant, num_clients=num_clients,
            clients_per_round=clients_per_round, rounds=rounds, seed=seed, trials=trials,
            one_reply_trials=one_reply_trials, confidence=confidence,
            threat_model=threat_model)
        _check_out(out_file)
        report = run_audit(config)
    except ValueError as e:
        raise fail(str(e)) from None
    doc = report.to_json()
    if out_file is not None:
        write_json_atomic(out_file, doc)
    table = Table(title=f"fedqr audit: {mechanism.value}, client {report.client} "
                        f"({report.replies} replies)")
    for col in ("adversary sees", "n", "in if >=", "TPR lo", "FPR hi", "eps >=",
                "claim"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in report.results:
        ev = r.evaluation
        table.add_row(r.threat_model.value, f"{ev.trials_in}",
                      f"{ev.threshold:.3g}", f"{ev.rate_lower:.4f}",
                      f"{ev.false_rate_upper:.4f}", f"{r.epsilon_lower_bound:.3g}",
                      f"{r.epsilon_claimed:.3g}" + (" [bold red]VIOLATED[/]"
                                                   if r.violation else ""))
    out.print(table)
    verdict = ("[bold red]VIOLATION[/]: a lower bound exceeds its claim" if report.violation
               else "no violation found (a lower bound below the claim is not a proof)")
    out.print(f"every bound holds with confidence {confidence:g}: {verdict}  "
              f"({report.wall_time_s:.1f} s)")
    if out_file is not None:
        out.print(f"wrote {out_file}")
    if report.violation:
        raise typer.Exit(code=1)
