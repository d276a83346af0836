"""The isolation drill: escape probes inside a claimed sandbox, each tried from outside first so a
refusal means something, and a neighbour sandbox timed while the first one hogs the CPU. What it
measures; the judging is .judge (pure, over what this records)."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

from drillbook.codeboxes import SandboxCall, sandboxes_of
from drillbook.drills import keep_observations
from drillbook.runbook import Run
from drillbook.scenarios.sandbox_isolation.judge import isolation_figures, judge_isolation

ESCAPES = "escapes.jsonl"
CALLS = "sandbox-calls.jsonl"
NEIGHBOUR = "another tenant's sandbox"
TRIVIAL = "print(sum(range(1000)))"
# A listener in the neighbour's sandbox, on its own loopback, for 120 s; it prints its port.
LISTENER = """import os, socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
if os.fork() == 0:
    fd = os.open(os.devnull, os.O_RDWR)
    for n in (0, 1, 2):
        os.dup2(fd, n)
    s.settimeout(1.0)
    end = time.time() + 120
    while time.time() < end:
        try:
            s.accept()[0].close()
        except OSError:
            pass
    os._exit(0)
"""
SELF_CONNECT = "import socket; socket.create_connection(('127.0.0.1', {port}), 1).close(); print('reached')"


def sandbox_isolation(run: Run, memory_mib: int, processes: int, cpu_workers: int, cpu_s: float, cpu_budget: float,
                      neighbour_runs: int, max_neighbour_slowdown: float) -> dict[str, Any]:
    found = sandboxes_of(run)
    if found is None:
        return {}
    target, tenants = found
    attacker_tenant, neighbour_tenant = tenants[0], tenants[-1]
    calls: list[SandboxCall] = []
    fleet = target.sandbox_fleet()
    isolation = fleet.get("isolation", {})
    run.record("isolation_reported", isolation)
    attacker = target.sandbox_session(attacker_tenant)
    neighbour = target.sandbox_session(neighbour_tenant)
    other = target.sandbox_session(neighbour_tenant)
    try:
        calls += [attacker.claim(), neighbour.claim(), other.claim()]
        claimed = all(call.ok for call in calls)
        calls.append(other.run("open('notes.txt', 'w').write('another session of another tenant')"))
        listening = neighbour.run(LISTENER)
        calls.append(listening)
        port = listening.stdout.strip().splitlines()[0] if listening.ok and listening.stdout.strip() else ""
        reached = neighbour.run(SELF_CONNECT.format(port=port)) if port else None
        if reached is not None:
            calls.append(reached)
        targets = target.escape_targets(neighbour_tenant, other.session_id)
        if port:
            targets.append({"name": NEIGHBOUR, "kind": "tcp", "address": f"127.0.0.1:{port}"})
        unreachable = {t["name"] for t in targets if t["name"] != NEIGHBOUR and not _answers_outside(t)}
        if not (reached is not None and reached.ok and "reached" in reached.stdout):
            unreachable.add(NEIGHBOUR)
        plan = {"targets": targets, "memory_mib": memory_mib, "processes": processes,
                "secret_digests": [hashlib.sha256(secret.encode()).hexdigest() for secret in target.secrets() if secret]}
        run.event("escape_probes_started", targets=len(targets))
        probed = attacker.run(_program(plan), timeout_s=120)
        calls.append(probed)
        attempts = _lines(probed.stdout)
        before = [c.seconds for c in (neighbour.run(TRIVIAL) for _ in range(neighbour_runs)) if c.ok]
        hog_attempts, during, spans = _under_hog(attacker, neighbour, {"mode": "cpu", "cpu_workers": cpu_workers,
                                                                    "cpu_s": cpu_s, "cpu_budget": cpu_budget})
        attempts += hog_attempts
        run.event("escape_probes_finished", attempts=len(attempts))
    finally:
        for session in (attacker, neighbour, other):
            calls.append(session.release())
            session.close()
    keep_observations(run, ESCAPES, attempts)
    keep_observations(run, CALLS, [call.to_json() for call in calls])
    hog = hog_attempts[0] if hog_attempts else {}
    figures = isolation_figures(attempts, unreachable, bool(isolation.get("limits")), before, during,
                                hog.get("started"), hog.get("ended"), spans)
    for name, value, unit in figures.records():
        run.record(name, value, unit)
    run.keep(judge_isolation(figures, planned=len(targets) + 5, max_neighbour_slowdown=max_neighbour_slowdown,
                             claimed=claimed))
    return {"figures": figures}


def _program(plan: dict[str, Any]) -> str:
    source = (Path(__file__).with_name("probes.py")).read_text()
    return source.replace("PLAN = {}  # replaced by the drill", f"PLAN = json.loads({json.dumps(plan)!r})")


def _lines(stdout: str) -> list[dict[str, Any]]:
    found = []
    for line in stdout.splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return [entry for entry in found if isinstance(entry, dict) and "probe" in entry]


def _answers_outside(target: dict[str, Any]) -> bool:
    """The control: does the target answer from this process (outside any sandbox)?"""
    if target["kind"] == "tcp":
        host, port = target["address"].rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=2.0).close()
            return True
        except OSError:
            return False
    path = Path(target["address"])
    return path.is_dir() if target["kind"] == "write" else path.exists()


def _under_hog(attacker: Any, neighbour: Any, plan: dict[str, Any]
               ) -> tuple[list[dict[str, Any]], list[float], list[tuple[float, float]]]:
    """Run the CPU hog in the attacker's sandbox and time the neighbour's trivial runs meanwhile."""
    answer: list[SandboxCall] = []
    hog = threading.Thread(target=lambda: answer.append(attacker.run(_program(plan), timeout_s=60)), daemon=True)
    hog.start()
    seconds, spans = [], []
    while hog.is_alive():
        call = neighbour.run(TRIVIAL)
        if call.ok:
            seconds.append(call.seconds)
            spans.append((call.started, call.ended))
        time.sleep(0.05)
    hog.join()
    return (_lines(answer[0].stdout) if answer else []), seconds, spans


__all__ = ["sandbox_isolation"]
