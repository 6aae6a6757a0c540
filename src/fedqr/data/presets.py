"""The paper's presets, in one table: per built-in data set, its default partition, model,
clip bound per mechanism and evaluation cadence.

Every command (``fedqr run``/``plan``/``estimate``, ``fedqr flower ...``, ``fedqr reproduce``)
and the library read them here: :func:`default_partition`, :func:`default_model_name`,
:func:`default_clip` and :func:`default_eval_every`. A user's own data (``--data FILE``) has
no row: it trains ``linear`` (softmax regression with an intercept; the paper's ``logreg``
has none, so it cannot learn imbalanced label frequencies) unless told otherwise, with the
mechanism's default clip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from fedqr.data.datasets import DatasetName
from fedqr.data.partition import PartitionKind
from fedqr.privacy import Mechanism, mechanism_for

__all__ = ["OWN_DATA_MODEL", "PRESETS", "Preset", "default_clip", "default_eval_every",
           "default_model_name",
           "default_partition", "is_table_one_setting"]


@dataclass(frozen=True)
class Preset:
    """The paper's settings for one data set.

    Attributes
    ----------
    partition:
        How the training set is split into clients by default.
    model:
        The model trained by default (a :class:`fedqr.models.factory.ModelName` value).
    clip:
        Clip bounds that differ from the mechanism's own default (MNIST's).
    evaluations:
        ``None``: evaluate every round; else about this many evaluations per run (each is
        costly, e.g. the CNN's forward pass on a CPU).
    num_features, num_classes:
        One sample's features and the classes (known without loading the data).
    """

    partition: PartitionKind
    model: str
    num_features: int
    num_classes: int
    clip: Mapping[Mechanism, float] = field(default_factory=lambda: MappingProxyType({}))
    evaluations: int | None = None


PRESETS: Mapping[DatasetName, Preset] = MappingProxyType({
    DatasetName.MNIST: Preset(partition=PartitionKind.TWO_DIGITS, model="logreg",
                              num_features=784, num_classes=10),
    DatasetName.DIGITS: Preset(partition=PartitionKind.TWO_DIGITS, model="logreg",
                               num_features=64, num_classes=10),
    DatasetName.FEMNIST: Preset(partition=PartitionKind.BY_WRITER, model="cnn",
                                num_features=784, num_classes=62,
                                clip=MappingProxyType({Mechanism.LAPLACE: 200.0}),
                                evaluations=20),
})
"""The paper's settings (Section VII): MNIST xi1 = 300, xi2 = 10 (the mechanisms' defaults);
FEMNIST xi1 = 200 with the CNN on whole writers."""


def _preset(dataset: DatasetName | str | None) -> Preset | None:
    """The preset of a built-in data set; ``None`` for a user's data (or no name)."""
    if dataset is None or dataset not in DatasetName._value2member_map_:
        return None
    return PRESETS.get(DatasetName(dataset))


def default_partition(dataset: DatasetName) -> PartitionKind:
    """The paper's partition of ``dataset``."""
    preset = _preset(dataset)
    return preset.partition if preset is not None else PartitionKind.IID


OWN_DATA_MODEL = "linear"
"""The model of a user's own data: softmax regression with an intercept, on the fused path
of the paper's ``logreg`` (UCI Adult at Gaussian eps 2: 0.387 against 0.566 without the
intercept; balanced MNIST: the same loss)."""


def default_model_name(dataset: DatasetName | str | None) -> str:
    """The paper's model of ``dataset`` (:data:`OWN_DATA_MODEL`, ``linear``, for a user's own
    data)."""
    preset = _preset(dataset)
    return preset.model if preset is not None else OWN_DATA_MODEL


def default_clip(dataset: DatasetName | str | None, mechanism: Mechanism) -> float:
    """The paper's clip bound for ``mechanism`` on ``dataset`` (a user's data: the
    mechanism's default)."""
    preset = _preset(dataset)
    clip = preset.clip.get(mechanism) if preset is not None else None
    return clip if clip is not None else mechanism_for(mechanism).default_clip


DEFAULT_CLIENTS_PER_ROUND = 10
"""b when none is given: the paper's experiments' (Section VII), or every client of a
federation of fewer."""


def default_clients_per_round(num_clients: int) -> int:
    """:data:`DEFAULT_CLIENTS_PER_ROUND`, or ``num_clients`` where that is fewer."""
    return min(DEFAULT_CLIENTS_PER_ROUND, num_clients)


def default_eval_every(dataset: DatasetName | str | None, rounds: int) -> int:
    """Every round, or about ``evaluations`` evaluations per run where the preset says so."""
    preset = _preset(dataset)
    if preset is None or preset.evaluations is None:
        return 1
    return max(1, rounds // preset.evaluations)


TABLE_ONE = (DatasetName.MNIST, PartitionKind.TWO_DIGITS, 10, 300.0)
"""The setting of the paper's Table I (Laplace): MNIST, two digits per client, N = 10,
xi1 = 300."""


def is_table_one_setting(dataset: DatasetName | str | None, partition: PartitionKind | None,
                         num_clients: int, clip: float) -> bool:
    """Whether a Laplace plan is made in the paper's Table I setting (``partition=None``:
    the data set's default)."""
    if dataset is None or _preset(dataset) is None:
        return False
    name = DatasetName(dataset)
    kind = default_partition(name) if partition is None else partition
    return (name, kind, num_clients, clip) == TABLE_ONE
