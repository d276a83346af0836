"""Target profiles: every validation error is one line naming the field; the shipped profiles
and examples validate; the sandbox profile states the notebooks' own SLO defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from drillbook.errors import ConfigError
from drillbook.parameters import notebook_parameters, runbook_path, validate_parameters
from drillbook.profile import AgentApi, builtin_sandbox, load_profile, parse_profile
from tests.helpers import REPOSITORY

COMMANDS = {"name": "harness", "kind": "commands", "workload": {"gateway_url": "http://127.0.0.1:8080"},
            "tenants": {"team-a": {"key_env": "TEAM_A_KEY"}}}
KUBERNETES = {"name": "cluster", "kind": "kubernetes",
              "kubernetes": {"context": "test", "namespace": "agents", "allowed_contexts": ["test"],
                             "allowed_namespaces": ["agents"]},
              "workload": {"gateway_url": "http://127.0.0.1:8080"}, "tenants": {"t": {"key_env": "T_KEY"}}}


def parse(data: object, name: str = "p.yaml"):
    return parse_profile(yaml.safe_dump(data), Path(name))


def changed(base: dict, path: str, value: object) -> dict:
    """base with the dotted field set (value None deletes it)."""
    data = yaml.safe_load(yaml.safe_dump(base))
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return data


@pytest.mark.parametrize(("data", "expected"), [
    (changed(COMMANDS, "colour", "blue"), "p.yaml: invalid colour: Extra inputs are not permitted"),
    (changed(COMMANDS, "kind", "nomad"), "p.yaml: invalid kind: unknown target kind 'nomad'; known: sandbox, kubernetes, commands (a package"),
    (changed(COMMANDS, "name", "Has Spaces"), "p.yaml: invalid name: String should match pattern"),
    (changed(COMMANDS, "workload.gateway_url", None), "p.yaml: invalid input: kind commands needs workload.gateway_url"),
    (changed(COMMANDS, "workload.gateway_url", "ftp://x"), "p.yaml: invalid workload.gateway_url: must be an http(s) URL"),
    (changed(COMMANDS, "tenants", {}), "p.yaml: invalid input: kind commands needs at least one tenant"),
    (changed(COMMANDS, "tenants.team-a.key_env", "sk-live-123"),
     "p.yaml: invalid tenants.team-a.key_env: 'sk-live-123' is not an environment variable name"),
    (changed(COMMANDS, "tenants.team-a.key", "secret"), "p.yaml: invalid tenants.team-a.key: Extra inputs"),
    (changed(COMMANDS, "api.turn", "/v1/turns"), "p.yaml: invalid api: the turn path or turn_body must contain {session}"),
    (changed(COMMANDS, "workload.agent", {"deployment": "agent"}),
     "p.yaml: invalid input: kind commands needs workload.agent.commands"),
    (changed(COMMANDS, "workload.agent", {"commands": {"kill": "x"}}),
     "p.yaml: invalid workload.agent.commands.status: Field required"),
    (changed(KUBERNETES, "kubernetes", None), "p.yaml: invalid input: kind kubernetes needs a kubernetes section"),
    (changed(KUBERNETES, "tenants.t.namespace", "kube-system"),
     "p.yaml: invalid input: tenants.t.namespace 'kube-system' is not in kubernetes.allowed_namespaces"),
    (changed(KUBERNETES, "workload.aggressor", {"deployment": "a", "namespace": "default"}),
     "p.yaml: invalid input: workload.aggressor.namespace 'default' is not in kubernetes.allowed_namespaces"),
    (changed(KUBERNETES, "kubernetes.context", "production"),
     "p.yaml: invalid kubernetes: context 'production' is not in allowed_contexts"),
    (changed(KUBERNETES, "kubernetes.allowed_namespaces", []), "p.yaml: invalid kubernetes.allowed_namespaces"),
    ({"name": "sandbox", "kind": "sandbox", "tenants": {"a": {"key_env": "A"}}},
     "p.yaml: invalid input: the sandbox kind takes its gateway and tenants from the running sandbox"),
    (changed(COMMANDS, "slos", {"chaos-monkey": {"x": 1}}), "p.yaml: invalid slos.chaos-monkey: unknown runbook"),
    (changed(COMMANDS, "slos", {"cold-start": {"slo_p99_s": 1}}),
     "p.yaml: invalid slos.cold-start.slo_p99_s: not a parameter of cold-start"),
    (changed(COMMANDS, "slos", {"cold-start": {"target": "x"}}),
     "p.yaml: invalid slos.cold-start.target: not a parameter of cold-start"),
    (changed(COMMANDS, "slos", {"cold-start": {"slo_p95_s": "fast"}}),
     "p.yaml: invalid slos.cold-start.slo_p95_s: 'fast' is not a number"),
    (changed(COMMANDS, "slos", {"cold-start": {"trials": 2.5}}),
     "p.yaml: invalid slos.cold-start.trials: 2.5 is not an integer"),
    (changed(COMMANDS, "slos", {"cold-start": {"slo_p95_s": -1}}),
     "p.yaml: invalid slos.cold-start.slo_p95_s: -1 must not be negative"),
    (["a", "list"], "p.yaml: a profile is a mapping of fields"),
    # code sandboxes: escape probes aim at loopback only; the sandbox kind has its own
    (changed(COMMANDS, "workload.sandboxes", {"fleet": "f", "kill": "k {sandbox}", "alive": "a {sandbox}",
                                              "escape_targets": [{"name": "db", "kind": "tcp", "address": "10.0.0.5:5432"}]}),
     "p.yaml: invalid workload.sandboxes.escape_targets.0: escape target 'db': '10.0.0.5:5432' is not a loopback "
     "address and port (probes aim at this machine's loopback only)"),
    (changed(COMMANDS, "workload.sandboxes", {"fleet": "f", "kill": "k {session}", "alive": "a {sandbox}"}),
     "p.yaml: invalid workload.sandboxes: kill: {session} is not filled in for this command (it fills in {sandbox})"),
    ({"name": "sandbox", "kind": "sandbox", "workload": {"sandboxes": {"fleet": "f", "kill": "k", "alive": "a"}}},
     "p.yaml: invalid input: the sandbox kind has code sandboxes of its own: workload.sandboxes is for other kinds"),
    # placeholders: only the names filled in for that command, only as plain names, checked at load
    (changed(COMMANDS, "workload.store", {"backup": "b", "restore": "r {nope}"}),
     "p.yaml: invalid workload.store: restore: {nope} is not filled in for this command (it fills in {backup})"),
    (changed(COMMANDS, "workload.store", {"backup": "b", "restore": "r {backup.__class__}"}),
     "p.yaml: invalid workload.store: 'r {backup.__class__}': placeholder {backup.__class__} is not a plain name"),
    (changed(COMMANDS, "workload.store", {"backup": "b", "restore": "r {backup[0]}"}),
     "p.yaml: invalid workload.store: 'r {backup[0]}': placeholder {backup[0]} is not a plain name"),
    (changed(COMMANDS, "workload.agent", {"commands": {"status": "s", "kill": "k {count} {replicas}"}}),
     "p.yaml: invalid workload.agent.commands: kill: {replicas} is not filled in for this command (it fills in "
     "{count}, {signal})"),
    (changed(COMMANDS, "workload.store", {"backup": "b 'unclosed", "restore": "r"}),
     "p.yaml: invalid workload.store: \"b 'unclosed\" does not split like a shell line"),
    # beyond loopback, only the hosts a profile names are dialled
    (changed(COMMANDS, "workload.gateway_url", "http://10.1.2.3:8080"),
     "p.yaml: invalid input: workload.gateway_url http://10.1.2.3:8080 is not on this machine's loopback and "
     "10.1.2.3 is not in allowed_hosts"),
    (changed(changed(COMMANDS, "allowed_hosts", ["*.svc.cluster.local", "10.0.0.0/8"]), "prometheus",
             {"url": "http://prometheus.monitoring.example:9090"}),
     "p.yaml: invalid input: prometheus.url http://prometheus.monitoring.example:9090 is not on this machine's "
     "loopback and prometheus.monitoring.example is not in allowed_hosts"),
])
def test_each_profile_error_is_one_line_naming_the_field(data, expected):
    with pytest.raises(ConfigError) as caught:
        parse(data)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(expected), message


def test_text_that_is_not_yaml_is_named():
    with pytest.raises(ConfigError, match=r"^p.yaml is not valid YAML"):
        parse_profile("name: [unclosed", Path("p.yaml"))


def test_a_missing_key_variable_names_the_tenant_and_the_variable(monkeypatch):
    profile = parse(COMMANDS)
    monkeypatch.delenv("TEAM_A_KEY", raising=False)
    with pytest.raises(ConfigError, match="^p.yaml: invalid tenants.team-a.key_env: environment variable TEAM_A_KEY "
                                          "is not set$"):
        profile.tenant_keys()
    monkeypatch.setenv("TEAM_A_KEY", "k-1")
    assert profile.tenant_keys() == {"team-a": "k-1"}


def test_unknown_targets_list_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown target 'prod'; known: sandbox"):
        load_profile("prod")
    with pytest.raises(ConfigError, match="does not exist"):
        load_profile("/no/such/profile.yaml")


def test_shipped_profiles_and_examples_validate(monkeypatch):
    for variable in ("ACME_AGENT_KEY", "GLOBEX_AGENT_KEY", "TEAM_A_KEY", "TEAM_B_KEY", "AGENT_TEAM_A_KEY",
                     "PLATFORM_INTERNAL_TOKEN"):
        monkeypatch.setenv(variable, "k")
    paths = sorted(p for p in (REPOSITORY / "targets").rglob("*.yaml") if p.parent.name != "presets")
    assert {p.name for p in paths} >= {"sandbox.yaml", "kubernetes.yaml", "commands.yaml", "code-sandboxes.yaml"}
    for path in paths:
        profile = load_profile(str(path))
        if profile.kind != "sandbox":
            assert profile.tenant_keys()
    assert load_profile(str(REPOSITORY / "targets" / "examples" / "kubernetes.yaml")).metrics_token("inference") == "k"


def test_a_metrics_token_comes_from_the_variable_the_profile_names_and_an_unset_one_is_refused(tmp_path,
                                                                                                monkeypatch):
    spec = {"name": "t", "kind": "commands", "workload": {"gateway_url": "http://127.0.0.1:9",
            "agent": {"commands": {"status": "true"}}}, "tenants": {"a": {"key_env": "T_A_KEY"}}}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert load_profile(str(path)).metrics_token("inference") is None  # the profile names none
    spec["workload"]["inference"] = {"commands": {"status": "true"}, "metrics_token_env": "T_TOKEN"}
    path.write_text(yaml.safe_dump(spec))
    monkeypatch.delenv("T_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"^t.yaml: invalid workload.inference.metrics_token_env: environment "
                                          r"variable T_TOKEN is not set$"):
        load_profile(str(path)).metrics_token("inference")
    monkeypatch.setenv("T_TOKEN", "s3cret")
    assert load_profile(str(path)).metrics_token("inference") == "s3cret"
    spec["workload"]["inference"]["metrics_token_env"] = "lower"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match="metrics_token_env.*'lower' is not an environment variable name"):
        load_profile(str(path))


def test_the_sandbox_profile_states_the_notebooks_own_slo_defaults():
    sandbox = builtin_sandbox()
    assert sandbox.kind == "sandbox" and sandbox.spec.delivery.verifier == "reference"
    assert sandbox.spec.api == AgentApi()  # the reference platform's API is the default
    for runbook, thresholds in sandbox.spec.slos.items():
        declared = notebook_parameters(runbook_path(runbook))
        assert {name: declared[name].default for name in thresholds} == thresholds


def test_profile_slos_sit_between_notebook_defaults_and_explicit_parameters():
    profile = parse(changed(COMMANDS, "slos", {"cold-start": {"slo_p95_s": 20, "trials": 5}}))
    path = runbook_path("cold-start")
    assert validate_parameters(path, {}, profile)["slo_p95_s"] == 20.0
    assert validate_parameters(path, {}, profile)["trials"] == 5
    assert validate_parameters(path, {"slo_p95_s": "2.5"}, profile)["slo_p95_s"] == 2.5
    assert validate_parameters(path, {})["slo_p95_s"] == 5.0


@pytest.mark.parametrize("url, allowed", [
    ("http://10.1.2.3:8080", ["10.0.0.0/8"]),
    ("http://gateway.agents.svc.cluster.local", ["*.svc.cluster.local"]),
    ("https://agents.staging.example.internal", ["AGENTS.staging.example.internal."]),
    ("http://[::1]:8080", []),
    ("http://localhost:8080", []),
    ("http://127.0.0.2:8080", []),
])
def test_loopback_and_the_hosts_a_profile_allows_are_dialled(url, allowed, monkeypatch):
    monkeypatch.setenv("TEAM_A_KEY", "k")
    profile = parse(changed(changed(COMMANDS, "workload.gateway_url", url), "allowed_hosts", allowed))
    assert profile.spec.workload.gateway_url == url.rstrip("/")


def test_a_profile_that_would_dial_another_host_is_refused_before_anything_starts(tmp_path):
    remote = tmp_path / "remote.yaml"
    remote.write_text(yaml.safe_dump(changed(COMMANDS, "workload.gateway_url", "http://192.0.2.10:8080")))
    result = subprocess.run([sys.executable, "-m", "drillbook", "target", "check", str(remote)],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "DRILLBOOK_STATE_DIR": str(tmp_path / "state"), "TEAM_A_KEY": "k"})
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "192.0.2.10 is not in allowed_hosts" in lines[0], result.stderr
    assert not (tmp_path / "state").exists()


def test_a_bad_profile_stops_drillbook_run_before_anything_starts(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(changed(COMMANDS, "tenants.team-a.key_env", "lower")))
    result = subprocess.run([sys.executable, "-m", "drillbook", "run", "cold-start", "--target", str(bad),
                             "--results", str(tmp_path / "results")], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "DRILLBOOK_STATE_DIR": str(tmp_path / "state")})
    assert result.returncode == 2
    assert result.stderr.strip().startswith("drillbook: bad.yaml: invalid tenants.team-a.key_env:")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "results").exists() and not (tmp_path / "state").exists()


@pytest.mark.parametrize("preset", ["langserve", "openai-chat", "reference"])
def test_each_shipped_preset_makes_a_valid_profile_the_profile_overrides(preset, tmp_path, monkeypatch):
    monkeypatch.setenv("TEAM_A_KEY", "k")
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({
        "name": "p", "kind": "commands", "preset": preset, "tenants": {"team-a": {"key_env": "TEAM_A_KEY"}},
        "workload": {"gateway_url": "http://127.0.0.1:9", "agent": {"commands": {"status": "true"}}},
        "api": {"auth_header": "X-Api-Key"}}))
    profile = load_profile(str(path))
    fragment = yaml.safe_load((REPOSITORY / "targets" / "presets" / f"{preset}.yaml").read_text())
    assert profile.spec.api.turn == fragment["api"]["turn"]  # from the preset
    assert profile.spec.api.auth_header == "X-Api-Key"  # the profile's own field wins
    assert profile.spec.delivery.verifier == fragment["delivery"]["verifier"]


def test_an_unknown_preset_is_one_line(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "kind": "commands", "preset": "nope"}))
    with pytest.raises(ConfigError) as caught:
        load_profile(str(path))
    assert str(caught.value) == "p.yaml: invalid preset: unknown preset 'nope'; known: agno, langgraph, langserve, openai-chat, reference"
