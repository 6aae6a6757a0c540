"""The options of ``fedqr flower simulate | deploy | run``: one Annotated alias each, and the
value object :class:`FlowerOptions` they fill.

Light on purpose (``fedqr flower --help``): typer, the light enums and pathlib only. The
options that ``fedqr run``/``plan`` declare alike come from :mod:`fedqr._options`; those here
carry Flower's own help (``run:`` notes) or exist only for Flower.
"""

# No "from __future__ import annotations": typer reads the aliases at every start.
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from fedqr._enums import Accountant, Aggregation, DatasetName, Mechanism, PartitionKind

__all__ = ["FlowerOptions"]

DatasetOpt = Annotated[DatasetName, typer.Option(
    help="Built-in data set (or --data FILE).")]
FractionOpt = Annotated[float, typer.Option(help="Share of the training set (0, 1].")]
PartitionOpt = Annotated[PartitionKind | None, typer.Option(
    help="How data are split (default: the data set's, femnist by-writer, else two-digits).")]
DataOpt = Annotated[Path | None, typer.Option(
    "--data", help="Your own federated data instead of --dataset, as fedqr run --data reads "
                   "it: .npz (x, y, client, optional x_test, y_test), .csv or .parquet "
                   "(columns client, label and the features); each client gets its rows. "
                   "run: not used (the SuperNodes hold the rows; see --test-data).")]
TestDataOpt = Annotated[Path | None, typer.Option(
    help="With --data: a separate test file in the same format. run: the server's test set "
         "(the clients bring their own rows).")]
StandardizeOpt = Annotated[bool, typer.Option(
    "--standardize/--no-standardize",
    help="With --data: standardise every feature (images: every channel) by the training "
         "rows' mean and std (pooled "
         "over the clients, as fedqr run does; run: the --test-data file by its own); "
         "--no-standardize uses them as given.")]
ClientsPerRoundOpt = Annotated[str, typer.Option(
    help="b, replies per round (1..N); run: or 'auto' (planned, see --proxy-dataset and "
         "--proxy-data). Default: 10, or N where there are fewer clients.",
    show_default=False)]
RoundsOpt = Annotated[str, typer.Option(help="T, the number of rounds; run: or 'auto'.")]
EpsOpt = Annotated[str, typer.Option(
    help="Epsilon per client: one value or N (default 1; run: each client's own).")]
DeltaOpt = Annotated[str, typer.Option(
    help="Delta per client (gaussian, discrete-laplace): one or N.")]
ClipOpt = Annotated[float | None, typer.Option(
    help="Per-sample clip (l1 laplace, l2 gaussian). Default: the paper's, laplace 300 "
         "(femnist 200), gaussian 10; none without noise.")]
SampleRateOpt = Annotated[str | None, typer.Option(
    help="q, Poisson sampling rate (gaussian default 0.01; laplace 1); run: or 'auto'.")]
AccountantOpt = Annotated[Accountant, typer.Option(help="rdp or pld (gaussian).")]
WeightDecayOpt = Annotated[float, typer.Option(help="L2 regularisation.")]
SeedOpt = Annotated[int, typer.Option(help="Seed: partition, batches, noise.")]
RoundTimeoutOpt = Annotated[float, typer.Option(
    help="Seconds to wait for a round's replies; later ones are lost.")]
ConnectTimeoutOpt = Annotated[float, typer.Option(
    help="Seconds to wait for all N clients to connect.")]
MinRepliesOpt = Annotated[int, typer.Option(help="Stop when a round gets fewer replies (1..b).")]
StateDirOpt = Annotated[Path | None, typer.Option(
    help="Clients' ledgers (client-<i>/state.json); default: a fresh folder.")]
WorkDirOpt = Annotated[Path | None, typer.Option(
    help="Keep app, logs and state here (default: a temporary folder, removed).")]
TimeoutOpt = Annotated[float, typer.Option(help="Seconds for the whole run.")]
OutOpt = Annotated[Path, typer.Option("--out", help="Output folder.")]
SuperlinkOpt = Annotated[str | None, typer.Option(
    help="run: the SuperLink, HOST:PORT (run this on the server's machine).")]
RootCertificatesOpt = Annotated[Path | None, typer.Option(
    help="run: ca.pem of the SuperLink's CA (TLS).")]
InsecureOpt = Annotated[bool, typer.Option(help="run: no TLS (loopback only).")]
ProxyDatasetOpt = Annotated[DatasetName | None, typer.Option(
    help="run with auto: the public data set (mnist, digits) the server plans on, with the "
         "sizes and budgets the clients report.")]
ProxyDataOpt = Annotated[Path | None, typer.Option(
    help="run with auto: a public data file (the --data format) the server plans on instead "
         "of --proxy-dataset, standardised by its own statistics; its rows are dealt to the N "
         "clients by the sizes they report.")]
ProxyClassesOpt = Annotated[str | None, typer.Option(
    help="With --proxy-data: the proxy classes kept, e.g. 0-9 or 0,1,5 (relabelled 0..k-1 in "
         "that order), or MAP.json, a label map {\"proxy label\": deployment label}.")]
NodeTimeoutOpt = Annotated[float | None, typer.Option(
    help="deploy: a SuperNode silent this many s (5..3600) is gone and its reply lost "
         "(default: Flower's, 20 s). run: set it on fedqr flower superlink.")]


@dataclass(frozen=True, kw_only=True)
class FlowerOptions:
    """The command line of ``fedqr flower simulate | deploy | run`` as given (see the
    aliases above for each option's meaning)."""

    dataset: DatasetName
    data_dir: Path | None
    fraction: float
    partition: PartitionKind | None
    alpha: float
    num_clients: int | None
    data: Path | None
    test_data: Path | None
    test_share: float | None
    client_column: str
    label_column: str
    standardize: bool
    model: str | None
    hidden: str
    clients_per_round: str
    rounds: str
    mechanism: Mechanism
    eps: str
    delta: str
    clip: float | None
    sample_rate: str | None
    accountant: Accountant
    lr: float
    lr_decay: float
    weight_decay: float
    aggregation: Aggregation
    seed: int
    round_timeout: float
    connect_timeout: float
    min_replies: int
    state_dir: Path | None
    work_dir: Path | None
    timeout: float
    out_dir: Path
    superlink: str | None
    root_certificates: Path | None
    insecure: bool
    proxy_dataset: DatasetName | None
    proxy_data: Path | None
    proxy_classes: str | None
    node_timeout: float | None
