"""The session-continuity drill: streaming clients under Locust load drop their streams at random
tokens and resume them; agent replicas are killed mid-stream; turns left to another process are
resumed from this one. What it measures; the judging is .judge (pure, over what this records).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from drillbook import jsonl
from drillbook.drills import keep_observations
from drillbook.measure import PERCENTILE
from drillbook.runbook import Run
from drillbook.scenarios.session_continuity.judge import (audit_turn, hit_by_kills, continuity_figures,
                                                          judge_continuity)
from drillbook.streamclient import OTHER_PROCESS, TurnRecord, follow_turn

STREAMS = "streams.jsonl"  # every turn as its clients received it: the evidence the audit recomputes from
HANDOFF_THREADS = 8


def session_continuity(run: Run, users: int, duration_s: float, max_tokens: int, drop_rate: float, handoff_rate: float,
                       kill_count: int, kill_after_s: float, kill_signal: str, think_time_s: float, settle_s: float,
                       max_resume_p95_ms: float, max_failed_rate: float, load_workers: int = 0) -> dict[str, Any]:
    """Stream turns under load with drops and kills; resume what was left; audit every turn."""
    api = run.profile.spec.api
    load = run.start_load("session-continuity", users=users, duration_s=duration_s, workers=load_workers,
                          settings={"think-time": str(think_time_s), "max-tokens": str(max_tokens),
                                    "drop-rate": str(drop_rate), "handoff-rate": str(handoff_rate)})
    run.event("load_flowing", flowing=load.wait_until_flowing())
    kills: list[tuple[float, float]] = []  # (sent, seen landed) of each kill that was seen to land
    if kill_count:
        time.sleep(kill_after_s)
        result = run.chaos("session-continuity", kill_count=kill_count, kill_signal=kill_signal)
        fault = result.measurements.get("fault_injected") or {}
        landing = fault.get("landed") or {}
        if fault.get("at") and landing.get("landed"):
            kills.append((float(fault["at"]), float(landing["at"])))
        run.record("killed_replicas", fault.get("replicas", []))
        run.record("experiment_verdict", result.verdict)
    load_result = load.wait()
    records = [TurnRecord.from_json(line) for path in sorted(Path(load_result.out_dir).glob("streams-*.jsonl"))
               for line in jsonl.read(path)]
    handed = [record for record in records if record.ending() is None]
    gateway, keys = run.gateway()
    run.event("handoff_started", turns=len(handed))
    _resume_elsewhere(gateway, api, keys, handed, max_tokens, settle_s)
    run.event("handoff_finished", turns=len(handed), ended=sum(record.ending() is not None for record in handed))
    keep_observations(run, STREAMS, [record.to_json() for record in records])
    stored, unread = _read_back(run, gateway, keys, records)
    if unread:
        run.cannot_judge(f"the sessions could not be read back: {unread}")
    audits = [audit_turn(record, stored.get(record.turn_key, []), kills, api.streams.separator) for record in records]
    figures = continuity_figures(audits)
    turns = load_result.requests[load_result.requests["name"] == "stream turn"]
    for name, value, unit in figures.records():
        run.record(name, value, unit)
    run.record("turns_handed_off", len(handed))
    hit = hit_by_kills(records, kills)
    run.record("streams_hit_by_kill", hit)
    run.record("stream_turns_per_s", len(turns) / duration_s if duration_s else None, "/s")
    run.record("percentile_definition", PERCENTILE)
    run.keep(judge_continuity(figures, resumable=api.streams.resume is not None, drops_planned=drop_rate > 0,
                              replies_offered=api.streams.stored_reply is not None,
                              kills_planned=kill_count, kills_landed=len(kills), streams_hit_by_kill=hit,
                              max_resume_p95_ms=max_resume_p95_ms, max_failed_rate=max_failed_rate))
    return {"figures": figures}


def _resume_elsewhere(gateway: str, api: Any, keys: dict[str, str], records: list[TurnRecord], max_tokens: int,
                      settle_s: float) -> None:
    """Resume, from this process, every turn the load left without an ending (handed off, or cut
    by the load's end): a client that knows only the session, the turn and the last event id."""
    if not records:
        return

    def resume(record: TurnRecord) -> None:
        body = json.dumps(api.turn_body_for(record.sent, record.session_id, record.turn_key, max_tokens)).encode()
        follow_turn(gateway, api.streams, api.auth(keys[record.tenant]), record, body, [], settle_s,
                    api.idempotency_headers(record.turn_key), by=OTHER_PROCESS)

    with ThreadPoolExecutor(max_workers=HANDOFF_THREADS, thread_name_prefix="handoff") as pool:
        list(pool.map(resume, records))


def _read_back(run: Run, gateway: str, keys: dict[str, str], records: list[TurnRecord]
               ) -> tuple[dict[str, list[str | None]], str]:
    """The replies the workload stored for each turn (by its key, or by the input it was sent:
    a turn stored again under another key is found too), read through its read-back; and why
    not, when a session could not be read."""
    import httpx

    from drillbook.jmes import pick

    api, delivery = run.profile.spec.api, run.profile.spec.delivery
    streams = api.streams
    by_sent = {record.sent: record.turn_key for record in records}
    ours = set(by_sent.values())
    stored: dict[str, list[str | None]] = {}
    sessions = sorted({(record.tenant, record.session_id) for record in records})
    with httpx.Client(base_url=gateway, timeout=30.0) as http:
        for tenant, session_id in sessions:
            answer = http.get(delivery.readback_path.replace("{session}", session_id), headers=api.auth(keys[tenant]))
            if answer.status_code != 200:
                return stored, f"session {session_id}: HTTP {answer.status_code}"
            for turn in pick(delivery.mapping.turns, answer.json()) or []:
                key = pick(delivery.mapping.idempotency_key, turn)
                sent = pick(streams.stored_input, turn)
                owner = key if key in ours else by_sent.get(str(sent)) if sent is not None else None
                if owner is not None:
                    reply = pick(streams.stored_reply, turn) if streams.stored_reply is not None else None
                    stored.setdefault(owner, []).append(None if reply is None else str(reply))
    return stored, ""


__all__ = ["session_continuity"]
