"""Session continuity: each user opens a session and streams turns (Server-Sent Events), dropping
a share of them at a random token (--drop-rate) and resuming each from its last event id with a
new client, or leaving it for another process to resume (--handoff-rate). Every turn's events,
with their ids and arrival times, go to the streams file for the drill's audit.

Tenants and keys: --tenant-keys / DRILLBOOK_TENANT_KEYS. Host: from the target (--host).
"""

from locust import task

from drillbook.loadkit import AgentClientUser, think_time


class StreamingSessionUser(AgentClientUser):
    wait_time = think_time

    @task
    def streamed_turn(self) -> None:
        options = self.environment.parsed_options
        self.stream_turn(max_tokens=options.max_tokens or 64, drop_rate=options.drop_rate,
                         handoff_rate=options.handoff_rate)
