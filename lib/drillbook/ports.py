"""Picking a port on 127.0.0.1 for a server drillbook starts (the sandbox's gateway, a Locust master)."""

from __future__ import annotations

import random
import socket

STABLE_PORTS = range(20000, 32768)  # below Linux's ephemeral range, which outgoing connections draw from


def free_port() -> int:
    """A free port, picked below the ephemeral range: a port the kernel hands out for binding to 0
    can be taken by any outgoing loopback connection before the server binds it."""
    for port in random.sample(STABLE_PORTS, 200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
