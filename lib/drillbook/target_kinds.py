"""The kinds of target a profile may name: drillbook's own three, and any a package adds.

A package adds a kind through the entry-point group `drillbook.targets`: the entry's name is the
kind a profile names (`kind: NAME`), its object a callable taking the loaded profile and the state
folder asked for (or None) and returning the target (drillbook.targets.Target; subclassing
drillbook.targets.store.ProfileTarget gives the gateway, tenant keys and store commands). A
profile of such a kind is validated as drillbook's `commands` kind is, less the commands: it needs
`workload.gateway_url` and a tenant, and it may carry `options`, read by that kind alone.

Kept free of the profile and target modules, so that both can ask it without an import circle.
"""

from __future__ import annotations

from typing import Any, Callable

from drillbook.errors import ConfigError
from drillbook.plugins import TARGETS as GROUP
from drillbook.plugins import installed
BUILT_IN = ("sandbox", "kubernetes", "commands")


def added_kinds() -> dict[str, Any]:
    """The kinds installed packages add, by name (entry points, not loaded yet). A package cannot
    replace one of drillbook's own."""
    return {entry.name: entry for entry in installed(GROUP) if entry.name not in BUILT_IN}


def known_kinds() -> list[str]:
    return [*BUILT_IN, *sorted(added_kinds())]


def unknown_kind(kind: str) -> str:
    """The one line that refuses a kind nobody here knows."""
    return (f"unknown target kind {kind!r}; known: {', '.join(known_kinds())} "
            f"(a package adds a kind through the entry-point group {GROUP})")


def check_kind(kind: str) -> str:
    """kind itself when a profile may name it; a ValueError naming the known kinds otherwise."""
    if kind in BUILT_IN or kind in added_kinds():
        return kind
    raise ValueError(unknown_kind(kind))


def added_factory(kind: str) -> Callable[..., Any]:
    """The callable that builds a target of a kind a package adds; a ConfigError when no package
    installed here adds it, or when its entry point does not load."""
    entry = added_kinds().get(kind)
    if entry is None:
        raise ConfigError(unknown_kind(kind))
    try:
        return entry.load()
    except Exception as error:  # noqa: BLE001 - a broken package is named, not a traceback
        raise ConfigError(f"target kind {kind!r} from {entry.value!r} does not load: "
                          f"{type(error).__name__}: {error}") from None
