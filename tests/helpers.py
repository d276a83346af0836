"""Small helpers shared by tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]  # the checkout the tests run from


def team_mapping(*requirements: tuple[str, str, list[str]]) -> str:
    """A team's own control mapping (YAML): one framework, "team", with these (id, title,
    evidenced_by) requirements."""
    lines = ["frameworks:", "  - id: team", "    title: Our own resilience policy", "    requirements:"]
    for identifier, title, controls in requirements:
        lines += [f'      - id: "{identifier}"', f"        title: {title}", f"        evidenced_by: [{', '.join(controls)}]"]
    return "\n".join(lines) + "\n"


def poll(what: str, condition: Callable[[], object], timeout_s: float = 90.0, interval_s: float = 0.2) -> object:
    """condition()'s first truthy value; TimeoutError naming `what` when none comes in time (for
    code that runs outside pytest too, such as the node checks)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout_s:g} s")
        time.sleep(interval_s)


def wait_for(condition: Callable[[], object], timeout: float = 15.0, interval: float = 0.05) -> object:
    """Poll until condition() is truthy; the value is returned, a timeout fails the test."""
    try:
        return poll("condition", condition, timeout, interval)
    except TimeoutError as error:
        pytest.fail(f"{error}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def fresh_database(server: str) -> str:
    """A new, empty database on the test PostgreSQL server (a base DSN without a database name)."""
    import uuid

    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{server}/{name}"


def install_distribution(folder: Path, name: str, sources: list[Path], entry_points: dict[str, dict[str, str]]) -> Path:
    """A package installed as pip would leave it, without pip: each source (a module file or a
    package folder) copied into `folder`, and a dist-info with the distribution's entry points
    ({group: {name: object}}). Put `folder` on the Python path (and PYTHONPATH, for kernels)."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    for source in sources:
        if source.is_dir():
            shutil.copytree(source, folder / source.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, folder / source.name)
    info = folder / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items())
        for group, entries in entry_points.items()))
    return folder


def cached_venv(requirement: str) -> Path:
    """A third-party service installed from PyPI once into its own virtual environment (its pins
    are not drillbook's), in a cache folder keyed by the requirement."""
    name = requirement.split("[")[0].split("==")[0] + "-" + requirement.split("==")[1]
    folder = Path.home() / ".cache" / "drillbook" / name
    done = folder / "installed.txt"
    if not done.exists() or done.read_text() != requirement:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True, timeout=120)
        installed = subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "-q", requirement],
                                   capture_output=True, text=True, timeout=900)
        if installed.returncode != 0:
            pytest.skip(f"{requirement} could not be installed: {installed.stderr.strip().splitlines()[-1:]}")
        done.write_text(requirement)
    return folder
