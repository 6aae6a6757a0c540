"""The ``fedqr`` command line: ``run``, ``estimate``, ``plan``, ``reproduce``, ``plot``."""

from __future__ import annotations

import typer

from fedqr._cli_once import OnceCommand
from fedqr._signals import sigterm_as_interrupt
from fedqr.cli import audit as _audit
from fedqr.cli import estimate as _estimate
from fedqr.cli import plan as _plan
from fedqr.cli import reproduce as _reproduce
from fedqr.cli import run as _run
from fedqr.cli._exit import leave
from fedqr.flower.cli import flower_app

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  pretty_exceptions_show_locals=False,
                  help="fedqr: federated learning with client-side differential privacy.")


@app.callback()
def _main() -> None:
    """Plan and simulate FedSGD-DPC (Zhou et al.): T queries, b replies per round."""


# OnceCommand: an option given twice (--eps 4 ... --eps 8) is refused, not the last one kept
app.command("run", cls=OnceCommand)(_run.run)
app.command("estimate", cls=OnceCommand)(_estimate.estimate)
# ignore_unknown_options: a negative budget (--eps 1 -5) reaches plan's check of eps > 0
app.command("plan", cls=OnceCommand,
            context_settings={"allow_extra_args": True,
                              "ignore_unknown_options": True})(_plan.plan)
app.command("reproduce", cls=OnceCommand)(_reproduce.reproduce)
app.command("plot", cls=OnceCommand)(_reproduce.plot)
app.command("audit", cls=OnceCommand)(_audit.audit)
app.add_typer(flower_app, name="flower")


def main() -> None:
    """The ``fedqr`` command: :data:`app`, then a quick exit (:mod:`fedqr.cli._exit`).

    SIGTERM stops a command as Ctrl-C does: a folder being written or a cache file is
    removed, not left half-written (``fedqr flower`` commands also stop their processes).
    """
    try:
        with sigterm_as_interrupt():  # fedqr._signals
            app(prog_name="fedqr")
    except SystemExit as stop:
        leave(stop.code)
        raise


__all__ = ["app", "main"]
