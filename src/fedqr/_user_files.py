"""Which source files are the user's (light: no torch, no NumPy).

The plans' caches key a user's model by its code: the twin's simulations by the modules its
code reaches (:func:`fedqr.planner.kernels.code_digest`), the CLI's stored answers by the
modules a ``--model`` file imports (:mod:`fedqr.cli.plan_cache`). Both leave out the
standard library, installed packages and fedqr itself, with this one test.
"""

from __future__ import annotations

import functools
import os
import sysconfig
from pathlib import Path

__all__ = ["is_user_file"]


@functools.cache
def _not_user_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths["stdlib"], paths["platstdlib"], str(Path(__file__).parent)}
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots)


def is_user_file(path: str | os.PathLike[str]) -> bool:
    """Whether the source file ``path`` is the user's: not in the standard library, an
    installed package (``site-packages``, ``dist-packages``) or fedqr itself."""
    real = os.path.realpath(path)
    parts = Path(real).parts
    return ("site-packages" not in parts and "dist-packages" not in parts and
            not real.startswith(_not_user_roots()))
