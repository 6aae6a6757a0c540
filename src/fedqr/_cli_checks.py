"""Checks the commands share that need to know what the user typed, not only its value.

An option's default cannot be told from the same value given on purpose by its value alone;
click records where each value came from. Light on purpose (click only at import): the
commands import it at the top and the privacy layer only when a check runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

if TYPE_CHECKING:
    from fedqr._enums import Mechanism
    from fedqr.privacy import Accountant

__all__ = ["check_accountant_applies", "given"]


def given(name: str) -> bool:
    """Whether the running command's parameter ``name`` was given (on the command line or in
    the environment), not left at its default; ``False`` outside a command."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return False
    return ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE,
                                              ParameterSource.ENVIRONMENT)


def check_accountant_applies(mechanism: Mechanism, accountant: Accountant) -> None:
    """Refuse an ``--accountant`` given for a mechanism that accounts its budgets otherwise
    (Laplace: pure composition; discrete Laplace: PLD; none: nothing), rather than ignore it:
    the run's ``accounting`` block would name another accountant than the one asked for."""
    if not given("accountant"):
        return
    from fedqr.privacy import mechanism_for

    used = mechanism_for(mechanism).accountant(accountant)
    if used == accountant:
        return
    how = ("which spends no budget" if used is None
           else f"whose budgets the {used.value} accountant composes")
    raise ValueError(f"accountant must be left out for the {mechanism.value} mechanism, {how}, "
                     f"got accountant={accountant.value!r}")
