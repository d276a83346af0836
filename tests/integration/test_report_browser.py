"""The report in a real browser: headless Chromium (Debian's chromium) renders the page,
takes a screenshot of it, and logs no console message; a page with a script error shows that
the console is seen."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.integration.test_report_pdf import seal

pytestmark = pytest.mark.integration

WIDTH, HEIGHT = 1280, 3000


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no chromium on this machine (Debian: apt-get install chromium)")
    return found


def screenshot(page: Path, shot: Path) -> subprocess.CompletedProcess:
    """Chromium, headless, as root (no sandbox), logging the page's console to stderr."""
    return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--enable-logging=stderr", "--v=0", f"--window-size={WIDTH},{HEIGHT}",
                           f"--screenshot={shot}", page.as_uri()],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(shot.parent)})


def console_lines(ran: subprocess.CompletedProcess) -> list[str]:
    return [line for line in ran.stderr.splitlines() if ":CONSOLE" in line]


def test_the_report_renders_in_chromium_without_console_messages(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for recovery in (1.5, 7.0):
        seal(results, "ha-replica-loss", "ha", {"recovery_time_s": ("service recovery time", recovery, 5.0),
                                                "lost_turns": ("acknowledged turns lost", 0.0, 0.0)})
    made = subprocess.run([sys.executable, "-m", "drillbook", "report", str(results), "-o", str(tmp_path / "r.html")],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    ran = screenshot(tmp_path / "r.html", tmp_path / "shot.png")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert console_lines(ran) == []
    image = Image.open(tmp_path / "shot.png").convert("L")
    assert image.size == (WIDTH, HEIGHT)
    dark = sum(image.histogram()[:128])
    assert dark > 0.005 * WIDTH * HEIGHT, "the page rendered text and charts, not a blank window"


def test_a_script_error_on_a_page_is_seen(tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text("<html><body><p>x</p><script>missing();</script></body></html>")
    ran = screenshot(page, tmp_path / "shot.png")
    assert any("Uncaught ReferenceError" in line for line in console_lines(ran)), ran.stderr[-2000:]
