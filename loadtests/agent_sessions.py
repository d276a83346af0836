"""Agent sessions: each user opens a session and runs turns with think time, retrying a failed
turn with the same idempotency key and keeping a receipt of every acknowledgement.

Tenants and keys: --tenant-keys / DRILLBOOK_TENANT_KEYS. Host: from the target (--host).
"""

from locust import task

from drillbook.loadkit import AgentClientUser, think_time


class AgentSessionUser(AgentClientUser):
    wait_time = think_time

    @task
    def turn(self) -> None:
        self.run_turn(max_tokens=self.environment.parsed_options.max_tokens)
