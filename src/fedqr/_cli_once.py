"""Every option of a ``fedqr`` command is given at most once.

click keeps the last of repeated values (``--eps 4 ... --eps 8`` runs with eps 8): for a
privacy budget, a script that appends an option would change the budget without a word.
:class:`OnceCommand` refuses an option given twice before the command runs (a usage error,
exit 2), except options that take several values (``multiple``). It also refuses an empty
path (``--out ""``), which click would read as the current folder. Its ``--help`` is click's
plain layout: typer's rich table gives a command of many options (and flag pairs such as
``--cache/--no-cache``) a help column of under 20 characters on an 80-column terminal or a
pipe.

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
        expects_value: str | None = None  # the option whose value comes next
        stray = not ctx.allow_extra_args and not any(
            isinstance(p, click.Argument) for p in self.params)  # no word without an option
        last = ""  # the last option and its value, for a stray word's message
        for arg in args:
            if arg == "--":
                break
            if expects_value is not None:  # the value of the option before: never an option
                _check_path_value(ctx, options[expects_value], expects_value, arg)
                last, expects_value = f"{expects_value} {arg}", None
                continue
            name, eq, value = arg.partition("=")
            param = options.get(name)
            if param is None:
                if arg.startswith("-"):  # an unknown option (click names it), or a flag
                    stray = False  # its value, if any, is not a stray word
                elif stray and last:
                    raise click.UsageError(
                        f"unexpected argument {arg!r} after {last}: an option takes at most "
                        f"one value (per-client values are comma-separated: --eps 1,2,...)",
                        ctx=ctx)
                continue
            last = arg
            if eq:
                _check_path_value(ctx, param, name, value)
            expects_value = name if not param.is_flag and not eq else None
            if param.name in seen:
                given = seen[param.name]
                raise click.UsageError(
                    f"{name} is given twice{'' if given == name else f' (as {given} first)'}: "
                    f"give each option once (click would keep the last value silently)",
                    ctx=ctx)
            seen[str(param.name)] = name
        return super().parse_args(ctx, args)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's plain help (options and their text in two columns, wrapped to the
        terminal), without the backslash typer puts before ``[default: ...]`` for rich."""
        click.Command.format_help(self, ctx, formatter)
        formatter.buffer[:] = [text.replace("\\[", "[") for text in formatter.buffer]


def _check_path_value(ctx: click.Context, param: click.Option, name: str, value: str) -> None:
    """An empty path (``--out ""``, an unset shell variable) is refused: click reads it as
    ``.``, the current folder, and the command would write or read there."""
    if isinstance(param.type, click.Path) and not value.strip():
        raise click.UsageError(f"{name} must be a path, got {name}={value!r} (empty: an unset "
                               f"shell variable?)", ctx=ctx)
