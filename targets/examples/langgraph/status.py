#!/usr/bin/env python3
"""The agent tier's status for drillbook's commands target: one LangGraph server process, ready
when its /ok answers. Usage: status.py [URL] (default http://127.0.0.1:2024)."""

import json
import sys
import urllib.request

url = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:2024").rstrip("/")
try:
    with urllib.request.urlopen(f"{url}/ok", timeout=5) as answer:
        ready = int(answer.status == 200)
except OSError:
    ready = 0
print(json.dumps({"desired": 1, "ready": ready, "replicas": ready}))
