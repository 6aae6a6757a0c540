"""The command-line options that ``fedqr run | plan | estimate`` and ``fedqr flower ...``
declare alike: one typer ``Annotated`` alias each, defined once.

Light on purpose (``--help`` in 0.5 s): typer, pathlib and the light enums only. It sits
below :mod:`fedqr.cli` and :mod:`fedqr.flower` because :mod:`fedqr.cli` imports the Flower
commands at its own import. An option whose help differs by command (a Flower ``run:`` note,
a command-specific default) keeps its own alias beside the command.
"""

# No "from __future__ import annotations": typer reads the aliases at every start.
from pathlib import Path
from typing import Annotated

import typer

from fedqr._enums import Aggregation, Mechanism

__all__ = ["AggregationOpt", "AlphaOpt", "ClientColumnOpt", "DataDirOpt", "DeviceOpt",
           "HiddenOpt", "LabelColumnOpt", "LrDecayOpt", "LrOpt", "MechanismOpt", "ModelOpt",
           "NumClientsOpt", "TestShareOpt"]

AlphaOpt = Annotated[float, typer.Option(help="Dirichlet concentration (> 0).")]
NumClientsOpt = Annotated[int | None, typer.Option(
    help="N, the number of clients (default 10; with --data: the file's).")]
DataDirOpt = Annotated[Path | None, typer.Option(help="Folder with the data files.")]
MechanismOpt = Annotated[Mechanism, typer.Option(help="Client-side DP mechanism.")]
LrOpt = Annotated[float, typer.Option(help="Initial learning rate eta0.")]
LrDecayOpt = Annotated[float, typer.Option(help="eta_t = lr / (1 + lr_decay t).")]
AggregationOpt = Annotated[Aggregation, typer.Option(help="Server aggregation rule.")]
DeviceOpt = Annotated[str, typer.Option(help="auto, cpu or cuda.")]
TestShareOpt = Annotated[float | None, typer.Option(
    help="With --data and no test set: the share of each client's rows held out for testing "
         "(stratified by label), in (0, 1).")]
ClientColumnOpt = Annotated[str, typer.Option(help="With --data (csv/parquet): client column.")]
LabelColumnOpt = Annotated[str, typer.Option(help="With --data (csv/parquet): label column.")]
ModelOpt = Annotated[str | None, typer.Option(
    help="logreg (softmax regression without intercept: the paper's model, the fast path), "
         "linear (the same with an intercept: learns the label frequencies), mlp "
         "(see --hidden), cnn (the paper's CNN, square images) or FILE.py:FUNCTION "
         "(a factory (input_shape, num_classes) -> torch.nn.Module). Default: the data set's "
         "paper model (logreg for mnist and digits, cnn for femnist); linear for --data.")]
HiddenOpt = Annotated[str, typer.Option(help="mlp: hidden widths, comma-separated.")]
