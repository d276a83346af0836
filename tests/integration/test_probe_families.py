"""The probe families (tests/probes), each probe its own test: tamper kinds that `verify` must
catch and name, bad input that must be one line and exit 2 with nothing touched, secrets that
must reach no file of the evidence. Each family's control (an untouched history, a good command,
a plain value found in the evidence) must come out clean, so the judges can fail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.probes import bad_input, secrets, tamper

pytestmark = pytest.mark.integration
TAMPER = tamper.probes(Path("/unused"))  # for the names; each test builds its probe on its own history
BAD_INPUT = bad_input.probes(Path("/unused"))
SECRETS = secrets.probes(Path("/unused"), Path("/unused"))


@pytest.fixture(scope="module")
def pristine_history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tamper.pristine(tmp_path_factory.mktemp("pristine"))


@pytest.fixture(scope="module")
def probe_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with bad_input.target(tmp_path_factory.mktemp("target")) as state:
        yield state


@pytest.fixture(scope="module")
def secret_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the secrets family keeps its two runs (made by its first probe, once)."""
    return tmp_path_factory.mktemp("secret-runs")


@pytest.mark.parametrize("index", range(len(TAMPER)), ids=[p.name for p in TAMPER])
def test_tamper_is_caught_and_named(index, pristine_history, tmp_path_factory):
    probe = tamper.probes(pristine_history)[index]
    # not under tmp_path: the bundles are forged on purpose, and the check every test is held to
    # after it ran (tests/integration/conftest.py) would rightly refuse them
    missed = probe.act(tmp_path_factory.mktemp("tampered"))
    assert missed is None, missed


@pytest.mark.parametrize("index", range(len(BAD_INPUT)), ids=[p.name for p in BAD_INPUT])
def test_bad_input_is_one_line_exit_2_and_touches_nothing(index, probe_target, tmp_path):
    probe = bad_input.probes(probe_target)[index]
    missed = probe.act(tmp_path)
    assert missed is None, missed


@pytest.mark.parametrize("index", range(len(SECRETS)), ids=[p.name for p in SECRETS])
def test_no_secret_reaches_the_evidence(index, secret_runs, probe_target, tmp_path):
    probe = secrets.probes(secret_runs, probe_target)[index]
    missed = probe.act(tmp_path)
    assert missed is None, missed
