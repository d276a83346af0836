"""The secrets family: values a user plants where secrets go (secret-named environment variables,
free-text parameters and exercise records written as `token=…`, `--api-key …`, `password: …`) and
the secrets the target itself holds (tenant keys, the internal token) are run through real runs on
a real sandbox; no file of the results folder may hold one, no figure may be redacted because its
name looks like a secret's (first_token), the sandbox's store and state files are not readable by
others, and its /metrics show no tenant to a caller without the internal token.
"""

from __future__ import annotations

import json
import stat
import urllib.request
from functools import partial
from pathlib import Path
from typing import Any

from drillbook.sandbox import launcher
from tests.probes import Probe, drillbook

FAMILY = "secrets"
# Planted by the user, by where each goes: (where, the option or variable, the text given).
PLANTED: list[tuple[str, str, str]] = [
    ("environment", "PROBE_API_TOKEN", "plant-env-token-51c0"),
    ("environment", "PROBE_DB_PASSWORD", "plant-env-password-7a22"),
    ("environment", "PROBE_CLIENT_SECRET", "plant-env-secret-90fe"),
    ("parameter", "operator", "alice password=plant-param-password-3b1d"),
    ("parameter", "incident", "INC-7 token=plant-param-token-c4e8 seen"),
    ("parameter", "incident", "INC-7 --api-key plant-param-apikey-0d6f seen"),
    ("exercise", "--scope", "gateway --token=plant-scope-token-8e3a"),
    ("exercise", "--objective", "rotate api_key: plant-objective-apikey-19bb"),
    ("exercise", "--participant", "bob (credential=plant-participant-cred-2f47)"),
    ("exercise", "--reference", "CHG-9 secret: plant-reference-secret-6c05"),
]


# Not a secret, given beside them: it must be found in the evidence (the family's control: the
# scan can see what a run was given).
VISIBLE = "plant-visible-4d2c"


def planted_value(text: str) -> str:
    """The secret part of a planted text: the word that begins with plant-."""
    return next(word.strip("()") for word in text.split() + text.split("=") + text.split(": ")
                if word.strip("()").startswith("plant-"))


def evidence(root: Path, state: Path) -> dict[str, Any]:
    """The family's runs on the target sandbox, once: an on-call triage with every planted text,
    and a cold start (whose figures include first_token). What they left, where."""
    done_marker = root / "runs.json"
    if done_marker.exists():
        return json.loads(done_marker.read_text())
    root.mkdir(parents=True, exist_ok=True)
    results = root / "results"
    env = {"DRILLBOOK_STATE_DIR": str(state),
           **{name: value for where, name, value in PLANTED if where == "environment"}}
    given: dict[str, list[str]] = {}
    for where, name, text in PLANTED:
        if where == "parameter":
            given.setdefault(name, []).append(text)
    given["incident"].append(VISIBLE)
    params = [arg for name, texts in given.items() for arg in ("-p", f"{name}={' / '.join(texts)}")]
    exercise = [arg for where, name, text in PLANTED if where == "exercise" for arg in (name, text)]
    triage = drillbook(["run", "agent-latency-triage", "-p", "window_s=2", *params, *exercise, "--results", results],
                       env=env, cwd=root, timeout=600)
    cold = drillbook(["run", "cold-start", "-p", "trials=1", "--results", results], env=env, cwd=root, timeout=600)
    runtime = json.loads((state / "runtime.json").read_text())
    made = {"results": str(results), "state": str(state), "runtime": runtime,
            "exits": {"triage": triage.returncode, "cold-start": cold.returncode},
            "said": (triage.stdout + triage.stderr + cold.stdout + cold.stderr)[-2000:]}
    done_marker.write_text(json.dumps(made))
    return made


def files_holding(results: Path, value: str) -> list[str]:
    needle = value.encode()
    return sorted(str(p.relative_to(results)) for p in results.rglob("*") if p.is_file() and needle in p.read_bytes())


def _ran(made: dict[str, Any]) -> str | None:
    """Not judged when the runs did not run: a setup problem is not a held probe."""
    if made["exits"]["triage"] not in (0, 1) or made["exits"]["cold-start"] not in (0, 1):
        return f"the family's runs did not run (exits {made['exits']}): {made['said'][-300:]}"
    if not list(Path(made["results"]).glob("*/manifest.json")):
        return "the family's runs sealed no bundle"
    return None


def no_leak(root: Path, state: Path, value: str, _folder: Path) -> str | None:
    made = evidence(root, state)
    failed = _ran(made)
    if failed:
        return failed
    holding = files_holding(Path(made["results"]), value)
    return f"{value} is written in {holding[:4]}" if holding else None


