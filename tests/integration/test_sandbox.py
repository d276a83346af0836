"""The reference platform end to end, through its real gateway and supervisor."""

from __future__ import annotations

import json
import threading
import time
import uuid

import httpx
import pytest
from drillbook.sandbox.chain import verify_chain
from drillbook.sandbox.client import TenantClient
from drillbook.sandbox.store import Turn

from tests.helpers import wait_for

pytestmark = pytest.mark.integration


def stored_turns(client: TenantClient, session_id: str) -> list[Turn]:
    return [Turn(**t) for t in client.read_session(session_id)["turns"]]


def test_sessions_and_turns_end_to_end(sandbox):
    with TenantClient(sandbox.gateway_url, sandbox.tenant_keys["tenant-a"]) as client:
        session_id = client.create_session()
        acks = [client.turn(session_id, f"question {i}") for i in range(4)]
        assert [a["seq"] for a in acks] == [1, 2, 3, 4]
        assert all(a["output"] and not a["replayed"] for a in acks)
        turns = stored_turns(client, session_id)
        assert [t.hash for t in turns] == [a["hash"] for a in acks]
        assert verify_chain(session_id, turns).ok


def test_streamed_turn_sends_tokens_then_the_acknowledgement(sandbox):
    key = sandbox.tenant_keys["tenant-a"]
    with TenantClient(sandbox.gateway_url, key) as client:
        session_id = client.create_session()
        with client._http.stream("POST", f"/v1/sessions/{session_id}/turns?stream=true", json={"input": "hi"},
                                 headers={"Idempotency-Key": "stream-1"}) as response:
            assert response.status_code == 200
            lines = [line for line in response.iter_lines() if line]
        events = [json.loads(line) for line in lines]
        tokens = [e["token"] for e in events if "token" in e]
        assert len(tokens) == 16 and "ack" in events[-1]
        assert events[-1]["ack"]["seq"] == 1
        assert stored_turns(client, session_id)[0].output == " ".join(tokens)


def test_a_killed_replica_is_restarted_and_the_session_continues(sandbox):
    with sandbox.control() as control, TenantClient(sandbox.gateway_url, sandbox.tenant_keys["tenant-a"]) as client:
        session_id = client.create_session()
        client.turn(session_id, "before")
        before = {r["id"]: r for r in control.status()["services"]["agent"]["replicas"]}
        killed = control.kill("agent", count=1, signal="SIGKILL")["killed"][0]
        old_pid = before[killed]["pid"]
        for i in range(6):  # served by the surviving replica while the other restarts
            client.turn(session_id, f"during {i}")

        def restarted():
            replica = next(r for r in control.status()["services"]["agent"]["replicas"] if r["id"] == killed)
            return replica["ready"] and replica["pid"] != old_pid and replica["restarts"] == 1

        wait_for(restarted)
        for i in range(4):
            client.turn(session_id, f"after {i}")
        turns = stored_turns(client, session_id)
        assert [t.seq for t in turns] == list(range(1, 12))
        assert verify_chain(session_id, turns).ok
        kinds = [(e["kind"], e.get("signal")) for e in control.events() if e.get("replica") == killed]
    assert ("replica_killed", "SIGKILL") in kinds and ("replica_exited", "SIGKILL") in kinds
    assert [k for k, _ in kinds].count("replica_ready") == 2


def test_a_retried_turn_is_not_applied_twice(sandbox):
    with TenantClient(sandbox.gateway_url, sandbox.tenant_keys["tenant-a"]) as client:
        session_id = client.create_session()
        first = client.turn(session_id, "pay once", idempotency_key="retry-me")
        again = client.turn(session_id, "pay once", idempotency_key="retry-me")
        assert again["replayed"] is True and (again["seq"], again["hash"]) == (first["seq"], first["hash"])
        assert len(stored_turns(client, session_id)) == 1


def test_a_retried_session_open_opens_one_session(sandbox):
    """The gateway retries an open carrying an idempotency key on another replica; the retry must
    get the session the first attempt opened, not a second one."""
    with TenantClient(sandbox.gateway_url, sandbox.tenant_keys["tenant-a"]) as client:
        first = client.create_session(idempotency_key="open-once")
        assert client.create_session(idempotency_key="open-once") == first
        assert client.create_session() != first
    with TenantClient(sandbox.gateway_url, sandbox.tenant_keys["tenant-b"]) as other:
        assert other.create_session(idempotency_key="open-once") != first


