"""Code sandboxes as the drills use them: a tenant's session claims one, runs code in it and
releases it, each call stamped with when it was sent and answered; and the operator's side
(what sandboxes exist, killing one), which a target offers through the CodeSandboxes capability
(drillbook.targets.capabilities).

The tenant's calls are the platform's API for it (docs/code-sandboxes.md):
`POST /v1/sessions/{id}/sandbox` claims, `POST .../sandbox/runs` runs ({"code", "language",
"timeout_s"}), `DELETE .../sandbox` releases; 410 means the sandbox was lost.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from drillbook.profile import SandboxCommands

PATHS = {op: SandboxCommands.model_fields[op].default for op in ("claim", "run", "release")}  # the contract's
OUTPUT_KEPT = 64 * 1024  # of a run's stdout, as the sandbox cuts it too


@dataclass
class SandboxCall:
    """One call a session made, as its client saw it (epoch seconds)."""

    op: str  # claim, run, release
    tenant: str
    session: str
    started: float
    ended: float
    status: int | None = None  # HTTP status; None when no answer came
    sandbox_id: str | None = None
    warm: bool | None = None
    exit_code: int | None = None
    stdout: str = ""
    error: str = ""

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    @property
    def ok(self) -> bool:
        if self.status not in (200, 201) or self.error:
            return False
        return self.op != "run" or self.exit_code == 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": self.seconds, "ok": self.ok}


class SandboxSession:
    """A tenant's session and its code sandbox, through the platform's API."""

    def __init__(self, base_url: str, headers: dict[str, str], tenant: str, session_id: str,
                 timeout_s: float = 60.0, paths: dict[str, str] | None = None) -> None:
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)
        self.tenant = tenant
        self.session_id = session_id
        self.paths = {op: path.replace("{session}", session_id) for op, path in {**PATHS, **(paths or {})}.items()}

    def close(self) -> None:
        self.http.close()

    def _call(self, op: str, method: str, path: str, body: dict[str, Any] | None = None) -> SandboxCall:
        started = time.time()
        try:
            answer = self.http.request(method, path, json=body)
        except httpx.HTTPError as error:
            return SandboxCall(op, self.tenant, self.session_id, started, time.time(),
                               error=f"{type(error).__name__}: {error}"[:300])
        ended = time.time()
        try:
            data = answer.json()
        except ValueError:
            data = {"error": answer.text[:300]}
        data = data if isinstance(data, dict) else {}
        error = str(data.get("error") or ("" if answer.status_code < 400 else f"HTTP {answer.status_code}"))
        return SandboxCall(op, self.tenant, self.session_id, started, ended, answer.status_code,
                           data.get("sandbox_id"), data.get("warm"), data.get("exit_code"),
                           str(data.get("stdout", ""))[:OUTPUT_KEPT], error[:300])

    def claim(self) -> SandboxCall:
        return self._call("claim", "POST", self.paths["claim"])

    def run(self, code: str, language: str = "python", timeout_s: float = 30.0) -> SandboxCall:
        return self._call("run", "POST", self.paths["run"], {"code": code, "language": language, "timeout_s": timeout_s})

    def release(self) -> SandboxCall:
        return self._call("release", "DELETE", self.paths["release"])


# Code a session runs to read its workspace back: each file's path and sha256, as one JSON line.
WORKSPACE_DIGESTS = """import hashlib, json, os
found = {}
for folder, _, names in os.walk("."):
    for name in names:
        path = os.path.join(folder, name)
        with open(path, "rb") as handle:
            found[os.path.relpath(path)] = hashlib.sha256(handle.read()).hexdigest()
print(json.dumps(found))
"""


def write_files_code(files: dict[str, str]) -> str:
    """Code that writes each file (name: text) into the workspace."""
    import json

    return (f"import json\nfor name, text in json.loads({json.dumps(json.dumps(files))}).items():\n"
            "    open(name, 'w').write(text)\n")


def digests_of(call: SandboxCall) -> dict[str, str] | None:
    """The workspace digests a WORKSPACE_DIGESTS run printed; None when it did not run."""
    import json

    if not call.ok:
        return None
    try:
        found = json.loads(call.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return found if isinstance(found, dict) else None


def new_session(base_url: str, api: Any, key: str, tenant: str, paths: dict[str, str] | None = None
                ) -> SandboxSession:
    """A new agent session of the tenant's (opened as the profile's agent API says), with its
    sandbox client."""
    from drillbook.agentapi import open_session

    headers = api.auth(key)
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as http:
        session_id = open_session(http, api)
    return SandboxSession(base_url, headers, tenant, session_id, paths=paths)




def sandboxes_of(run: Any) -> tuple[Any, list[str]] | None:
    """A drill's target as CodeSandboxes, and its tenants in order; None, said as the reason the
    run cannot be judged, where the target has none (a notebook run by hand on another target)."""
    from drillbook.targets.capabilities import CodeSandboxes

    target = run.workload()
    if not isinstance(target, CodeSandboxes):
        run.cannot_judge(f"target {target.name} offers no code sandboxes")
        return None
    _, keys = run.gateway()
    return target, sorted(keys)


def offers_code_sandboxes(_: Any, target: Any) -> str | None:
    """A scenario's target check: the sandbox drills need a target with code sandboxes."""
    from drillbook.targets.capabilities import CodeSandboxes

    return None if isinstance(target, CodeSandboxes) else f"target {target.name} offers no code sandboxes"


__all__ = ["SandboxCall", "SandboxSession", "WORKSPACE_DIGESTS", "digests_of", "new_session", "offers_code_sandboxes",
           "sandboxes_of", "write_files_code"]
