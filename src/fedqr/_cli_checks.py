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

__all__ = ["check_accountant_applies", "check_alpha_applies", "check_budget_applies",
           "check_hidden_applies", "check_left_out", "check_theory_options_apply", "given"]


def given(name: str) -> bool:
    """Whether the running command's parameter ``name`` was given (on the command line or in
    the environment), not left at its default; ``False`` outside a command."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return False
    return ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE,
                                              ParameterSource.ENVIRONMENT)


def check_alpha_applies(partition: str | None, alpha: float) -> None:
    """An ``--alpha`` typed where no Dirichlet partition is drawn (``partition``: the one
    used, ``None`` for a data file's own clients) is refused rather than ignored."""
    if partition != "dirichlet" and given("alpha"):
        where = ("the clients of --data FILE are its own" if partition is None
                 else f"the partition is {partition}")
        raise ValueError(f"alpha must be left out: it sets the concentration of --partition "
                         f"dirichlet ({where}), got alpha={alpha!r}")


def check_left_out(names: tuple[str, ...], *, why: str) -> None:
    """The first of the running command's parameters ``names`` that was typed is refused
    rather than ignored: ``"{flag} {why}, got {flag}={value}"``."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    for name in names:
        if given(name):
            param = next((p for p in ctx.command.params if p.name == name), None)
            flag = param.opts[0] if param is not None else "--" + name.replace("_", "-")
            value: object = ctx.params.get(name)
            if value is False and param is not None and param.secondary_opts:
                raise ValueError(f"{param.secondary_opts[0]} {why}")  # --no-standardize
            shown = getattr(value, "value", value)  # an enum's option text
            raise ValueError(f"{flag} {why}, got {flag}={str(shown)!r}")


def check_accountant_applies(mechanism: Mechanism, accountant: Accountant) -> None:
    """An ``--accountant`` typed for a mechanism that accounts its budgets otherwise is refused
    (:func:`fedqr.privacy.spec.check_accountant_applies`); its default is not checked."""
    if not given("accountant"):
        return
    from fedqr.privacy.spec import check_accountant_applies as check

    check(mechanism, accountant)


def check_hidden_applies(model_name: str, hidden: object) -> None:
    """A ``--hidden`` typed for a model that has no hidden widths to set (``logreg``, ``cnn``,
    a model file, even one whose factory is called ``mlp``; the default model included) is
    refused rather than ignored. ``model_name``: the built-in model's name, or the
    ``--model FILE.py:NAME`` text of a model file."""
    if given("hidden") and model_name != "mlp":
        raise ValueError(f"hidden must be left out for the model {model_name} (it sets the "
                         f"widths of --model mlp), got hidden={hidden!r}")


def check_theory_options_apply(schedule: str, **values: float | None) -> None:
    """Options of one learning-rate schedule typed for another (``schedule``: the
    ``--lr-schedule`` given; ``values``: the options by name), which does not use them, are
    refused rather than ignored: ``--mu`` and ``--gamma`` set ``theory``, ``--lr-decay``
    sets ``inverse-time``."""
    for name, value in values.items():
        owner = "inverse-time" if name == "lr_decay" else "theory"
        if schedule != owner and given(name):
            what = ("the inverse-time schedule: eta_t = eta0 / (1 + decay t)"
                    if owner == "inverse-time" else
                    "the theory schedule: --lr-schedule theory")
            raise ValueError(f"{name} must be left out for the schedule {schedule} (it sets "
                             f"{what}), got {name}={value!r}")


def check_budget_applies(mechanism: Mechanism, **values: object) -> None:
    """``--eps`` or ``--delta`` (``values``: the options by name, as typed) given for a
    mechanism that spends no budget (``none``), or ``--delta`` for a pure eps-DP one
    (Laplace), is refused rather than recorded as a budget nothing holds. The mechanism object
    says which (imported only where one of them was typed)."""
    typed = [name for name in values if given(name)]
    if not typed:
        return
    from fedqr.privacy.spec import unspent_budget

    for name in typed:
        why = unspent_budget(mechanism, name)
        if why is not None:
            raise ValueError(f"{name} must be left out for --mechanism {mechanism.value} "
                             f"({why}), got {name}={values[name]!r}")
