"""Waiting for a condition: the one polling loop drillbook's library code uses.

A poll asks at least once, then again every interval until the answer is truthy or the time is
up. It returns the answer itself (a found value, or True), so a caller that looks for something
gets it without asking again; on timeout, the last falsy answer (False, None, an empty list).
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout_s: float, interval_s: float = 0.1) -> T:
    """Poll condition until its answer is truthy (returned) or timeout_s passes (its last answer)."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = condition()
        if answer or time.monotonic() >= deadline:
            return answer
        time.sleep(interval_s)


__all__ = ["wait_until"]
