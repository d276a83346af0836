"""Session continuity: each user opens a session and streams turns (Server-Sent Events), dropping
a share of them at a random token (--drop-rate) and resuming each from its last event id with a
new client, or leaving it for another process to resume (--handoff-rate). Every turn's events,
with their ids and arrival times, go to the streams file for the drill's audit.

Tenants and keys: --tenant-keys / DRILLBOOK_TENANT_KEYS. Host: from the target (--host).
"""

from locust import between, task

from drillbook.loadkit import AgentClientUser


class StreamingSessionUser(AgentClientUser):
    def wait_time(self) -> float:
        think = self.environment.parsed_options.think_time
        return between(think * 0.5, think * 1.5)(self) if think > 0 else 0

    @task
    def streamed_turn(self) -> None:
        options = self.environment.parsed_options
        self.stream_turn(max_tokens=options.max_tokens or 64, drop_rate=options.drop_rate,
                         handoff_rate=options.handoff_rate)
