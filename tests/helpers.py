"""Small helpers shared by tests."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_for(condition: Callable[[], object], timeout: float = 15.0, interval: float = 0.05) -> object:
    """Poll until condition() is truthy; the value is returned, a timeout fails the test."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s")
        time.sleep(interval)