def test_tenants_are_authenticated_and_isolated(sandbox):
    url = sandbox.gateway_url
    with TenantClient(url, sandbox.tenant_keys["tenant-a"]) as alice, \
            TenantClient(url, sandbox.tenant_keys["tenant-b"]) as bob, \
            TenantClient(url, None) as nobody, TenantClient(url, "dbk_wrong") as stranger:
        session_id = alice.create_session()
        alice.turn(session_id, "secret plan")
        assert nobody.request("POST", "/v1/sessions").status_code == 401
        assert stranger.request("GET", f"/v1/sessions/{session_id}").status_code == 401
        assert bob.request("GET", f"/v1/sessions/{session_id}").status_code == 404
        response = bob.request("POST", f"/v1/sessions/{session_id}/turns", json={"input": "x"})
        assert response.status_code == 404
        # A client cannot claim a tenant by setting the gateway's internal header.
        spoof = bob.request("GET", f"/v1/sessions/{session_id}", headers={"X-Drillbook-Tenant": "tenant-a"})
        assert spoof.status_code == 404
        assert len(alice.read_session(session_id)["turns"]) == 1


def test_agent_replicas_refuse_requests_that_bypass_the_gateway(sandbox):
    with sandbox.control() as control:
        agent_url = control.status()["services"]["agent"]["replicas"][0]["url"]
    response = httpx.post(f"{agent_url}/v1/sessions", headers={"X-Drillbook-Tenant": "tenant-a"})
    assert response.status_code == 401


def test_scale_to_zero_then_a_request_is_held_by_the_activator(sandbox):
    with sandbox.control() as control, TenantClient(sandbox.gateway_url, sandbox.tenant_keys["tenant-a"]) as client:
        session_id = client.create_session()
        control.scale("agent", 0)
        control.scale("model", 0)
        wait_for(lambda: all(s["ready"] == 0 and not s["replicas"] for n, s in control.status()["services"].items()
                             if n in ("agent", "model")))
        ack = client.turn(session_id, "wake up")
        assert ack["seq"] == 1
        status = control.status()["services"]
        activations = [e for e in control.events() if e["kind"] == "scaled" and e.get("reason") == "activator"]
    assert status["agent"]["desired"] == 1 and status["model"]["desired"] == 1
    assert {e["service"] for e in activations} == {"agent", "model"}
    # The activator scales from zero only: a tier scaled up meanwhile (a halt's or a rollback's
    # undo) is never lowered by an activation that saw it at zero a moment before.
    with sandbox.control() as control:
        control.scale("agent", 2)
        late = control.scale("agent", 1, reason="activator", only_from=0)
        assert late["skipped"] == "agent is at 2, not 0" and control.status()["services"]["agent"]["desired"] == 2


def test_rate_limit_answers_429_per_tenant(sandbox_factory):
    handle = sandbox_factory(rate_limit_rps=2, rate_limit_burst=3, tokens_per_second=0)
    with TenantClient(handle.gateway_url, handle.tenant_keys["tenant-a"]) as alice, \
            TenantClient(handle.gateway_url, handle.tenant_keys["tenant-b"]) as bob:
        codes = [alice.request("POST", "/v1/sessions").status_code for _ in range(8)]
        assert codes.count(201) >= 3 and 429 in codes
        assert bob.request("POST", "/v1/sessions").status_code == 201  # the limit is per tenant


def test_model_server_reports_queue_wait_slots_and_gpu_seconds_per_tenant_only_to_the_platform(sandbox):
    with TenantClient(sandbox.gateway_url, sandbox.tenant_keys["tenant-b"]) as client:
        client.turn(client.create_session(), "count me")
    with sandbox.control() as control:
        model_url = control.status()["services"]["model"]["replicas"][0]["url"]
    anyone = httpx.get(f"{model_url}/metrics").text
    assert 'tenant="' not in anyone and "drillbook_model_requests_total 1.0" in anyone  # summed over tenants
    wrong = httpx.get(f"{model_url}/metrics", headers={"Authorization": "Bearer not-the-token"}).text
    assert 'tenant="' not in wrong
    text = httpx.get(f"{model_url}/metrics", headers={"X-Drillbook-Internal-Token": sandbox.runtime.internal_token}).text
    assert 'drillbook_model_requests_total{tenant="tenant-b"} 1.0' in text
    # 16 tokens in chunks of 4: the generation queued for a slot four times.
    assert 'drillbook_model_queue_wait_seconds_count{tenant="tenant-b"} 4.0' in text
    assert 'drillbook_model_gpu_seconds_total{tenant="tenant-b"}' in text
    assert "drillbook_model_slots 4.0" in text
    assert "drillbook_model_slot_utilisation_ratio" in text


