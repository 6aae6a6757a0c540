"""Which float formats the matrix products use: the logistic twin's, and the engine's
full-batch passes (:class:`Arithmetic`) (no torch import).

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

__all__ = ["ARITHMETIC_SETTINGS", "PRODUCTS_ENV", "PRODUCTS_SETTINGS", "Arithmetic", "Products",
           "arithmetic_of", "listed_native", "native_bf16", "native_mixed", "products_of",
           "twin_products"]

PRODUCTS_ENV = "FEDQR_TWIN_PRODUCTS"


class Products(enum.StrEnum):
    """The float format of the logistic twin's products."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"


class Arithmetic(enum.StrEnum):
    """The arithmetic of the engine's full-batch logistic passes (``fedqr run``, ``reproduce``).

    ``float32``: every product in float32. ``mixed`` (:mod:`fedqr.models.logreg_coded`):
    the logits in bfloat16, and the clipped gradient sums of integer-coded rows (images,
    one-hot tables) as exact integer products of int8 codes and int8 limbs of the residuals
    truncated toward zero, so every per-sample gradient the sum holds is within the clip
    bound exactly (no float rounding in the sum at all); rows that are not integer-coded,
    other models than softmax regression, Poisson batches, evaluation and GPUs stay float32
    (a ``RuntimeWarning`` says so). No budget or noise changes.
    """

    FLOAT32 = "float32"
    MIXED = "mixed"


ARITHMETIC_SETTINGS = ("auto", *(a.value for a in Arithmetic))


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


def listed_native(cpuinfo: str, flags: frozenset[str] = _NATIVE_FLAGS) -> bool:
    """Whether the first ``flags`` line of a ``/proc/cpuinfo`` text lists one of ``flags``
    (default ``avx512_bf16`` or ``amx_bf16``)."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return bool(flags & set(line.split(":", 1)[-1].split()))
    return False


_INT8_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


@functools.cache
def native_mixed() -> bool:
    """Whether this CPU multiplies both bfloat16 (:func:`native_bf16`) and int8 (VNNI or AMX)
    natively: where ``auto`` picks :attr:`Arithmetic.MIXED`."""
    if not native_bf16():
        return False
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return listed_native(f.read(), _INT8_FLAGS)
    except OSError:
        return False


def arithmetic_of(value: str | Arithmetic, *, name: str = "arithmetic") -> Arithmetic:
    """``value`` as :class:`Arithmetic`, ``auto`` resolved on this CPU (``mixed`` where
    :func:`native_mixed`, else ``float32``).

    Raises
    ------
    ValueError
        Anything else, naming ``name``, the choices and the value.
    """
    if isinstance(value, Arithmetic):
        return value
    setting = value.strip().lower() if isinstance(value, str) else value
    if setting not in ARITHMETIC_SETTINGS:
        raise ValueError(f"{name} must be one of {', '.join(ARITHMETIC_SETTINGS)}, "
                         f"got {value!r}")
    if setting == "auto":
        return Arithmetic.MIXED if native_mixed() else Arithmetic.FLOAT32
    return Arithmetic(setting)


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
