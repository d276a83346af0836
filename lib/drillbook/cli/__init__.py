"""The `drillbook` command: one module per group of commands, registered on one Typer app."""

from drillbook.cli import chaos, evidence, findings, gameday, load, runbooks, sandbox, target  # noqa: F401 - registers
from drillbook.cli.app import app, main

__all__ = ["app", "main"]
