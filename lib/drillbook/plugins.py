"""The packages that extend drillbook, found through their entry points, by group.

- `drillbook.scenarios`: a module that registers scenarios (drillbook.scenarios), with its
  notebooks and experiments beside it (drillbook.project)
- `drillbook.targets`: a target kind (drillbook.target_kinds)
- `drillbook.verifiers`: a delivery verifier (drillbook.delivery)

Reading the installed packages' metadata takes about 10 ms, and profile validation, every name
lookup and every import of the scenario registry ask: the entry points are read once per Python
path, and again when the path changes (a package put on it at run time).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points

SCENARIOS = "drillbook.scenarios"
TARGETS = "drillbook.targets"
VERIFIERS = "drillbook.verifiers"


@lru_cache(maxsize=16)
def _read(group: str, path: tuple[str, ...]) -> tuple[EntryPoint, ...]:
    return tuple(entry_points(group=group))


def installed(group: str) -> tuple[EntryPoint, ...]:
    """The entry points of one group, as the packages on the current Python path declare them."""
    return _read(group, tuple(sys.path))
