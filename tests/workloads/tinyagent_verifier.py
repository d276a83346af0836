"""A delivery verifier plug-in for tinyagent, as a workload's own team would write one.

Registered in the ``drillbook.verifiers`` entry point group under the name ``tinyagent``;
a target profile selects it with ``delivery: {verifier: tinyagent}``. It reads a conversation
back through tinyagent's own API and checks that each message's ``prev`` is its predecessor's
digest (tinyagent's chain).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from drillbook.delivery import StoredTurn


class TinyAgentVerifier:
    def __init__(self, gateway_url, tenant_keys, profile):
        self.gateway_url = gateway_url.rstrip("/")
        self.keys = tenant_keys

    def read(self, tenant, session_id):
        request = urllib.request.Request(f"{self.gateway_url}/api/conversations/{session_id}/messages",
                                         headers={"X-Api-Key": self.keys[tenant]})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                messages = json.loads(response.read())["messages"]
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise
        return [StoredTurn(m["index"], m["digest"], m["request_id"], m["prev"]) for m in messages]

    def chain_ok(self, session_id, turns):
        return all(later.prev_hash == earlier.hash for earlier, later in zip(turns, turns[1:]))
