"""JMESPath as drillbook reads workloads' answers with it: expressions checked once, compiled once.

Profiles describe where an answer carries something (a session id, a turn's digest, a stream
event's token) as JMESPath expressions, from the jmespath library; this is the one place they are
compiled and applied (drillbook.agentapi, drillbook.streamapi).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError


@lru_cache(maxsize=256)
def compiled(expression: str) -> Any:
    return jmespath.compile(expression)


def check_expression(expression: str | None) -> str | None:
    """A JMESPath expression that compiles (None stays None: not mapped)."""
    if expression is None:
        return None
    try:
        compiled(expression)
    except JMESPathError as error:
        raise ValueError(f"{expression!r} is not a JMESPath expression: {' '.join(str(error).split())}") from None
    return expression


def pick(expression: str | None, document: Any) -> Any:
    """The value an expression selects in a JSON document; None when unmapped or absent."""
    if expression is None or document is None:
        return None
    return compiled(expression).search(document)


__all__ = ["check_expression", "compiled", "pick"]
