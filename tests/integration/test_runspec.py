"""A run is resolved once: along `drillbook run`, the process that starts it and the kernel that
runs the notebook each load the target profile once, validate the parameters once and build the
target once (counted by tests/instrument/sitecustomize.py, which wraps and calls through)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPOSITORY

pytestmark = pytest.mark.integration

HA_SHORT = ["-p", "users=2", "-p", "duration_s=11", "-p", "kill_after_s=2", "-p", "max_recovery_s=5"]


def test_the_runner_and_its_kernel_each_resolve_the_run_once(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=200)
    counts = tmp_path / "counts"
    counts.mkdir()
    env = {**os.environ, "DRILLBOOK_TEST_COUNT_DIR": str(counts),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY / "tests" / "instrument"),
                                                       os.environ.get("PYTHONPATH", "")]))}
    done = subprocess.run([sys.executable, "-m", "drillbook", "run", "ha-replica-loss", *HA_SHORT, "--state-dir",
                           str(handle.state_dir), "--results", str(tmp_path / "results")],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    processes = [json.loads(path.read_text()) for path in counts.glob("*.json")]
    runner = [p for p in processes if p["argv"][0].endswith(os.path.join("drillbook", "__main__.py"))]
    kernel = [p for p in processes if any("ipykernel" in part for part in p["argv"])]
    assert len(kernel) == 1 and len(runner) == 1, [p["argv"][:3] for p in processes]
    for process in (*runner, *kernel):
        found = {name: process.get(name, 0) for name in ("profiles_loaded", "validations", "targets_built")}
        assert found == {"profiles_loaded": 1, "validations": 1, "targets_built": 1}, (process["argv"][:3], found)
