"""tinyagent's own Locust traffic, as its team would write it; drillbook runs it for every load
of a profile that names it (load.locustfile) and still collects statistics and receipts."""

import uuid

from locust import FastHttpUser, constant, task

from drillbook import loadkit


class Conversation(FastHttpUser):
    wait_time = constant(0.05)

    def on_start(self) -> None:
        keys = loadkit.tenant_keys(self.environment)
        self.team = sorted(keys)[0]
        self.headers = {"X-Api-Key": keys[self.team]}
        self.conversation = self.client.post("/api/conversations", headers=self.headers, name="open").json()["id"]

    @task
    def message(self) -> None:
        request_id = uuid.uuid4().hex
        with self.client.post(f"/api/conversations/{self.conversation}/messages", json={"text": "hello"},
                              headers={**self.headers, "X-Request-Id": request_id}, name="message",
                              catch_response=True) as response:
            if response.status_code == 200:
                ack = response.json()
                loadkit.acknowledged(self.conversation, self.team, ack["index"], ack["digest"], request_id)
            else:
                response.failure(f"HTTP {response.status_code}")
