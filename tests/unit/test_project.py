"""Finding runbooks, experiments, load profiles, plans and profiles by name: the project folder
first, then what ships with drillbook; evidence by default under the project folder; and the small
things a new user meets on the way (redaction of real secrets only, figures people can read, a
game day that errored is not a FAIL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drillbook import project
from drillbook.config import results_dir
from drillbook.errors import ConfigError
from drillbook.evidence.redact import REDACTED, Redactor
from drillbook.evidence.summary import SloCheck, figure
from drillbook.gameday import gameday_verdict
from tests.helpers import REPOSITORY


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project folder named by $DRILLBOOK_HOME, with the current folder somewhere else."""
    folder = tmp_path / "project"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("DRILLBOOK_HOME", str(folder))
    monkeypatch.delenv("DRILLBOOK_RESULTS", raising=False)
    monkeypatch.chdir(elsewhere)
    return folder


def test_names_come_from_the_shipped_files_when_the_project_has_none(home):
    assert project.shipped_dir() is not None
    assert {"cold-start", "ha-replica-loss", "noisy-neighbour", "restore-drill"} <= set(project.names(project.DRILLS))
    assert "restore-agent-state" in project.names(project.RUNBOOKS)
    assert "restore-agent-state" not in project.names(project.DRILLS)
    assert project.find(project.LOAD_PROFILES, "agent-sessions").name == "agent_sessions.py"
    assert project.find(project.PLANS, "default").parent.name == "gamedays"
    assert project.find(project.TARGETS, "sandbox").is_relative_to(project.shipped_dir())


def test_a_project_file_shadows_the_shipped_one_and_adds_to_the_names(home):
    (home / "targets").mkdir()
    (home / "targets" / "sandbox.yaml").write_text("name: sandbox\nkind: sandbox\n")
    (home / "targets" / "staging.yml").write_text("name: staging\nkind: sandbox\n")
    (home / "loadtests").mkdir()
    (home / "loadtests" / "my_agents.py").write_text("")
    assert project.find(project.TARGETS, "sandbox") == home / "targets" / "sandbox.yaml"
    assert project.find(project.TARGETS, "staging") == home / "targets" / "staging.yml"
    assert "staging" in project.names(project.TARGETS) and "sandbox" in project.names(project.TARGETS)
    assert project.find(project.LOAD_PROFILES, "my-agents") == home / "loadtests" / "my_agents.py"
    assert "my-agents" in project.names(project.LOAD_PROFILES)


def test_a_path_is_taken_as_it_is_and_a_missing_one_is_named(home, tmp_path):
    plan = tmp_path / "mine.yaml"
    plan.write_text("name: mine\nrunbooks: [{runbook: cold-start}]\n")
    assert project.find(project.PLANS, str(plan)) == plan
    with pytest.raises(ConfigError, match=r"game-day plan file .*nothing\.yaml does not exist"):
        project.find(project.PLANS, str(tmp_path / "nothing.yaml"))


def test_an_unknown_name_lists_what_is_known(home):
    with pytest.raises(ConfigError, match=r"unknown experiment 'ha-replica-los'; known: cold-start, ha-replica-loss"):
        project.find(project.EXPERIMENTS, "ha-replica-los")


