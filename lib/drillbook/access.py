"""`drillbook target check`: can drillbook reach this target, and which runbooks may it run there?

It reaches the gateway, checks every tenant key with a read (a session that does not exist must
be answered "not found", not "unauthorised"), tests the delivery contract end to end on one
marked test session (open, one turn, read back, every mapping), shows what each read-only
command returns (each tier's status, the store's health), and on kubernetes asks the API server
(SelfSubjectAccessReview) whether the runner may do what each runbook needs in the namespaces
where it acts. Apart from that one session, nothing is created, changed or deleted.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx

from drillbook.errors import ConfigError
from drillbook.profile import LoadedProfile
from drillbook.targets.capabilities import TargetCheck

if TYPE_CHECKING:
    from drillbook.delivery import Receipt

def declared_needs() -> list[tuple[str, tuple[tuple[str, str], ...], bool]]:
    """Every declared runbook with what it does to a target and whether it audits delivery (the
    drills do): drills first, then on-call runbooks."""
    from drillbook.scenarios import REGISTRY

    return [(s.name, s.needs, not s.oncall) for s in sorted(REGISTRY.values(), key=lambda s: s.oncall)]


@dataclass
class TargetReport:
    """What the check found: reachability and keys, and per runbook whether it can run and why not."""

    profile: str
    kind: str
    reachability: list[TargetCheck] = field(default_factory=list)
    contract: list[TargetCheck] = field(default_factory=list)  # the delivery contract, end to end
    readings: list[TargetCheck] = field(default_factory=list)  # what each read-only command returned
    runbooks: list[TargetCheck] = field(default_factory=list)
    unoffered: list[str] = field(default_factory=list)  # runbooks the profile declares nothing for

    @property
    def ok(self) -> bool:
        """Reachable, every key accepted, and every runbook asked about can run."""
        return (bool(self.runbooks) and all(f.ok for f in self.reachability)
                and all(f.ok for f in self.runbooks if f.subject not in self.unoffered))

    def runbook(self, name: str) -> TargetCheck:
        return next(f for f in self.runbooks if f.subject == name)


def check_tenant_keys(gateway: str, keys: dict[str, str], profile: LoadedProfile) -> list[TargetCheck]:
    """One read per tenant of a session that cannot exist: 404 means the key was accepted."""
    api, path = profile.spec.api, profile.spec.delivery.readback_path
    findings = []
    with httpx.Client(base_url=gateway, timeout=10.0) as http:
        for tenant, key in keys.items():
            probe = path.replace("{session}", f"drillbook-check-{uuid.uuid4().hex[:8]}")
            try:
                status = http.get(probe, headers=api.auth(key)).status_code
            except httpx.HTTPError as error:
                findings.append(TargetCheck(f"tenant {tenant}", False, f"no answer: {type(error).__name__}"))
                continue
            if status in (401, 403):
                findings.append(TargetCheck(f"tenant {tenant}", False, f"key refused (HTTP {status})"))
            elif status in (200, 404):
                findings.append(TargetCheck(f"tenant {tenant}", True, f"key accepted (HTTP {status} for an unknown session)"))
            else:
                findings.append(TargetCheck(f"tenant {tenant}", False, f"unexpected HTTP {status} on {probe}"))
    return findings


CHECK_TIMEOUT_S = 10.0
CHECK_TEXT = "drillbook target check"  # marks the one test session a check opens


def check_contract(gateway: str, tenant: str, key: str, profile: LoadedProfile) -> list[TargetCheck]:
    """The delivery contract end to end, as a load run would use it, on one marked test session:
    open it (or name it), send one turn, read the session back and find the turn in it through
    every mapping the profile gives. The only thing a target check writes."""
    from drillbook.agentapi import SessionNotOpened, open_session, receipt, send_turn
    from drillbook.delivery import Receipt

    api = profile.spec.api
    findings: list[TargetCheck] = []
    with httpx.Client(base_url=gateway, headers=api.auth(key), timeout=CHECK_TIMEOUT_S) as http:
        try:
            session_id = open_session(http, api)
        except (SessionNotOpened, httpx.HTTPError, ValueError) as error:
            return [TargetCheck("open session", False, f"{api.open_session}: {_said(error)}")]
        findings.append(TargetCheck("open session", True, f"named {session_id} (the API opens none)" if api.mints_sessions()
                                else f"POST {api.open_session} -> {session_id}"))
        text, idempotency_key = f"{CHECK_TEXT} {uuid.uuid4().hex[:12]}", f"drillbook-check-{uuid.uuid4().hex}"
        try:
            response = send_turn(http, api, session_id, text, idempotency_key)
            answer = response.json() if response.status_code in (200, 201) else None
        except (httpx.HTTPError, ValueError) as error:
            return findings + [TargetCheck("turn", False, f"POST {api.turn_path(session_id)}: {_said(error)}")]
        if answer is None:
            return findings + [TargetCheck("turn", False, f"POST {api.turn_path(session_id)}: HTTP {response.status_code}")]
        ack = api.acknowledgement(answer)
        problems = ack.problems(api)
        shown = ", ".join(f"{name} {value!r}" for name, value in (("seq", ack.seq), ("digest", ack.digest),
                                                                   ("reply", ack.reply)) if value is not None)
        findings.append(TargetCheck("turn", not problems, "; ".join(problems) or f"acknowledged: {shown or 'HTTP 200'}"))
        kept = Receipt(**receipt(api, answer, session_id, tenant, text, idempotency_key))
    try:
        return findings + _read_back(profile, gateway, tenant, key, kept)
    except ConfigError as error:  # a verifier that is not installed or cannot load
        return findings + [TargetCheck("read back", False, str(error))]


def _read_back(profile: LoadedProfile, gateway: str, tenant: str, key: str, kept: "Receipt") -> list[TargetCheck]:
    from drillbook.delivery import audit_session, match_basis, open_verifier

    session_id = kept.session_id
    with open_verifier(profile, gateway, {tenant: key}) as verifier:
        if verifier is None:
            return [TargetCheck("read back", False, "delivery.verifier none: nothing is read back, so the "
                                                "delivery checks are not verifiable and no drill can PASS")]
        try:
            stored = verifier.read(tenant, session_id)
        except Exception as error:  # noqa: BLE001 - the verifier's failure is the finding
            return [TargetCheck("read back", False, _said(error))]
        if stored is None:
            return [TargetCheck("read back", False, f"session {session_id} was not found after its turn was acknowledged")]
        audit = audit_session(session_id, [kept], stored, verifier.chain_ok(session_id, stored))
        basis = match_basis([kept], stored)
        carried = sorted(name for name in ("seq", "hash", "idempotency_key", "prev_hash", "content")
                         if any(getattr(turn, name, None) is not None for turn in stored))
        if audit.lost:
            detail = (f"{len(stored)} stored turns, none matches the check turn "
                      + (f"by {basis}" if basis else "by idempotency key, content or seq (the mapping finds "
                                                       f"{', '.join(carried) or 'no field'} in the stored turns)"))
        else:
            detail = (f"the check turn found by {basis} among {len(stored)} stored turns; turns carry "
                      f"{', '.join(carried)}; chain {'checked' if 'prev_hash' in carried else 'not offered'}")
        return [TargetCheck("read back", not audit.lost and audit.chain_ok,
                        detail if audit.chain_ok else f"{detail}; the chain does not verify")]


def _said(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:300] if str(error) else type(error).__name__


def check_target(profile: LoadedProfile, state_dir: Path | None = None,
                 runbooks: list[str] | None = None) -> TargetReport:
    """Everything `drillbook target check` reports. Read-only apart from one marked test session.

    runbooks: the ones asked about (each must be able to run); None asks about every runbook the
    profile declares what it needs for (the others are listed as not offered)."""
    from drillbook.targets import check_reachable, target_for

    report = TargetReport(profile.name, profile.kind)
    try:
        target = target_for(profile, state_dir)
        gateway, keys = target.gateway()
        check_reachable(gateway)
    except Exception as error:  # noqa: BLE001 - reported as the first finding
        report.reachability.append(TargetCheck("gateway", False, str(error)))
        return report
    report.reachability.append(TargetCheck("gateway", True, f"{gateway} accepts connections"))
    report.reachability.extend(check_tenant_keys(gateway, keys, profile))
    tenant = next((t for t in keys if next(f for f in report.reachability if f.subject == f"tenant {t}").ok), None)
    if tenant is None:
        report.contract.append(TargetCheck("contract", False, "no tenant key was accepted: nothing to send a turn with"))
    else:
        report.contract.extend(check_contract(gateway, tenant, keys[tenant], profile))
    broken = [f"{f.subject}: {f.detail}" for f in report.contract if not f.ok]
    try:
        report.readings.extend(target.readings())
        for name, needs, audited in declared_needs():
            missing = target.undeclared(needs)
            if runbooks is not None and name not in runbooks:
                continue
            if missing and runbooks is None:
                report.runbooks.append(TargetCheck(name, True, f"not offered by this profile: {'; '.join(missing)}"))
                report.unoffered.append(name)
                continue
            why = target.refusals(needs) + (broken if audited else [])
            report.runbooks.append(TargetCheck(name, not why, "; ".join(why) or target.granted))
    except Exception as error:  # noqa: BLE001 - a target that cannot answer (an API server down) is a finding
        report.runbooks = []
        report.reachability.append(TargetCheck(f"{profile.kind} API", False, f"{type(error).__name__}: {error}"[:300]))
    return report
