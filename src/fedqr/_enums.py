"""The enums of fedqr's options, in one module that imports nothing heavy.

The ``fedqr`` command line builds its ``--help`` from the types of its options, so these
classes must import without torch, dp-accounting, NumPy or Flower (``fedqr --help`` must
start in under half a second, see ``bench/cli_startup.py``). The packages' ``__init__``
modules import their heavy parts eagerly, so the classes cannot live in a light module of
their own package; each is defined here and re-exported by the module that owns it, where
every import of fedqr and of its users finds it:

- :class:`Mechanism`: :mod:`fedqr.privacy.mechanisms`;
  :class:`Accountant`: :mod:`fedqr.privacy.accounting`;
- :class:`DatasetName`: :mod:`fedqr.data.datasets`;
  :class:`PartitionKind`: :mod:`fedqr.data.partition`;
- :class:`ModelName`: :mod:`fedqr.models.factory`;
- :class:`Rounding`: :mod:`fedqr.theory.laplace`;
- :class:`Selection`, :class:`Aggregation`, :class:`LrSchedule`: :mod:`fedqr.sim.config`;
- :class:`Method`, :class:`DataUse`: :mod:`fedqr.planner.scenario`;
- :class:`ThreatModel`: :mod:`fedqr.audit.config`.

Like :mod:`fedqr._validate`, this module sits below every layer and imports only the
standard library.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Accountant", "Aggregation", "DataUse", "DatasetName", "LrSchedule", "Mechanism",
           "Method", "ModelName", "PartitionKind", "Rounding", "Selection", "ThreatModel"]


# --- fedqr.privacy ---------------------------------------------------------------------------

class Mechanism(StrEnum):
    """Which noise a client adds to its reply."""

    LAPLACE = "laplace"
    """Laplace noise, l1 clipping, replace-one neighbours, pure eps-DP (delta = 0)."""
    GAUSSIAN = "gaussian"
    """Gaussian noise, l2 clipping, Poisson sampling, add/remove-one, (eps, delta)-DP."""
    NONE = "none"
    """No noise and no privacy guarantee (non-private baseline)."""
    DISCRETE_LAPLACE = "discrete-laplace"
    """Exact discrete Laplace on integer-quantised replies, l1 clipping, PLD-accounted."""


class Accountant(StrEnum):
    """Which privacy accountant to use."""

    RDP = "rdp"
    """dp-accounting ``RdpAccountant`` (default orders)."""
    PLD = "pld"
    """dp-accounting ``PLDAccountant`` with ``PLD_VALUE_DISCRETIZATION_INTERVAL``."""
    PURE = "pure"
    """fedqr ``PureDpAccountant`` (basic composition of Laplace releases, delta = 0)."""


# --- fedqr.data ------------------------------------------------------------------------------

class DatasetName(StrEnum):
    """Data sets :func:`~fedqr.data.load_dataset` knows."""

    MNIST = "mnist"
    DIGITS = "digits"
    FEMNIST = "femnist"


class PartitionKind(StrEnum):
    """Partitioners :func:`~fedqr.data.make_partition` knows."""

    TWO_DIGITS = "two-digits"
    IID = "iid"
    DIRICHLET = "dirichlet"
    BY_WRITER = "by-writer"


# --- fedqr.models ----------------------------------------------------------------------------

class ModelName(StrEnum):
    """Models fedqr trains."""

    LOGREG = "logreg"
    """Softmax regression without bias, ``theta`` of shape ``(k, p)``."""
    LINEAR = "linear"
    """Softmax regression with a bias per class, ``theta`` of shape ``(k, p + 1)``."""
    CNN = "cnn"
    """The paper's CNN (conv-pool-conv-pool-linear) on square images."""


# --- fedqr.theory ----------------------------------------------------------------------------

class Rounding(StrEnum):
    """How real-valued optima become integers."""

    BEST = "best"
    """Evaluate ``U`` at the neighbouring integers and keep the better (errata 6)."""
    PAPER = "paper"
    """The authors' rule: ``floor`` of ``T*`` and ``ceil`` of ``b*``."""


# --- fedqr.sim -------------------------------------------------------------------------------

class Selection(StrEnum):
    """How the server picks the b clients of a round."""

    ROUND_ROBIN = "round-robin"  # Algorithm 1: deterministic, exact reply counts
    RANDOM = "random"  # uniformly at random without replacement (the analysis' assumption)


class Aggregation(StrEnum):
    """How the server combines the replies of the selected clients."""

    PAPER = "paper"  # theta = (N/b) sum_i (d_i/d) theta^i  (Algorithm 1)
    NORMALIZED = "normalized"  # theta = sum_i d_i theta^i / sum_j d_j (convex for any d_i)


class LrSchedule(StrEnum):
    """Learning-rate schedules."""

    CONSTANT = "constant"  # eta_t = eta0
    INVERSE_TIME = "inverse-time"  # eta_t = eta0 / (1 + decay t): the experiments' decaying rate
    THEORY = "theory"  # eta_t = 2 / (mu (t + gamma)): Theorems 3 and 4


# --- fedqr.planner ---------------------------------------------------------------------------

class Method(StrEnum):
    """How a plan is made."""

    TWIN = "twin"  # simulate every schedule on a proxy with the deployment's exact noise
    BOUND = "bound"  # minimise the paper's convergence bound U(T, b) (estimated constants)
    PAPER = "paper"  # the bound with the authors' rounding (reproduces Table I)


class DataUse(StrEnum):
    """What data a plan reads, and what privacy that costs."""

    PUBLIC_PROXY = "public-proxy"  # a data set the user names: no privacy cost
    CLEAR_PROXY = "clear-proxy"  # a share of the clients' own data read WITHOUT privacy
    PRIVATE_PILOT = "private-pilot"  # pilot runs charged on the clients' ledgers


# --- fedqr.audit -----------------------------------------------------------------------------

class ThreatModel(StrEnum):
    """What the adversary observes."""

    REPLIES = "replies"
    """Every noisy reply of the audited client (the server, or an eavesdropper)."""
    FINAL_MODEL = "final-model"
    """Only the final model theta_T (another client, or anyone the model is published to)."""
    ONE_REPLY = "one-reply"
    """One reply, the canary in its batch (worst case per step): audits the per-reply
    guarantee that the accountant composes, not the whole-run claim (see docs/privacy.md)."""
    BOTH = "both"
    """``replies`` and ``final-model``, with independent trials."""
    ALL = "all"
    """``replies``, ``final-model`` and ``one-reply``, with independent trials."""

    def audits(self) -> tuple[ThreatModel, ...]:
        """The single threat models this one stands for."""
        if self is ThreatModel.BOTH:
            return (ThreatModel.REPLIES, ThreatModel.FINAL_MODEL)
        if self is ThreatModel.ALL:
            return (ThreatModel.REPLIES, ThreatModel.FINAL_MODEL, ThreatModel.ONE_REPLY)
        return (self,)
