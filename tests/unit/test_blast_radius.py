"""`drillbook run --dry-run` and `gameday --dry-run`: what each runbook would act on, on each kind
of target, said from the declaration, the parameters and the profile, with nothing touched."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from drillbook.blast import blast_radius
from drillbook.runspec import resolve_run
from drillbook.scenarios import REGISTRY

KUBERNETES = {"name": "cluster", "kind": "kubernetes",
              "kubernetes": {"context": "test", "namespace": "agents", "allowed_contexts": ["test"],
                             "allowed_namespaces": ["agents", "tenant-b"]},
              "workload": {"gateway_url": "http://127.0.0.1:8080",
                           "agent": {"deployment": "agent", "selector": "app=agent"},
                           "inference": {"deployment": "model-server", "selector": "app=model-server"},
                           "aggressor": {"deployment": "aggressor", "selector": "app=aggressor",
                                         "namespace": "tenant-b"},
                           "store": {"backup": "./b.sh", "restore": "./r.sh {backup}", "destroy": "./d.sh"}},
              "tenants": {"tenant-a": {"key_env": "TA_KEY"},
                          "tenant-b": {"key_env": "TB_KEY", "namespace": "tenant-b", "quota": "inference"}}}
COMMANDS = {"name": "harness", "kind": "commands",
            "workload": {"gateway_url": "http://127.0.0.1:8080",
                         "agent": {"commands": {"status": "./ops status agent",
                                                "kill": "./ops kill agent {count} {signal}",
                                                "scale": "./ops scale agent {replicas}"}}},
            "tenants": {"tenant-a": {"key_env": "TA_KEY"}}}
EXTRA = {"shed-noisy-tenant": {"tenant": "tenant-a"}}


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("TA_KEY", "a-key")
    monkeypatch.setenv("TB_KEY", "b-key")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))  # any call to an API server would fail
    found = {"sandbox": "sandbox"}
    for name, spec in (("kubernetes", KUBERNETES), ("commands", COMMANDS)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec))
        found[name] = str(path)
    return found


@pytest.mark.parametrize("kind", ["sandbox", "kubernetes", "commands"])
@pytest.mark.parametrize("runbook", sorted(REGISTRY))
def test_every_runbook_says_what_it_would_act_on_for_every_kind(runbook, kind, profiles, tmp_path):
    state = tmp_path / "state"
    lines = blast_radius(resolve_run(runbook, profiles[kind], EXTRA.get(runbook, {}), state))
    assert lines[0].startswith(f"{runbook} on ") and f"(kind {kind})" in lines[0] and "nothing is touched" in lines[0]
    assert len(lines) >= 1 + len(REGISTRY[runbook].needs)  # a line for each thing the runbook does to a target
    assert not state.exists()  # nothing made, nothing asked


def test_the_counts_the_parameters_imply_and_the_rights_each_action_takes_are_said(profiles, tmp_path):
    ha = blast_radius(resolve_run("ha-replica-loss", profiles["kubernetes"],
                                  {"kill_count": "2", "kill_signal": "SIGTERM", "users": "5"}, tmp_path / "s"))
    assert ("  KILL replicas of deployment agents/agent (pods app=agent) in context test: 2 replica(s) with SIGTERM, "
            "4.0s into the load") in ha
    assert "      with the rights: list pods, delete pods" in ha
    assert any(line.startswith("  load: 5 session(s) for 16.0s") for line in ha)
    noisy = blast_radius(resolve_run("noisy-neighbour", profiles["kubernetes"], {}, tmp_path / "s"))
    assert any(line.startswith("  SCALE deployment tenant-b/aggressor") for line in noisy)  # the tier's own namespace
    restore = blast_radius(resolve_run("restore-drill", profiles["kubernetes"], {}, tmp_path / "s"))
    assert "  DESTROY the store, by the command `./d.sh`" in "\n".join(restore)
    assert not any("rights" in line for line in restore)  # the store is acted on by the profile's own commands


def test_what_a_profile_does_not_describe_is_said_and_an_optional_tier_is_left_alone(profiles, tmp_path):
    cold = blast_radius(resolve_run("cold-start", profiles["commands"], {}, tmp_path / "s"))
    assert "  SCALE agent, by the command `./ops scale agent {replicas}`: to 0 and back, 3 time(s), idle 1.0s each" in cold
    assert "  no inference tier in this profile: left alone" in cold
    restore = blast_radius(resolve_run("restore-drill", profiles["commands"], {}, tmp_path / "s"))
    assert "  store (backup) is not described by this profile: the run would be refused" in restore


def test_the_cli_dry_runs_touch_nothing_and_exit_0(profiles, tmp_path):
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200"}
    run = subprocess.run([sys.executable, "-m", "drillbook", "run", "ha-replica-loss", "--target",
                          profiles["kubernetes"], "--dry-run", "--results", str(tmp_path / "results")],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert "KILL replicas of deployment agents/agent" in run.stdout
    plan = subprocess.run([sys.executable, "-m", "drillbook", "gameday", "--dry-run"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.startswith("game day default on sandbox: 5 run(s), a dry run")
    assert "[4] restore-drill on sandbox" in plan.stdout
    assert not (tmp_path / "state").exists() and not (tmp_path / "results").exists()
