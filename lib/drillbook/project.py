"""Where drillbook finds runbooks, experiments, load profiles, game-day plans and target profiles,
and where evidence goes by default.

Three places are searched, in order: the user's project folder ($DRILLBOOK_HOME, else the current
folder), the files shipped with drillbook (`drillbook/shipped/` inside an installed package, or
the source tree of an editable install), then the runbooks and experiments of scenario packages
(entry-point group `drillbook.scenarios`). A name found in the project folder shadows
the shipped one; a path is taken as it is. The kernel of a runbook resolves names the same way:
`execute` hands it the project folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from drillbook.config import ENV_HOME, project_dir
from drillbook.errors import ConfigError

PACKAGE_DIR = Path(__file__).resolve().parent
NAME_MAX = 255  # bytes in one part of a path, on the file systems drillbook runs on


@dataclass(frozen=True)
class Kind:
    """One kind of file drillbook looks up by name: where it lives and how it is spelt."""

    label: str
    folders: tuple[str, ...]
    suffixes: tuple[str, ...]
    dashes_for_underscores: bool = False  # loadtests/agent_sessions.py is the profile agent-sessions

    def stem(self, name: str) -> str:
        return name.replace("-", "_") if self.dashes_for_underscores else name

    def name(self, path: Path) -> str:
        return path.stem.replace("_", "-") if self.dashes_for_underscores else path.stem


DRILLS = Kind("runbook", ("runbooks",), (".ipynb",))
ONCALL_RUNBOOKS = Kind("on-call runbook", ("runbooks/oncall",), (".ipynb",))
RUNBOOKS = Kind("runbook", ("runbooks", "runbooks/oncall"), (".ipynb",))
EXPERIMENTS = Kind("experiment", ("experiments",), (".yaml", ".yml", ".json"))
LOAD_PROFILES = Kind("load profile", ("loadtests",), (".py",), dashes_for_underscores=True)
PLANS = Kind("game-day plan", ("gamedays",), (".yaml", ".yml"))
TARGETS = Kind("target", ("targets",), (".yaml", ".yml"))
PRESETS = Kind("target preset", ("targets/presets",), (".yaml", ".yml"))  # profile fragments (profile.preset)


def shipped_dir() -> Path | None:
    """The files that come with drillbook: inside the installed package, or the source tree of an
    editable install; None when neither is there (a broken installation)."""
    packaged = PACKAGE_DIR / "shipped"
    if packaged.is_dir():
        return packaged
    source = PACKAGE_DIR.parents[1]
    if (source / "pyproject.toml").is_file() and (source / "runbooks").is_dir():
        return source
    return None


def scenario_package_dirs() -> list[Path]:
    """The folders of the scenario packages installed here (entry-point group drillbook.scenarios,
    each naming the module that declares its scenarios): a package keeps its notebooks in
    runbooks/ and its experiments in experiments/ beside that module. Found without importing."""
    from importlib.util import find_spec

    from drillbook.plugins import SCENARIOS, installed

    found = []
    for entry in installed(SCENARIOS):
        try:
            spec = find_spec(entry.value.split(":", 1)[0])
        except (ImportError, ValueError):
            continue  # named when the scenarios load (drillbook.scenarios)
        if spec is not None and spec.origin:
            folder = Path(spec.origin).parent
            if folder not in found and any((folder / sub).is_dir() for sub in ("runbooks", "experiments")):
                found.append(folder)
    return found


def search_path() -> list[Path]:
    """Where names are looked up, first match wins: the project folder, the shipped files, then the
    scenario packages installed here."""
    roots = [project_dir()]
    for extra in (shipped_dir(), *scenario_package_dirs()):
        if extra is not None and extra not in roots:
            roots.append(extra)
    return roots


def _searched(kind: Kind) -> str:
    return ", ".join(str(root / folder) for root in search_path() for folder in kind.folders)


def _is_path(kind: Kind, text: str) -> bool:
    return Path(text).suffix in kind.suffixes or os.sep in text


def find(kind: Kind, name_or_path: str) -> Path:
    """The file a name (looked up in the search path) or a path (taken as it is) stands for;
    anything not found is one ConfigError line that lists what is known and where it looked."""
    too_long = next((part for part in Path(name_or_path).parts if len(os.fsencode(part)) > NAME_MAX), None)
    if too_long is not None:  # the file system would refuse it with ENAMETOOLONG
        raise ConfigError(f"{kind.label} {name_or_path[:40]!r}… is not a name or a path: a part of it is "
                          f"{len(os.fsencode(too_long))} bytes long (at most {NAME_MAX})")
    if _is_path(kind, name_or_path):
        candidate = Path(name_or_path).expanduser()
        if candidate.is_file() and candidate.suffix in kind.suffixes:
            return candidate.resolve()
        raise ConfigError(f"{kind.label} file {name_or_path} does not exist"
                          + ("" if candidate.suffix in kind.suffixes or not candidate.is_file()
                             else f" (expected {' or '.join(kind.suffixes)})"))
    for root in search_path():
        for folder in kind.folders:
            for suffix in kind.suffixes:
                path = root / folder / f"{kind.stem(name_or_path)}{suffix}"
                if path.is_file():
                    return path
    known = require_names(kind)
    raise ConfigError(f"unknown {kind.label} {name_or_path!r}; known: {', '.join(known)} "
                      f"(or a path to a {'/'.join(kind.suffixes)} file)")


def names(kind: Kind) -> list[str]:
    """Every name of this kind in the search path (a project's own shadow the shipped ones)."""
    found: set[str] = set()
    for root in search_path():
        for folder in kind.folders:
            directory = root / folder
            if directory.is_dir():
                found |= {kind.name(p) for p in directory.iterdir() if p.is_file() and p.suffix in kind.suffixes}
    return sorted(found)


def require_names(kind: Kind) -> list[str]:
    """names(kind), or one ConfigError line when there are none at all."""
    known = names(kind)
    if not known:
        raise ConfigError(f"no {kind.label}s found (searched {_searched(kind)}); "
                          f"set {ENV_HOME} to your project folder or reinstall drillbook")
    return known
