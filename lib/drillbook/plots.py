"""matplotlib for files, never a screen: every plot drillbook draws goes through here."""

from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend (imported on first use: it is slow)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
