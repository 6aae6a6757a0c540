"""The options of ``fedqr run`` that no other command shares (typer annotations).

Light imports only (``fedqr --help`` stays fast: bench/cli_startup.py), and no
``from __future__ import annotations`` (typer reads the options from the annotations).
"""

from pathlib import Path
from typing import Annotated

import typer

from fedqr._enums import Accountant, DatasetName, DataUse, LrSchedule, PartitionKind, Selection

__all__ = [
    "ACCOUNTANT_HELP", "AccountantOpt", "ArithmeticOpt", "ClientsPerRoundOpt", "ClipOpt",
    "DataUseOpt",
    "DatasetOpt", "DeltaOpt", "EpsOpt", "EvalEveryOpt", "EvalTrainOpt", "FractionOpt",
    "GammaOpt", "LrScheduleOpt", "MuOpt", "OutDirOpt", "PartitionOpt", "PilotShareOpt",
    "PlanCacheOpt",
    "ProxyDatasetOpt", "RepeatsOpt", "RoundsOpt", "SampleRateOpt", "SeedOpt", "SelectionOpt",
    "WeightDecayOpt",
]

DatasetOpt = Annotated[DatasetName | None, typer.Option(
        help="Data set (default mnist): mnist and digits train softmax regression, femnist the "
             "paper's CNN.")]
PartitionOpt = Annotated[PartitionKind | None, typer.Option(
        help="two-digits: the paper's non-iid split; iid; dirichlet (see --alpha); by-writer "
             "(FEMNIST's whole writers). Default: by-writer for femnist, else two-digits.")]
FractionOpt = Annotated[float, typer.Option(
        help="Share of the training set used, in (0, 1]: a class-stratified subset drawn "
             "from --seed (the test set stays whole).")]
ClientsPerRoundOpt = Annotated[str | None, typer.Option(
        help="b, replies per round (1..N), or 'auto': planned (see fedqr plan). Default: 10, "
             "or N where the data have fewer clients.")]
RoundsOpt = Annotated[str, typer.Option(
        help="T, the number of queries (rounds), or 'auto': planned (see fedqr plan).")]
EpsOpt = Annotated[str, typer.Option(
        help="Epsilon per client: one value or N comma-separated, for the clients in the "
             "sorted order of their ids (result.json's clients[i].name).")]
DeltaOpt = Annotated[str, typer.Option(
    help="Delta per client (gaussian, discrete-laplace): one or N values.")]
ClipOpt = Annotated[float | None, typer.Option(
        help="Per-sample clip xi (l1 for laplace, l2 for gaussian). Default: the paper's, "
             "laplace 300 (femnist 200), gaussian 10; none without noise.")]
SampleRateOpt = Annotated[str | None, typer.Option(
        help="q, Poisson sampling rate of the local batch (gaussian default 0.01; laplace 1), "
             "or 'auto' (gaussian): planned.")]
ACCOUNTANT_HELP = ("Accountant of gaussian noise: rdp (the default) or pld. laplace "
                   "composes purely (pure, its default) and discrete-laplace by pld (its "
                   "default, spending a delta): leave it out for them.")
AccountantOpt = Annotated[Accountant, typer.Option(help=ACCOUNTANT_HELP, show_default=False)]
LrScheduleOpt = Annotated[LrSchedule, typer.Option(
        help="inverse-time: lr / (1 + lr_decay t); constant; theory: 2 / (mu (t + gamma)).")]
MuOpt = Annotated[float | None, typer.Option(help="Strong convexity mu (theory schedule).")]
GammaOpt = Annotated[float | None, typer.Option(help="gamma = 2 lambda / mu (theory schedule).")]
WeightDecayOpt = Annotated[float, typer.Option(help="L2 regularisation (strong convexity).")]
SelectionOpt = Annotated[Selection, typer.Option(help="Client selection.")]
RepeatsOpt = Annotated[int, typer.Option(
        help="Independent repeats: one batch for mnist/digits, one after another for femnist.")]
SeedOpt = Annotated[int, typer.Option(
    help="Seed for partition, schedule and noise; with --rounds auto also the plan's "
         "(as fedqr plan --seed).")]
EvalEveryOpt = Annotated[int | None, typer.Option(
        help="Evaluate every this many rounds. Default: every round; femnist about 20 "
             "evaluations (each is a forward pass over the test set).")]
EvalTrainOpt = Annotated[str, typer.Option(
        help="When the training objective is evaluated: every (at every evaluation), end (the "
             "final one only), none, or sample:N (at every evaluation, estimated from N "
             "training rows, with its standard error).")]
ArithmeticOpt = Annotated[str, typer.Option(
        help="float32, mixed (softmax regression's full-batch passes: bfloat16 logits and "
             "exact integer gradient sums of integer-coded rows such as images; the same "
             "clipping, budgets and noise) or auto (mixed where the CPU has bfloat16 and int8 "
             "products).")]
OutDirOpt = Annotated[Path, typer.Option("--out", help="Output folder (result.json, PNG).")]
DataUseOpt = Annotated[DataUse, typer.Option(
        help="With auto: what the planner's twin trains on (see fedqr plan).")]
ProxyDatasetOpt = Annotated[DatasetName | None, typer.Option(
        help="With auto: the public proxy (public-proxy, private-pilot).")]
PlanCacheOpt = Annotated[bool, typer.Option(
        "--cache/--no-cache",
        help="With auto: reuse the planner's cached simulations (--no-cache plans from "
             "scratch and stores nothing).")]
PilotShareOpt = Annotated[float | None, typer.Option(
        help="With auto and private-pilot: share of each budget the pilot spends.")]
