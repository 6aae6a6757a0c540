"""Which recorded warnings are fedqr's own (not torch's, NumPy's or dp-accounting's): the
command line prints them as one ``warning:`` line and keeps them in a plan's ``warnings``,
:func:`fedqr.plan` keeps them in its document."""

from __future__ import annotations

import warnings
from pathlib import Path

__all__ = ["is_own"]

_PACKAGE = Path(__file__).resolve().parent


def is_own(w: warnings.WarningMessage) -> bool:
    """Whether fedqr's code gave the recorded warning ``w``."""
    return Path(w.filename).resolve().is_relative_to(_PACKAGE)
