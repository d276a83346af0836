"""The sandbox-loss drill: sessions write files in their sandboxes; sandboxes are killed in the
middle of a run, then the sandbox service itself; each kill is seen to land by the sandboxes'
processes going, apart from the platform's answer; each session works again and reads its
workspace back. What it measures; the judging is .judge (pure, over what this records)."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from typing import Any, Callable

from drillbook.codeboxes import WORKSPACE_DIGESTS, SandboxCall, digests_of, sandboxes_of, write_files_code
from drillbook.drills import keep_observations
from drillbook.runbook import Run
from drillbook.scenarios.sandbox_loss.judge import Kill, judge_loss, loss_figures

CALLS = "sandbox-calls.jsonl"
KILLS = "kills.jsonl"
TRIVIAL = "print('working')"
LANDING_TIMEOUT_S = 15.0


def sandbox_loss(run: Run, sessions: int, files: int, sandbox_kills: int, kill_service: bool, run_s: float,
                 recreate_timeout_s: float, max_recreate_p95_s: float) -> dict[str, Any]:
    found = sandboxes_of(run)
    if found is None:
        return {}
    target, tenants = found
    clients = [target.sandbox_session(tenants[i % len(tenants)]) for i in range(sessions)]
    calls: list[SandboxCall] = []
    expected: dict[str, dict[str, str]] = {}
    kills: list[Kill] = []
    read_back: dict[str, dict[str, str] | None] = {}
    try:
        for client in clients:
            calls.append(client.claim())
            written = {f"notes-{n}.txt": secrets.token_hex(8 * (n + 1)) for n in range(files)}
            call = client.run(write_files_code(written))
            calls.append(call)
            if call.ok:
                expected[client.session_id] = {name: hashlib.sha256(text.encode()).hexdigest()
                                               for name, text in written.items()}
        for client in clients[:sandbox_kills]:
            kills.append(_kill_mid_run(run, target, [client], calls, run_s,
                                       lambda found: target.kill_sandbox(found[0]["id"]), "sandbox"))
            _until_working(client, calls, recreate_timeout_s)
        if kill_service:
            kills.append(_kill_mid_run(run, target, clients, calls, run_s,
                                       lambda _: target.kill_sandbox_service(), "service"))
            waiting = [threading.Thread(target=_until_working, args=(client, calls, recreate_timeout_s), daemon=True)
                       for client in clients]  # all at once: no session waits for another's recovery
            for thread in waiting:
                thread.start()
            for thread in waiting:
                thread.join()
        for client in clients:
            call = client.run(WORKSPACE_DIGESTS)
            calls.append(call)
            read_back[client.session_id] = digests_of(call)
        stuck = _stuck_claims(target, {client.session_id for client in clients})
    finally:
        for client in clients:
            calls.append(client.release())
            client.close()
    rows = [call.to_json() for call in calls]
    keep_observations(run, CALLS, rows)
    keep_observations(run, KILLS, [kill.__dict__ for kill in kills])
    figures = loss_figures(kills, rows, expected, read_back, stuck)
    for name, value, unit in figures.records():
        run.record(name, value, unit)
    run.keep(judge_loss(figures, max_recreate_p95_s))
    return {"figures": figures}


def _kill_mid_run(run: Run, target: Any, clients: list[Any], calls: list[SandboxCall], run_s: float,
                  kill: Callable[[list[dict[str, Any]]], Any], what: str) -> Kill:
    """Start a long run in each client's sandbox, kill once they all run, and watch the sandboxes'
    processes until every one is gone (the landing)."""
    sessions = {client.session_id for client in clients}
    threads = [threading.Thread(target=lambda c=client: calls.append(c.run(f"import time; time.sleep({run_s})")),
                                daemon=True) for client in clients]
    for thread in threads:
        thread.start()
    found = _ours(target, sessions)
    deadline = time.monotonic() + 10
    while not all(s.get("running") for s in found) and time.monotonic() < deadline:
        time.sleep(0.02)
        found = _ours(target, sessions)
    asked = time.time()
    if not found:  # no sandbox of these sessions to kill: nothing is asked, and nothing can land
        run.event("sandbox_kill_not_asked", what=what, reason="the sessions held no sandbox")
        for thread in threads:
            thread.join(timeout=run_s + 30)
        return Kill(what, asked, None, ())
    run.event("sandbox_kill_asked", what=what, sandboxes=[s["id"] for s in found])
    kill(found)
    landed = None
    deadline = time.monotonic() + LANDING_TIMEOUT_S
    while found and time.monotonic() < deadline:
        reading = time.time()
        if not any(target.sandbox_alive(s) for s in found):
            landed = reading
            break
        time.sleep(0.02)
    run.event("sandbox_kill_landed" if landed else "sandbox_kill_not_seen", what=what, at=landed)
    for thread in threads:
        thread.join(timeout=run_s + 30)
    return Kill(what, asked, landed, tuple(sorted(s["session"] for s in found)))


def _ours(target: Any, sessions: set[str]) -> list[dict[str, Any]]:
    return [s for s in target.sandbox_fleet()["sandboxes"] if s.get("session") in sessions and s["state"] == "claimed"]


def _until_working(client: Any, calls: list[SandboxCall], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        call = client.run(TRIVIAL)
        calls.append(call)
        if call.ok:
            return
        time.sleep(0.1)


def _stuck_claims(target: Any, sessions: set[str]) -> int:
    """Claims the platform still holds for a sandbox whose process is gone."""
    return sum(1 for s in _ours(target, sessions) if target.sandbox_alive(s) is False)


__all__ = ["sandbox_loss"]
