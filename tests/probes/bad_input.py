"""The bad-input family: the command line, files and names a careless or hostile user gives;
each must be refused with one line naming what is wrong and exit 2, before anything is touched
(no results folder, no load folder, no sandbox state, no fault in the target's ledger).

The runs are aimed at a real sandbox (the family's target), so that refusals which need the
target's facts (its replicas, its tenants) are tried too.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from drillbook.config import SandboxConfig
from drillbook.evidence.signing import new_key
from drillbook.sandbox import launcher
from tests.integration.test_evidence import write_bundle
from tests.probes import Probe, drillbook

FAMILY = "bad input"
LONG = "n" * 300
COMMANDS_PROFILE = """name: mine
kind: commands
workload:
  gateway_url: {url}
  agent:
    commands:
      status: ./status
      kill: echo {kill}
      scale: echo {{replicas}}
tenants:
  team-a:
    key_env: PROBE_TENANT_KEY
"""

# (args, what the one line must name); {…} are files made for the probe (see inputs()).
CASES: list[tuple[list[str], str]] = [
    (["nosuchcommand"], "No such command"),
    (["run", "no-such-runbook"], "no-such-runbook"),
    (["run", LONG], "300 bytes long"),
    (["run", "ha-replica-loss", "--target", LONG], "300 bytes long"),
    (["run", "ha-replica-loss", "--target", "no-such-target"], "no-such-target"),
    (["run", "ha-replica-loss", "--target", "{bad_yaml}"], "not valid YAML"),
    (["run", "ha-replica-loss", "--target", "{unknown_placeholder}"], "{nope}"),
    (["run", "ha-replica-loss", "--target", "{attribute_placeholder}"], "count.__class__"),
    (["run", "ha-replica-loss", "--target", "{remote_url}"], "192.0.2.1"),
    (["run", "cold-start", "-p", "trials=0"], "trials"),
    (["run", "cold-start", "-p", "trials=two"], "trials"),
    (["run", "cold-start", "-p", "trials=1e999"], "trials"),
    (["run", "cold-start", "-p", "trials"], "trials"),
    (["run", "cold-start", "-p", "no_such_parameter=1"], "no_such_parameter"),
    (["run", "cold-start", "-p", "trials=2", "-p", "trials=3"], "given twice"),
    (["run", "ha-replica-loss", "-p", "kill_count=5"], "kill_count 5 is more than the 2 agent replicas"),
    (["run", "ha-replica-loss", "-p", "kill_count=0"], "kill_count"),
    (["run", "ha-replica-loss", "-p", "kill_count=-1"], "kill_count"),
    (["run", "noisy-neighbour", "-p", "victim_tenant=nobody"], "victim_tenant 'nobody' is not a tenant"),
    (["run", "shed-noisy-tenant"], "needs -p tenant="),
    (["run", "shed-noisy-tenant", "-p", "tenant=nobody"], "tenant 'nobody' is not a tenant"),
    (["run", "restore-agent-state", "-p", "backup=--delete-everything"], "must not begin with '-'"),
    (["run", "cold-start", "--results", "/proc/drillbook-nowhere"], "/proc/drillbook-nowhere"),
    (["run", "cold-start", "--results", "{a_file}"], "is a file, not a folder"),
    (["run", "cold-start", "--results", "{long_path}"], "File name too long"),
    (["run", "cold-start", "--no-such-option"], "No such option"),
    (["gameday", "no-such-plan"], "no-such-plan"),
    (["gameday", "{bad_yaml}"], "YAML"),
    (["gameday", "{plan_unknown_runbook}"], "no-such-runbook"),
    (["gameday", LONG], "300 bytes long"),
    (["gameday", "--results", "{a_file}"], "is a file, not a folder"),
    (["load", "agent-sessions", "--duration", "forever", "--out", "{out}"], "--duration"),
    (["load", "agent-sessions", "--duration", "0s", "--out", "{out}"], "--duration"),
    (["load", "agent-sessions", "--duration", "5s", "--users", "0", "--out", "{out}"], "--users"),
    (["load", "agent-sessions", "--duration", "5s", "--set", "think-time=-1", "--out", "{out}"], "think-time=-1"),
    (["load", "agent-sessions", "--duration", "5s", "--set", "nonsense", "--out", "{out}"], "nonsense"),
    (["load", "no-such-locustfile", "--duration", "5s", "--out", "{out}"], "no-such-locustfile"),
    (["load", LONG, "--duration", "5s", "--out", "{out}"], "300 bytes long"),
    (["load", "agent-sessions", "--duration", "5s", "--out", "/proc/drillbook-nowhere"], "/proc/drillbook-nowhere"),
    (["load", "agent-sessions", "--duration", "5s", "--out", "{a_file}"], "{a_file}"),
    (["load", "agent-sessions", "--duration", "5s", "--workers", "-1", "--out", "{out}"], "--workers"),
    (["verify", "{loop}"], "results folder"),
    (["verify", "{sealed}", "--expect-head", "{not_a_head}"], "is not a ledger head"),
    (["verify", "{sealed}", "--expect-head", "{missing}"], "cannot read the kept ledger head"),
    (["verify", "{sealed}", "--public-key", "{a_file}"], "holds no PEM public key"),
    (["verify", "{sealed}", "--public-key", "{private_key}"], "holds a private key"),
    (["verify", "{missing}"], "{missing}"),
    (["report", "{results}", "--since", "last tuesday"], "--since"),
    (["report", "{results}", "--since", "2027-01-01", "--until", "2026-01-01"], "is after --until"),
    (["report", "{sealed}", "--mapping", "{bad_yaml}"], "YAML"),
    (["report", "{results}", "--mapping", "{mapping_unknown_control}"], "no-such-control"),
    (["report", "{results}", "--mapping", "{missing}"], "{missing}"),
    (["report", "{sealed}", "-o", "/proc/drillbook-nowhere/report.html"], "/proc/drillbook-nowhere"),
    (["list", "{results}", "--limit", "-1"], "--limit"),
    (["list", "{results}", "--limit", "many"], "--limit"),
    (["keys", "new", "{a_file}/key.pem"], "is a file"),
    (["keys", "new", "{private_key}"], "{private_key}"),
    (["head", "{sealed}", "-o", "/proc/drillbook-nowhere/head.json"], "/proc/drillbook-nowhere"),
    (["findings", "add", "no-such-run", "--results", "{sealed}", "--finding", "x"], "no-such-run"),
    (["findings", "add", "{run}", "--results", "{sealed}", "--remediation", "fix it"], "--owner"),
    (["findings", "add", "{run}", "--results", "{sealed}", "--finding", "x", "--due", "soon"], "--due"),
    (["sandbox", "up", "--store", "mysql"], "store"),
    (["sandbox", "up", "--agents", "-1"], "agents"),
    (["sandbox", "up", "--agents", "two"], "--agents"),
    (["sandbox", "up", "--defect", "gremlins"], "defect"),
    (["sandbox", "serve", "supervisor"], "unknown service 'supervisor'"),
    (["target", "check", "no-such-target"], "no-such-target"),
    (["target", "check", "{bad_yaml}"], "not valid YAML"),
    (["chaos", "run", "{missing}"], "{missing}"),
    (["chaos", "run", "{bad_yaml}"], "bad.yaml"),
    (["halt", "--target", "no-such-target"], "no-such-target"),
]


def inputs(folder: Path) -> dict[str, str]:
    """The files and names the cases point at, made in folder."""
    made = {"a_file": folder / "a-file", "bad_yaml": folder / "bad.yaml", "loop": folder / "loop",
            "missing": folder / "missing.json", "not_a_head": folder / "head.json", "private_key": folder / "key.pem",
            "results": folder / "results", "long_path": folder / LONG / "results",
            "unknown_placeholder": folder / "unknown.yaml", "attribute_placeholder": folder / "attribute.yaml",
            "remote_url": folder / "remote.yaml", "plan_unknown_runbook": folder / "plan.yaml",
            "mapping_unknown_control": folder / "mapping.yaml", "out": folder / "load",
            "sealed": folder / "sealed"}
    made["a_file"].write_text("not a folder\n")
    sealed = write_bundle(made["sealed"])
    made["bad_yaml"].write_text("name: [unclosed\n")
    made["loop"].symlink_to(folder / "loop2")
    (folder / "loop2").symlink_to(made["loop"])
    made["not_a_head"].write_text('{"count": 1}')
    new_key(made["private_key"])
    made["unknown_placeholder"].write_text(COMMANDS_PROFILE.format(url="http://127.0.0.1:9", kill="{nope}"))
    made["attribute_placeholder"].write_text(COMMANDS_PROFILE.format(url="http://127.0.0.1:9",
                                                                     kill="{count.__class__}"))
    made["remote_url"].write_text(COMMANDS_PROFILE.format(url="http://192.0.2.1:8080", kill="{count}"))
    made["plan_unknown_runbook"].write_text("name: mine\nrunbooks:\n  - runbook: no-such-runbook\n")
    made["mapping_unknown_control"].write_text(
        "frameworks:\n  - id: team\n    title: Ours\n    requirements:\n"
        "      - id: '1'\n        title: One\n        evidenced_by: [no-such-control]\n")
    return {"run": sealed.name[-6:], **{name: str(path) for name, path in made.items()}}


def touched(folder: Path, before: set[str], state: Path, faults_before: str) -> str | None:
    """What a refused command left behind, if anything."""
    after = {str(p.relative_to(folder)) for p in folder.rglob("*")}
    if after - before:
        return f"left {sorted(after - before)[:3]}"
    faults = state / "faults.jsonl"
    if (faults.read_text() if faults.exists() else "") != faults_before:
        return "wrote to the target's fault ledger"
    return None


def judge(args: list[str], said: str, state: Path, folder: Path) -> str | None:
    made = inputs(folder)
    filled = [arg.format(**made) if "{" in arg and not arg.startswith("{nope") else arg for arg in args]
    expected = said.format(**made) if said.startswith("{") and said.strip("{}") in made else said
    before = {str(p.relative_to(folder)) for p in folder.rglob("*")}
    faults = state / "faults.jsonl"
    faults_before = faults.read_text() if faults.exists() else ""
    sandbox_command = args[0] == "sandbox"
    env = {"DRILLBOOK_STATE_DIR": str(folder / "state" if sandbox_command else state),
           "DRILLBOOK_RESULTS": made["results"], "PROBE_TENANT_KEY": "probe-tenant-key-0123456789"}
    done = drillbook(filled, env=env, cwd=folder, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("… ")]
    if "Traceback" in done.stderr + done.stdout:
        return "a traceback: " + lines[-1][:200]
    if done.returncode != 2:
        return f"exit {done.returncode}, not 2: {(lines or done.stdout.splitlines() or [''])[-1][:200]}"
    if len(lines) != 1 or not lines[0].startswith("drillbook: "):
        return f"{len(lines)} lines, not one 'drillbook: …' line: {done.stderr[:200]!r}"
    if len(lines[0]) > 2000:
        return f"one line of {len(lines[0])} characters"
    if expected not in lines[0]:
        return f"the line does not name {expected!r}: {lines[0][:300]}"
    return touched(folder, before, state, faults_before)


@contextlib.contextmanager
def target(folder: Path) -> Iterator[Path]:
    """A real sandbox for the family to aim at; its state folder. Stopped, with every process."""
    handle = launcher.start(SandboxConfig(tokens_per_second=0), folder / "sandbox")
    try:
        yield handle.state_dir
    finally:
        report = launcher.stop(handle.state_dir, handle=handle)
        leftovers = launcher.leftover_processes(report)
        shutil.rmtree(folder / "sandbox", ignore_errors=True)
        if leftovers:
            raise RuntimeError(f"the sandbox left processes: {json.dumps(leftovers)[:300]}")


def probes(state: Path) -> list[Probe]:
    def control(folder: Path) -> str | None:  # a good command is not refused: the judge can tell them apart
        done = drillbook(["run", "cold-start", "-p", "trials=1", "--dry-run"], env={"DRILLBOOK_STATE_DIR": str(state)},
                         cwd=folder)
        return None if done.returncode == 0 else f"a good dry run exited {done.returncode}: {done.stderr[-300:]}"
    made = [Probe(FAMILY, "control: a good command", control)]
    made += [Probe(FAMILY, " ".join(a[:40] + "…" if len(a) > 40 else a for a in args), partial(judge, args, said, state))
             for args, said in CASES]
    return made


__all__ = ["CASES", "FAMILY", "probes", "target"]