def test_the_current_folder_is_the_project_without_drillbook_home(tmp_path, monkeypatch):
    monkeypatch.delenv("DRILLBOOK_HOME", raising=False)
    monkeypatch.delenv("DRILLBOOK_RESULTS", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gamedays").mkdir()
    (tmp_path / "gamedays" / "default.yaml").write_text("name: mine\nrunbooks: [{runbook: cold-start}]\n")
    assert project.find(project.PLANS, "default") == tmp_path / "gamedays" / "default.yaml"
    assert results_dir() == tmp_path / "results"
    assert results_dir(tmp_path / "elsewhere") == tmp_path / "elsewhere"
    monkeypatch.setenv("DRILLBOOK_RESULTS", str(tmp_path / "audit"))
    assert results_dir() == tmp_path / "audit"


def test_evidence_goes_to_the_project_folder_named_by_drillbook_home(home):
    assert results_dir() == home / "results"


def test_the_checkout_is_the_shipped_source_of_an_editable_install():
    shipped = project.shipped_dir()
    assert shipped in (REPOSITORY, project.PACKAGE_DIR / "shipped")


def test_working_folders_are_not_secrets_but_secrets_still_are(tmp_path):
    environ = {"PWD": str(tmp_path), "OLDPWD": "/work/main", "SSH_AUTH_SOCK": str(tmp_path),
               "API_TOKEN": "tok-123456789", "DRILLBOOK_TENANT_KEYS": "a=key-aaaaaaaa,b=key-bbbbbbbb"}
    redactor = Redactor(["dbk_tenantsecret"], environ)
    text = f"cwd {tmp_path}/work, old /work/main/targets; tok-123456789 key-aaaaaaaa key-bbbbbbbb dbk_tenantsecret"
    cleaned = redactor.text(text)
    assert f"cwd {tmp_path}/work, old /work/main/targets;" in cleaned
    assert cleaned.count(REDACTED) == 4 and "tok-" not in cleaned and "key-" not in cleaned
    assert redactor.data({"api_token": "x", "target": "/work/main/targets/sandbox.yaml"}) == {
        "api_token": REDACTED, "target": "/work/main/targets/sandbox.yaml"}


def test_secret_named_options_and_settings_are_masked_where_they_are_written_and_figures_are_not():
    redactor = Redactor([], {})
    written = ("ctl --admin http://127.0.0.1:9 --token=cmd-token-5f0e kill 1; ctl --api-key opt-key-77a1 scale 2; "
               "incident INC-7 token=typed-token-8b2d; curl -H 'X-Api-Key: hdr-key-91c3'; {\"password\": \"pw-0a9b\"}")
    cleaned = redactor.text(written)
    for secret in ("cmd-token-5f0e", "opt-key-77a1", "typed-token-8b2d", "hdr-key-91c3", "pw-0a9b"):
        assert secret not in cleaned, cleaned
    assert cleaned.count(REDACTED) == 5 and "--admin http://127.0.0.1:9" in cleaned and "kill 1" in cleaned
    # not secrets: figures whose names hold "token", a file named by a secret-named option, prose
    for kept in ("tokens_per_second: 4", "max_tokens=256", "first_token 1.25", "--token-file /run/secrets/t",
                 "the session token expired", "api_key: 123456", "auth_header: X-Api-Key", "--token -v"):
        assert redactor.text(kept) == kept
    assert redactor.data({"phase_means_s": {"first_token": 1.19}, "token_count": 3, "tls_secret": True,
                          "api_token": "x"}) == {"phase_means_s": {"first_token": 1.19}, "token_count": 3,
                                                 "tls_secret": True, "api_token": REDACTED}


@pytest.mark.parametrize(("value", "unit", "shown"), [
    (1.1905298233032227, "s", "1.19s"), (3.0, "", "3"), (0, "", "0"), (0.012345, "", "0.0123"),
    (2345.6789, "ms", "2345.7ms"), (None, "s", "not measured"), (-0.5, "", "-0.5"),
])
def test_figures_are_shown_as_people_read_them(value, unit, shown):
    assert figure(value, unit) == shown


def test_a_check_describes_itself_with_readable_figures():
    check = SloCheck(name="cold-start P95", comparison="<=", threshold=5.0, value=1.1905298233032227, unit="s")
    assert check.describe() == "cold-start P95 1.19s <= 5s: pass"


@pytest.mark.parametrize(("verdicts", "expected"), [
    (["PASS", "PASS"], "PASS"), (["PASS", "FAIL", "ERROR"], "FAIL"), (["ERROR", "ERROR"], "ERROR"),
    (["PASS", "ERROR"], "ERROR"), (["PASS", "ABORTED"], "ERROR"), ([], "ERROR"),
])
def test_a_game_day_that_could_not_judge_is_error_not_fail(verdicts, expected):
    verdict, reason = gameday_verdict(verdicts)
    assert verdict == expected and reason
