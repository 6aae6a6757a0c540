"""Problem constants of the convergence bounds (paper Theorems 3 and 4) and their JSON form.

JSON keys (:func:`constants_to_json` / :func:`constants_from_json`)
    ``N``, ``d`` (total number of samples; split equally unless ``d_i`` is given), ``p``,
    ``mu``, ``lambda``, ``G``, ``Gamma``, ``Y0``, ``xi`` and optionally ``d_i`` (list),
    ``eps_i`` (list, or scalar ``eps``), ``delta_i`` (list, or scalar ``delta``), ``q`` and
    ``Lambda2`` (list of ``Lambda_i^2``, or a scalar for every client).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from numbers import Integral, Real
from typing import Any

__all__ = ["ProblemConstants", "constants_from_json", "constants_to_json"]


def _real(name: str, value: object, *, low: float, strict: bool = True) -> float:
    ok = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(float(value))
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = v > low if strict else v >= low
    if not ok:
        op = ">" if strict else ">="
        raise ValueError(f"{name} must be {op} {low:g} and finite, got {name}={value!r}")
    return float(value)  # type: ignore[arg-type]


def _int(name: str, value: object, *, low: int) -> int:
    if not isinstance(value, Integral) or isinstance(value, bool) or int(value) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {name}={value!r}")
    return int(value)


_MAX_GAMMA = 1e150
"""The largest gamma = 2 lam / mu the bounds take (its square, and products with it, stay
finite floats)."""


@dataclass(frozen=True)
class ProblemConstants:
    """Constants of FedSGD-DPC's convergence bounds (paper Section IV, Theorems 3-4).

    Attributes
    ----------
    N
        Number of clients (``>= 2``: Lemma 2 divides by ``N - 1``).
    d_i
        Samples of each client (length ``N``); ``d = sum(d_i)``.
    p
        Number of model parameters.
    mu, lam
        Strong convexity ``mu`` and smoothness ``lambda`` of every ``F_i`` (Assumptions 4-5).
    G
        Bound on the expected squared per-sample gradient norm, ``E||grad||^2 <= G^2``
        (Assumption 6).
    Gamma
        Degree of non-iid ``F* - sum_i d_i/d F_i*`` (Definition 1); may be 0.
    Y0
        Initial squared distance ``||theta_0 - theta*||^2``.
    xi
        Per-sample clipping norm: ``xi_1`` (l1, Laplace) or ``xi_2`` (l2, Gaussian).
    eps_i, delta_i
        Per-client budgets (length ``N``); ``delta_i`` is 0 for the Laplace mechanism.
    q
        Sampling rate of the Gaussian mechanism (1 for Laplace).
    Lambda2_i
        Local gradient variance ``Lambda_i^2`` (Assumption 8, Gaussian only), or ``None``
        (treated as 0).
    """

    N: int
    d_i: tuple[int, ...]
    p: int
    mu: float
    lam: float
    G: float
    Gamma: float
    Y0: float
    xi: float
    eps_i: tuple[float, ...]
    delta_i: tuple[float, ...]
    q: float = 1.0
    Lambda2_i: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        n = _int("N", self.N, low=2)
        _int("p", self.p, low=1)
        for name in ("mu", "lam", "xi"):
            _real(name, getattr(self, name), low=0.0)
        for name in ("G", "Gamma", "Y0"):
            _real(name, getattr(self, name), low=0.0, strict=False)
        if self.lam < self.mu:
            raise ValueError(f"lam must be >= mu={self.mu!r}, got lam={self.lam!r}")
        if not self.gamma <= _MAX_GAMMA:  # the bounds square gamma: it must stay a float
            raise ValueError(f"lam / mu must be at most {_MAX_GAMMA / 2:g} (gamma = 2 lam / mu "
                             f"enters the bounds squared), got lam={self.lam!r} and "
                             f"mu={self.mu!r}")
        q = _real("q", self.q, low=0.0)
        if q > 1.0:
            raise ValueError(f"q must be in (0, 1], got q={self.q!r}")
        fields: dict[str, Any] = {
            "d_i": tuple(_int("d_i", v, low=1) for v in self._seq("d_i", n)),
            "eps_i": tuple(_real("eps_i", v, low=0.0) for v in self._seq("eps_i", n)),
            "delta_i": tuple(self._delta(v) for v in self._seq("delta_i", n)),
        }
        if self.Lambda2_i is not None:
            vals = self._seq("Lambda2_i", n)
            fields["Lambda2_i"] = tuple(_real("Lambda2_i", v, low=0.0, strict=False) for v in vals)
        for key, val in fields.items():
            object.__setattr__(self, key, val)

    def _seq(self, name: str, n: int) -> Sequence[object]:
        value = getattr(self, name)
        if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != n:
            raise ValueError(f"{name} must be a sequence of length N={n}, got {name}={value!r}")
        return value

    @staticmethod
    def _delta(value: object) -> float:
        v = _real("delta_i", value, low=0.0, strict=False)
        if v >= 1.0:
            raise ValueError(f"delta_i must be in [0, 1), got delta_i={value!r}")
        return v

    # -- derived quantities ------------------------------------------------------------
    @property
    def d(self) -> int:
        """Total number of samples ``d = sum_i d_i``."""
        return sum(self.d_i)

    @property
    def gamma(self) -> float:
        """``gamma = 2 lambda / mu`` (Theorem 3)."""
        return 2.0 * self.lam / self.mu

    @property
    def equal_split(self) -> bool:
        """Whether all clients hold the same number of samples (paper's assumption)."""
        return len(set(self.d_i)) == 1

    # -- constructors ------------------------------------------------------------------
    @classmethod
    def uniform(
        cls,
        *,
        N: int,
        d: int,
        p: int,
        mu: float,
        lam: float,
        G: float,
        Gamma: float,
        Y0: float,
        xi: float,
        eps: float,
        delta: float = 0.0,
        q: float = 1.0,
        Lambda2: float | None = None,
    ) -> ProblemConstants:
        """Constants with equal data (``d // N`` each, remainder to the first clients) and
        equal budgets ``(eps, delta)`` for every client."""
        n = _int("N", N, low=2)
        total = _int("d", d, low=n)
        d_i = tuple(total // n + (1 if i < total % n else 0) for i in range(n))
        return cls(
            N=n, d_i=d_i, p=p, mu=mu, lam=lam, G=G, Gamma=Gamma, Y0=Y0, xi=xi,
            eps_i=(eps,) * n, delta_i=(delta,) * n, q=q,
            Lambda2_i=None if Lambda2 is None else (Lambda2,) * n,
        )  # fmt: skip

    def with_budget(self, *, eps: float, delta: float | None = None) -> ProblemConstants:
        """A copy with every client's budget set to ``eps`` (and ``delta`` if given)."""
        deltas = self.delta_i if delta is None else (delta,) * self.N
        return replace(self, eps_i=(eps,) * self.N, delta_i=deltas)


def constants_to_json(constants: ProblemConstants, *, indent: int | None = 2) -> str:
    """Serialise to the JSON documented in the module docstring (all optional keys written)."""
    c = constants
    data: dict[str, Any] = {
        "N": c.N, "d": c.d, "p": c.p, "mu": c.mu, "lambda": c.lam, "G": c.G,
        "Gamma": c.Gamma, "Y0": c.Y0, "xi": c.xi, "q": c.q, "d_i": list(c.d_i),
        "eps_i": list(c.eps_i), "delta_i": list(c.delta_i),
    }  # fmt: skip
    if c.Lambda2_i is not None:
        data["Lambda2"] = list(c.Lambda2_i)
    return json.dumps(data, indent=indent)


def _per_client(data: Mapping[str, Any], many: str, one: str, n: int, default: Any) -> Any:
    if many in data:
        return tuple(data[many])
    if one in data:
        return (data[one],) * n
    return default


def constants_from_json(text: str, *, eps: float | None = None) -> ProblemConstants:
    """Parse :func:`constants_to_json` output (or hand-written JSON with the same keys).

    Parameters
    ----------
    text
        The JSON document.
    eps
        Budget for every client when the document has neither ``eps_i`` nor ``eps``.

    Raises
    ------
    ValueError
        On missing keys, inconsistent ``d``/``d_i``, or out-of-range values.
    """
    data = json.loads(text)
    if not isinstance(data, Mapping):
        raise ValueError(f"text must hold a JSON object, got {type(data).__name__}")
    required = ("N", "d", "p", "mu", "lambda", "G", "Gamma", "Y0", "xi")
    missing = [k for k in required if k not in data]
    if missing:
        raise ValueError(f"text must have keys {missing}, got keys={sorted(data)}")
    n = _int("N", data["N"], low=2)
    total = _int("d", data["d"], low=n)
    if "d_i" in data:
        d_i = tuple(data["d_i"])
        if sum(d_i) != total:
            raise ValueError(f"d_i must sum to d={total}, got sum(d_i)={sum(d_i)}")
    else:
        d_i = tuple(total // n + (1 if i < total % n else 0) for i in range(n))
    eps_i = _per_client(data, "eps_i", "eps", n, None if eps is None else (eps,) * n)
    if eps_i is None:
        raise ValueError("text must have 'eps_i' or 'eps', or pass eps=..., got neither")
    lam2 = data.get("Lambda2")
    if lam2 is not None:
        lam2 = tuple(lam2) if isinstance(lam2, list) else (lam2,) * n
    return ProblemConstants(
        N=n, d_i=d_i, p=data["p"], mu=data["mu"], lam=data["lambda"], G=data["G"],
        Gamma=data["Gamma"], Y0=data["Y0"], xi=data["xi"], eps_i=eps_i,
        delta_i=_per_client(data, "delta_i", "delta", n, (0.0,) * n),
        q=data.get("q", 1.0), Lambda2_i=lam2,
    )  # fmt: skip
