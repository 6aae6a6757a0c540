"""Every option of a ``fedqr`` command is given at most once.

click keeps the last of repeated values (``--eps 4 ... --eps 8`` runs with eps 8): for a
privacy budget, a script that appends an option would change the budget without a word.
:class:`OnceCommand` refuses an option given twice before the command runs (a usage error,
exit 2), except options that take several values (``multiple``).

Light on purpose: imported by every command module (click and typer only).
"""

from __future__ import annotations

import click
from typer.core import TyperCommand

__all__ = ["OnceCommand"]


class OnceCommand(TyperCommand):
    """A typer command that refuses a repeated option (see the module docstring)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        options = {name: param for param in self.params if isinstance(param, click.Option)
                   and not param.multiple
                   for name in (*param.opts, *param.secondary_opts)}
        seen: dict[str, str] = {}
        expects_value = False
        for arg in args:
            if arg == "--":
                break
            if expects_value:  # the value of the option before: never an option itself
                expects_value = False
                continue
            name = arg.split("=", 1)[0]
            param = options.get(name)
            if param is None:
                continue
            expects_value = not param.is_flag and "=" not in arg
            if param.name in seen:
                given = seen[param.name]
                raise click.UsageError(
                    f"{name} is given twice{'' if given == name else f' (as {given} first)'}: "
                    f"give each option once (click would keep the last value silently)",
                    ctx=ctx)
            seen[str(param.name)] = name
        return super().parse_args(ctx, args)