def test_the_gateways_metrics_show_tenants_only_to_the_platforms_own_services(sandbox):
    for tenant in ("tenant-a", "tenant-b"):
        with TenantClient(sandbox.gateway_url, sandbox.tenant_keys[tenant]) as client:
            client.turn(client.create_session(), "count me")
    anyone = httpx.get(f"{sandbox.gateway_url}/metrics").text
    assert 'tenant="' not in anyone  # a client learns no other tenant's name or volume here
    totals = {line.split(" ")[0]: float(line.split(" ")[1]) for line in anyone.splitlines()
              if line.startswith("drillbook_gateway_requests_total{")}
    assert totals.get('drillbook_gateway_requests_total{code="200"}', 0) >= 2, anyone  # summed over tenants
    token = sandbox.runtime.internal_token
    for headers in ({"X-Drillbook-Internal-Token": token}, {"Authorization": f"Bearer {token}"}):
        own = httpx.get(f"{sandbox.gateway_url}/metrics", headers=headers).text
        assert 'tenant="tenant-a"' in own and 'tenant="tenant-b"' in own
    wrong = httpx.get(f"{sandbox.gateway_url}/metrics", headers={"Authorization": "Bearer not-the-token"}).text
    assert 'tenant="' not in wrong


def run_concurrent_turns(handle, seconds: float, workers: int, during=None) -> dict[str, int]:
    """Worker threads run turns for a bounded time; returns counts of outcomes."""
    outcome = {"ok": 0, "failed": 0}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def worker(index: int) -> None:
        tenant, key = list(handle.tenant_keys.items())[index % len(handle.tenant_keys)]
        with TenantClient(handle.gateway_url, key, timeout=30) as client:
            session_id = client.create_session()
            while time.monotonic() < stop_at:
                response = client.request("POST", f"/v1/sessions/{session_id}/turns", json={"input": "go"},
                                          headers={"Idempotency-Key": uuid.uuid4().hex})
                with lock:
                    outcome["ok" if response.status_code == 200 else "failed"] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    if during is not None:
        time.sleep(seconds / 3)
        during()
    for thread in threads:
        thread.join()
    return outcome


def test_gateway_retries_hide_a_replica_kill_from_clients(sandbox_factory):
    handle = sandbox_factory(agents=3, tokens_per_second=100, max_tokens=8)
    with handle.control() as control:
        outcome = run_concurrent_turns(handle, 3.0, 8, during=lambda: control.kill("agent", count=2, signal="SIGKILL"))
        killed = sum(1 for e in control.events() if e["kind"] == "replica_killed")
    assert outcome["ok"] > 0 and outcome["failed"] == 0
    assert killed == 2


def test_no_502_escapes_the_gateway_when_replicas_are_killed_again_and_again(sandbox_factory):
    """Every request here is safe to retry (opens and turns carry idempotency keys, reads are
    GETs), so no kill may reach a client: 8 clients open sessions, run turns and read back while
    an agent replica is SIGKILLed whenever all are ready again, at least 6 times. (With the
    no-retries defect the same loop lets 20-30 502s through.)"""
    handle = sandbox_factory(agents=3, tokens_per_second=200, max_tokens=8)
    outcome: dict[str, int] = {"ok": 0}
    failures: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + 20.0

    def client_loop(index: int) -> None:
        key = list(handle.tenant_keys.values())[index % len(handle.tenant_keys)]
        with TenantClient(handle.gateway_url, key, timeout=30) as client:
            while time.monotonic() < stop_at:
                answers = [client.request("POST", "/v1/sessions", headers={"Idempotency-Key": uuid.uuid4().hex})]
                if answers[0].status_code == 201:
                    session_id = answers[0].json()["session_id"]
                    for _ in range(3):
                        answers.append(client.request("POST", f"/v1/sessions/{session_id}/turns", json={"input": "go"},
                                                      headers={"Idempotency-Key": uuid.uuid4().hex}))
                    answers.append(client.request("GET", f"/v1/sessions/{session_id}"))
                with lock:
                    for answer in answers:
                        if answer.status_code in (200, 201):
                            outcome["ok"] += 1
                        else:
                            failures.append(f"{answer.request.method} {answer.request.url.path}: "
                                            f"{answer.status_code} {answer.text[:120]}")

    clients = [threading.Thread(target=client_loop, args=(i,)) for i in range(8)]
    for thread in clients:
        thread.start()
    kills = 0
    with handle.control() as control:
        while time.monotonic() < stop_at - 2.0:
            time.sleep(0.5)
            agent = control.status()["services"]["agent"]
            if agent["ready"] == agent["desired"] == 3:
                control.kill("agent", count=1, signal="SIGKILL")
                kills += 1
    for thread in clients:
        thread.join()
    assert kills >= 6 and outcome["ok"] > 200, (kills, outcome)
    assert failures == [], f"{len(failures)} escaped after {kills} kills: {failures[:5]}"


def test_replicas_die_with_a_killed_supervisor(sandbox_factory):
    import os
    import signal

    from drillbook.sandbox import launcher

    handle = sandbox_factory(tokens_per_second=0)
    with handle.control() as control:
        pids = [r["pid"] for s in control.status()["services"].values() for r in s["replicas"]]
    os.kill(handle.pid, signal.SIGKILL)
    handle.process.wait(10)
    wait_for(lambda: not any(launcher._alive(pid) for pid in pids))
    wait_for(lambda: not launcher.is_running(handle.state_dir), timeout=10)