def target_secrets(root: Path, state: Path) -> list[tuple[str, str]]:
    made = evidence(root, state)
    runtime = made["runtime"]
    keys = runtime.get("tenant_keys") or {}
    found = [(f"tenant key of {tenant}", key) for tenant, key in sorted(keys.items())]
    for name, what in (("internal_token", "the platform's internal token"), ("control_token", "its control token")):
        if runtime.get(name):
            found.append((what, runtime[name]))
    return found


def figures_kept(root: Path, state: Path, _folder: Path) -> str | None:
    """Every figure of the cold start's summary is a number: none redacted for its name."""
    made = evidence(root, state)
    failed = _ran(made)
    if failed:
        return failed
    summaries = [json.loads(p.read_text()) for p in Path(made["results"]).glob("*cold-start*/summary.json")]
    if not summaries:
        return "no cold-start summary"
    redacted = {name: value for name, value in _flat(summaries[0].get("metrics", {})).items()
                if isinstance(value, str) and "REDACTED" in value}
    named = [name for name in _flat(summaries[0].get("metrics", {})) if "token" in name]
    if not named:
        return "the cold start recorded no figure named like a token: nothing was tried"
    return f"figures redacted: {sorted(redacted)}" if redacted else None


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        return {k: v for key, value in data.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): data}


def visible(root: Path, state: Path, _folder: Path) -> str | None:
    """The control: a plain value given beside the secrets is found where the run wrote it."""
    made = evidence(root, state)
    failed = _ran(made)
    return failed or (None if files_holding(Path(made["results"]), VISIBLE) else
                      f"{VISIBLE}, given in -p incident=, is in no file: the scan cannot see what a run was given")


def private_files(root: Path, state: Path, _folder: Path) -> str | None:
    """The sandbox's store, backups and state files are not readable by group or others."""
    evidence(root, state)
    kept = [p for p in state.rglob("*") if p.is_file() and not p.is_symlink() and p.suffix != ".log"
            and ("store" in p.name or "backup" in str(p) or p.suffix in (".json", ".db", ".sqlite"))]
    if not kept:
        return "the sandbox keeps no store or state file: nothing was looked at"
    open_to_others = sorted(str(p.relative_to(state)) for p in kept
                            if p.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH))
    return f"readable by others: {open_to_others[:5]}" if open_to_others else None


def metrics_without_tenants(root: Path, state: Path, service: str, _folder: Path) -> str | None:
    """A caller without the internal token sees no tenant's name on the service's /metrics."""
    made = evidence(root, state)
    runtime = made["runtime"]
    handle = launcher.find(state)
    if handle is None:
        return "the target sandbox is not running"
    with handle.control() as control:
        replicas = control.status()["services"][service]["replicas"]
    url = next((replica["url"] for replica in replicas if replica.get("url")), None)
    if not url:
        return f"no replica of {service} has a URL"
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as refused:
        return None if refused.code in (401, 403) else f"/metrics answered {refused.code}"
    if "# TYPE" not in text:
        return f"{service} /metrics answered no metrics: nothing was looked at"
    tenants = [tenant for tenant in (runtime.get("tenant_keys") or {}) if tenant in text]
    return f"/metrics names tenants {tenants} without the token" if tenants else None


def probes(root: Path, state: Path) -> list[Probe]:
    made = [Probe(FAMILY, "control: a plain value given is in the evidence", partial(visible, root, state))]
    made += [Probe(FAMILY, f"{where} {name}: not in the evidence", partial(no_leak, root, state, planted_value(text)))
            for where, name, text in PLANTED]
    made += [Probe(FAMILY, f"{what}: not in the evidence", partial(_target_secret, root, state, index))
             for index, what in enumerate(["tenant key of tenant-a", "tenant key of tenant-b",
                                           "the platform's internal token", "its control token"])]
    made += [Probe(FAMILY, "figures named like secrets are kept (first_token)", partial(figures_kept, root, state)),
             Probe(FAMILY, "store, backups and state files not readable by others", partial(private_files, root, state)),
             Probe(FAMILY, "gateway /metrics: no tenant without the token",
                   partial(metrics_without_tenants, root, state, "gateway")),
             Probe(FAMILY, "model /metrics: no tenant without the token",
                   partial(metrics_without_tenants, root, state, "model"))]
    return made


def _target_secret(root: Path, state: Path, index: int, folder: Path) -> str | None:
    secrets = target_secrets(root, state)
    if index >= len(secrets):
        return f"the target holds only {len(secrets)} secrets: {[what for what, _ in secrets]}"
    return no_leak(root, state, secrets[index][1], folder)


__all__ = ["FAMILY", "PLANTED", "probes"]
