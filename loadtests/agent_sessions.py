"""Agent sessions: each user opens a session and runs turns with think time, retrying a failed
turn with the same idempotency key and keeping a receipt of every acknowledgement.

Tenants and keys: --tenant-keys / DRILLBOOK_TENANT_KEYS. Host: from the target (--host).
"""

from locust import between, task

from drillbook.loadkit import AgentClientUser


class AgentSessionUser(AgentClientUser):
    def wait_time(self) -> float:
        think = self.environment.parsed_options.think_time
        return between(think * 0.5, think * 1.5)(self) if think > 0 else 0

    @task
    def turn(self) -> None:
        self.run_turn(max_tokens=self.environment.parsed_options.max_tokens)
