"""Error messages of the command line name options, not the Python parameters behind them.

The library's checks name the parameter a Python caller passed (``proxy_classes must not
repeat a class, got proxy_classes='0,0'``); a command-line user gave ``--proxy-classes``.
:func:`name_options` rewrites the parameter names of the running command's options into its
option names, where a name is used as one: written with an underscore (an identifier, never a
word of prose), before ``=`` (``got eps=-1.0``) or opening the message (``eps must be ...``,
``model 'm.py:f': ...``).
Anything else, prose and paths included, is left as it was.

Light on purpose: imported by every command's failure path (click only).
"""

from __future__ import annotations

import re
import sys
from typing import Any

import click

__all__ = ["ALIASES", "diverged_note", "exit_code", "name_options"]

ALIASES = {"test_path": "test_data", "path": "data", "decay": "lr_decay"}
"""Library parameters whose command-line option carries another name: a data file's
``path`` (:meth:`fedqr.data.FederatedData.from_file`) is ``--data``, a learning rate's
``decay`` (:class:`fedqr.sim.config.LearningRate`) ``--lr-decay``."""


def _options(ctx: click.Context | None) -> dict[str, str]:
    """Parameter name -> its long option (``--proxy-classes``) for the running command."""
    if ctx is None:
        return {}
    out: dict[str, str] = {}
    for param in ctx.command.params:
        longs = [o for o in getattr(param, "opts", []) if o.startswith("--")]
        if param.name and longs:
            out[param.name] = longs[0]
    out.update({alias: out[name] for alias, name in ALIASES.items() if name in out})
    return out


def name_options(message: str, ctx: click.Context | None = None) -> str:
    """``message`` with the running command's parameter names written as its options.

    Parameters
    ----------
    message:
        An error message from the library.
    ctx:
        The command's click context (default: the current one; none: unchanged).
    """
    options = _options(ctx if ctx is not None else click.get_current_context(silent=True))
    for name in sorted(options, key=len, reverse=True):
        option = options[name]
        message = message.replace(f"{name} ({option})", option)  # named twice already
        # not inside a longer identifier, an option (--name), a path or a quoted value
        word = rf"(?<![\w\-./'\"]){re.escape(name)}(?![\w\-/'\"])"
        if "_" in name:
            message = re.sub(word, option, message)
        else:
            message = re.sub(word + r"(?==)", option, message)
            message = re.sub(rf"^{re.escape(name)}(?= must |: | ')", option, message)
    return message


def exit_code(exc: BaseException) -> int:
    """The exit status of a command stopped by the library's ``exc``, for ``fedqr`` and
    ``fedqr flower`` alike.

    2, bad input, for a ``ValueError`` (a corrupt data file's md5 mismatch included) and for a
    built-in data set found nowhere (:class:`fedqr.data.DataNotFoundError`: the message names
    the places searched, ``--data-dir`` and ``FEDQR_DATA``); 1, a fault, for anything else
    (another ``OSError``: a file that exists but cannot be read or written).
    """
    files = sys.modules.get("fedqr.data._files")  # not loaded: exc cannot be its error
    missing = files is not None and isinstance(exc, files.DataNotFoundError)
    return 2 if missing or isinstance(exc, ValueError) else 1


def diverged_note(doc: dict[str, Any]) -> str | None:
    """The one line every command prints for a run whose metrics became non-finite (saved as
    null in ``doc``, a result.json document); ``None`` for a run that stayed finite."""
    if not doc.get("diverged"):
        return None
    return (f"the run diverged: non-finite loss from round {doc.get('diverged_round')} on "
            "(saved as null in result.json); try a smaller --lr, a smaller --clip or more "
            "noise budget")
