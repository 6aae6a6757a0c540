"""Which float format the logistic twin's matrix products use (no torch import).

The planner's logistic twin (:mod:`fedqr.planner.gradients`) spends most of a Poisson round
in two skinny products, the logits of the round's sampled proxy rows and their clipped
gradient sum. Where the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), these run in
bfloat16 (inputs rounded to 8 significant bits, float32 accumulation inside the product,
the result rounded to bfloat16 and widened): 3 to 5 times faster than float32 on the 2-core
development machine (``python bench/twin_products.py``). The twin's gradients are never
released, they only drive its predicted losses; no private computation (``fedqr run``,
Flower, the audit) uses this setting.

``FEDQR_TWIN_PRODUCTS`` chooses: ``auto`` (the default: bfloat16 where native, else
float32), ``float32`` (the same plan on every machine up to float rounding) or
``bfloat16`` (even where emulated, slowly). It is part of the plans' cache keys.
"""

from __future__ import annotations

import enum
import functools
import os
import platform

__all__ = ["PRODUCTS_ENV", "PRODUCTS_SETTINGS", "Products", "listed_native", "native_bf16",
           "products_of", "twin_products"]

PRODUCTS_ENV = "FEDQR_TWIN_PRODUCTS"


class Products(enum.StrEnum):
    """The float format of the logistic twin's products."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"


PRODUCTS_SETTINGS = ("auto", *(p.value for p in Products))
_NATIVE_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


@functools.cache
def native_bf16() -> bool:
    """Whether this CPU has native bfloat16 dot products (Linux x86: :func:`listed_native`
    of ``/proc/cpuinfo``; ``False`` elsewhere or where unreadable)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return listed_native(f.read())
    except OSError:
        return False


def listed_native(cpuinfo: str) -> bool:
    """Whether the first ``flags`` line of a ``/proc/cpuinfo`` text lists ``avx512_bf16`` or
    ``amx_bf16``."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return bool(_NATIVE_FLAGS & set(line.split(":", 1)[-1].split()))
    return False


def products_of(value: str, *, name: str = PRODUCTS_ENV) -> Products | None:
    """``value`` (any case, spaces around allowed) as :class:`Products`; ``None`` for
    ``auto`` or empty.

    Raises
    ------
    ValueError
        Anything else, naming ``name``, the choices and the value.
    """
    setting = value.strip().lower() or "auto"
    if setting not in PRODUCTS_SETTINGS:
        raise ValueError(f"{name} must be one of {', '.join(PRODUCTS_SETTINGS)}, got {value!r}")
    return None if setting == "auto" else Products(setting)


def twin_products(environ: dict[str, str] | None = None) -> Products:
    """The format of the logistic twin's products on the CPU (module docstring): the one
    ``FEDQR_TWIN_PRODUCTS`` names, else bfloat16 where native; a GPU twin always multiplies in
    float32.

    Raises
    ------
    ValueError
        ``FEDQR_TWIN_PRODUCTS`` set to something other than ``auto``, ``float32`` or
        ``bfloat16``.
    """
    env = os.environ if environ is None else environ
    chosen = products_of(env.get(PRODUCTS_ENV, "auto"))
    if chosen is None:
        return Products.BFLOAT16 if native_bf16() else Products.FLOAT32
    return chosen
