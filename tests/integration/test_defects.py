"""Each built-in defect really breaks what it names, so runbooks can be shown to fail."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from drillbook.sandbox.client import TenantClient
from tests.helpers import wait_for
from tests.integration.test_sandbox import run_concurrent_turns

pytestmark = pytest.mark.integration


def test_no_retries_lets_a_replica_kill_reach_clients(sandbox_factory):
    handle = sandbox_factory(agents=3, tokens_per_second=100, max_tokens=8, defects=["no-retries"])
    with handle.control() as control:
        outcome = run_concurrent_turns(handle, 3.0, 8, during=lambda: control.kill("agent", count=2, signal="SIGKILL"))
    assert outcome["ok"] > 0 and outcome["failed"] > 0


def test_no_idempotency_applies_a_retried_turn_twice(sandbox_factory):
    handle = sandbox_factory(tokens_per_second=0, defects=["no-idempotency"])
    with TenantClient(handle.gateway_url, handle.tenant_keys["tenant-a"]) as client:
        session_id = client.create_session()
        first = client.turn(session_id, "once", idempotency_key="k")
        second = client.turn(session_id, "once", idempotency_key="k")
        assert (first["seq"], second["seq"]) == (1, 2) and second["replayed"] is False
        assert [t["idempotency_key"] for t in client.read_session(session_id)["turns"]] == ["k", "k"]


def test_slow_model_load_keeps_the_model_unready_for_longer(sandbox_factory):
    handle = sandbox_factory(model_load_delay_s=0.2, tokens_per_second=0)
    slow = sandbox_factory(model_load_delay_s=0.2, tokens_per_second=0, defects=["slow-model-load"])

    def ready_after(h) -> float:
        with h.control() as control:
            event = next(e for e in control.events() if e["kind"] == "replica_ready" and e["service"] == "model")
        return float(event["since_start_s"])

    # the defect holds the model back 8 s from its start; without it the same start takes 0.2 s
    assert ready_after(slow) >= 8.0 > ready_after(handle)


def test_no_fair_sharing_lets_a_flood_delay_another_tenant(sandbox_factory):
    """One GPU slot; the aggressor queues 6 long generations, then the victim asks for one.

    The victim's wait is what the model server measured it queued for a slot, not the wall clock
    of its request through gateway and agent, and the victim asks only once the flood is seen
    queued at the model server: on a busy machine both would otherwise blur the two runs together.
    """

    def victim_queue_wait(defects: list[str]) -> float:
        handle = sandbox_factory(gpu_slots=1, tokens_per_second=100, max_tokens=10, defects=defects)
        keys = handle.tenant_keys
        with handle.control() as control:
            model_url = control.status()["services"]["model"]["replicas"][0]["url"]

        def model_sample(name: str, tenant: str) -> float:
            text = httpx.get(f"{model_url}/metrics", timeout=10,
                             headers={"X-Drillbook-Internal-Token": handle.runtime.internal_token}).text
            return sum(sample.value for family in text_string_to_metric_families(text)
                       for sample in family.samples
                       if sample.name == name and sample.labels.get("tenant") == tenant)

        async def scenario() -> None:
            async with httpx.AsyncClient(base_url=handle.gateway_url, timeout=60) as http:
                async def session(key: str) -> str:
                    r = await http.post("/v1/sessions", headers={"Authorization": f"Bearer {key}"})
                    return r.json()["session_id"]

                aggressor_sessions = [await session(keys["tenant-a"]) for _ in range(6)]
                victim_session = await session(keys["tenant-b"])
                flood = [asyncio.create_task(http.post(f"/v1/sessions/{s}/turns", json={"input": "long"},
                                                       headers={"Authorization": f"Bearer {keys['tenant-a']}"}))
                         for s in aggressor_sessions]
                deadline = time.monotonic() + 30  # a bound on the wait, not a judgment: a busy machine is slow
                while model_sample("drillbook_model_queue_depth", "tenant-a") < 5:  # one holds the slot
                    assert time.monotonic() < deadline, "the flood never queued at the model server"
                    await asyncio.sleep(0.01)
                victim = await http.post(f"/v1/sessions/{victim_session}/turns", json={"input": "short"},
                                         headers={"Authorization": f"Bearer {keys['tenant-b']}"})
                assert victim.status_code == 200
                await asyncio.gather(*flood)

        asyncio.run(scenario())
        # 10 tokens in chunks of 4: the victim's generation queued three times
        assert model_sample("drillbook_model_queue_wait_seconds_count", "tenant-b") == 3
        return model_sample("drillbook_model_queue_wait_seconds_sum", "tenant-b")

    fair, unfair = victim_queue_wait([]), victim_queue_wait(["no-fair-sharing"])
    # A chunk holds the slot 0.04 s. Fair: each of the victim's chunks waits for at most the one
    # in the slot. First come first served: each waits behind the five queued before it.
    assert unfair > fair * 2.5, (fair, unfair)


def test_no_backups_accepts_the_request_but_writes_nothing(sandbox_factory):
    handle = sandbox_factory(tokens_per_second=0, defects=["no-backups"])
    with handle.control() as control:
        answer = control.backup()
        assert answer["created"] is False
        assert control.backups() == []
        assert not handle.runtime.backups_dir.exists() or not any(handle.runtime.backups_dir.iterdir())
        wait_for(lambda: any(e["kind"] == "backup_skipped" for e in control.events()))
