"""drillbook as a new user gets it: a wheel built from this checkout, installed into a folder of
its own and run from folders that are not the checkout. The project folder (the current folder or
$DRILLBOOK_HOME) takes precedence over what ships with the package, in the CLI and in the kernel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPOSITORY

pytestmark = pytest.mark.integration

SHIPPED = ("runbooks", "experiments", "loadtests", "gamedays", "targets")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from the checkout the way `pip install .` builds it (isolated build)."""
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPOSITORY)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    return next(out.glob("drillbook-*.whl"))


@pytest.fixture(scope="module")
def site(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed into a folder of its own, put first on the path of every run below."""
    folder = tmp_path_factory.mktemp("site")
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(folder),
                                str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    return folder


def installed_drillbook(site: Path, *args: str, cwd: Path, env: dict[str, str] | None = None,
                        timeout: float = 180) -> subprocess.CompletedProcess[str]:
    environ = {key: value for key, value in os.environ.items() if key != "DRILLBOOK_HOME"}
    environ.update({"PYTHONPATH": str(site), "COLUMNS": "200", **(env or {})})
    return subprocess.run([sys.executable, "-m", "drillbook", *args], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def tracked_files(folder: str) -> list[str]:
    listed = subprocess.run(["git", "-C", str(REPOSITORY), "ls-files", folder], capture_output=True, text=True)
    if listed.returncode != 0:  # not a git checkout: every file on disk
        return [str(p.relative_to(REPOSITORY)) for p in (REPOSITORY / folder).rglob("*") if p.is_file()]
    return listed.stdout.split()


def test_the_wheel_ships_every_runbook_experiment_locustfile_plan_and_profile(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in SHIPPED:
        files = tracked_files(folder)
        assert files, folder
        missing = [f for f in files if f"drillbook/shipped/{f}" not in names]
        assert missing == [], missing
    assert not [n for n in names if "__pycache__" in n or n.startswith("drillbook/shipped/results")]


def test_the_installed_package_finds_its_files_from_any_folder(site, tmp_path):
    where = installed_drillbook(site, "version", cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    imported = subprocess.run([sys.executable, "-c", "import drillbook; print(drillbook.__file__)"], cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert imported.stdout.strip().startswith(str(site))  # the installed copy, not the checkout

    listed = installed_drillbook(site, "run", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    for runbook in ("ha-replica-loss", "noisy-neighbour", "cold-start", "restore-drill", "restore-agent-state"):
        assert runbook in listed.stdout
    targets = installed_drillbook(site, "target", "list", cwd=tmp_path)
    assert targets.returncode == 0 and "sandbox" in targets.stdout, targets.stderr
    unknown = installed_drillbook(site, "run", "no-such-runbook", cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1 and "unknown runbook 'no-such-runbook'; known:" in unknown.stderr
    assert "cold-start" in unknown.stderr


def test_nothing_to_find_is_one_line_and_exit_2(site, tmp_path):
    broken = tmp_path / "site"
    shutil.copytree(site, broken)
    shutil.rmtree(broken / "drillbook" / "shipped")  # an installation without its files
    for args in (["run"], ["run", "cold-start"], ["gameday"], ["target", "list"],
                 ["load", "agent-sessions", "--out", str(tmp_path / "load")]):
        result = installed_drillbook(broken, *args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("drillbook: ") and "found" in lines[0], (args, result.stderr)
        assert "Traceback" not in result.stderr


def project_with_own_sandbox_profile(folder: Path, trials: int) -> Path:
    """A user's project folder: its own targets/sandbox.yaml (an SLO of its own) and its own copy of
    the cold-start experiment under another title."""
    (folder / "targets").mkdir(parents=True)
    profile = yaml.safe_load((REPOSITORY / "targets" / "sandbox.yaml").read_text())
    profile.setdefault("slos", {})["cold-start"] = {"trials": trials}
    (folder / "targets" / "sandbox.yaml").write_text(yaml.safe_dump(profile))
    (folder / "experiments").mkdir()
    experiment = yaml.safe_load((REPOSITORY / "experiments" / "cold-start.yaml").read_text())
    experiment["title"] = "the project's own cold start"
    (folder / "experiments" / "cold-start.yaml").write_text(yaml.safe_dump(experiment))
    return folder


def test_a_project_folder_takes_precedence_in_the_cli_and_in_the_kernel(site, sandbox, tmp_path):
    project = project_with_own_sandbox_profile(tmp_path / "project", trials=1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    state = {"DRILLBOOK_STATE_DIR": str(sandbox.state_dir)}
    # found through $DRILLBOOK_HOME from another folder, evidence in the project's results/
    run = installed_drillbook(site, "run", "cold-start", cwd=elsewhere,
                              env={**state, "DRILLBOOK_HOME": str(project)})
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"evidence in {project / 'results'}" in " ".join(run.stderr.split())
    bundles = [p for p in (project / "results").iterdir() if p.is_dir()]
    assert len(bundles) == 1 and not (elsewhere / "results").exists()
    summary = json.loads((bundles[0] / "summary.json").read_text())
    manifest = json.loads((bundles[0] / "manifest.json").read_text())
    assert manifest["parameters"]["trials"] == 1  # the project's profile, not the shipped one (3)
    assert summary["metrics"]["trials_completed"] == 1
    journals = [json.loads(p.read_text()) for p in (bundles[0] / "chaos").rglob("journal.json")]
    assert journals and {j["experiment"]["title"] for j in journals} == {"the project's own cold start"}
    # the current folder is the project folder when $DRILLBOOK_HOME is not set
    listed = installed_drillbook(site, "target", "list", cwd=project, env=state)
    assert str(project / "targets" / "sandbox.yaml") in listed.stdout, listed.stdout
