"""The `drillbook` Typer app, its consoles and shared options, and the entry point that turns
every failure into one line and an exit code: 2 for bad input (refused before anything is
touched), 1 for a failure while running.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from drillbook import __version__
from drillbook.errors import DrillbookError

app = typer.Typer(
    name="drillbook", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Executable resilience runbooks for AI-agent platforms, with tamper-evident evidence.",
)

console = Console()
err_console = Console(stderr=True)

StateDirOption = typer.Option(None, "--state-dir", help="Sandbox state directory (env DRILLBOOK_STATE_DIR).")
# The exercise record a run is sealed with (drillbook.evidence.exercise).
ScopeOption = typer.Option(None, "--scope", help="Exercise record: what this exercise covers.")
ParticipantOption = typer.Option([], "--participant", help="Exercise record: who took part, and as what (repeat).")
ObjectiveOption = typer.Option([], "--objective", help="Exercise record: what it sets out to show (repeat).")
ReferenceOption = typer.Option(None, "--reference", help="Exercise record: the incident or change it belongs to.")


@app.command()
def version() -> None:
    """Print drillbook's version."""
    console.print(__version__)


def name_value_pairs(items: list[str], option: str) -> dict[str, str]:
    """`name=value` options (repeatable) as a dict; anything else is one ConfigError line."""
    from drillbook.errors import ConfigError

    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"invalid {option} {item!r}: use name=value")
        if name.strip() in pairs and pairs[name.strip()] != value.strip():  # which one was meant cannot be told
            raise ConfigError(f"{option} {name.strip()} is given twice ({pairs[name.strip()]!r} and "
                              f"{value.strip()!r}): give it once")
        pairs[name.strip()] = value.strip()
    return pairs


LINE_MAX = 1000  # characters of one error line; a pasted secret or a 50 MB value is not echoed whole


def _say(message: str) -> None:
    """One line on stderr, never wrapped, at most LINE_MAX characters: what failed and, where it
    helps, what to do."""
    line = " ".join(message.split())
    if len(line) > LINE_MAX:
        line = f"{line[:LINE_MAX - 40]}… ({len(line) - LINE_MAX + 40} characters more)"
    sys.stderr.write("drillbook: " + line + "\n")


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app and turn every failure into one line and an exit code.

    SIGINT and SIGTERM end a command through drillbook.shutdown: what runs is stopped and rolled
    back, evidence is sealed, and the line says so; the exit code is 128 + the signal."""
    from drillbook.shutdown import Interrupted, handling_signals, last_interrupted

    try:
        with handling_signals():
            code = app(args=argv, prog_name="drillbook", standalone_mode=False)
        stop = last_interrupted()
        if stop is not None and code == 130:  # Typer turned our Interrupted into a bare 130
            raise stop
    except DrillbookError as error:
        _say(str(error))
        sys.exit(error.exit_code)
    except Interrupted as stop:
        _say(stop.line())
        sys.exit(stop.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        _say("interrupted")
        sys.exit(130)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except Exception as error:
        # Typer's (vendored) click usage errors: unknown option, bad value, missing argument.
        if hasattr(error, "format_message") and isinstance(getattr(error, "exit_code", None), int):
            if error.format_message():
                _say(error.format_message())
            sys.exit(2)
        raise
    if isinstance(code, int) and code:  # typer.Exit(n) comes back as a return value here
        sys.exit(code)
