"""Entry points are read once per Python path (drillbook.plugins), and a package put on the path
at run time is seen."""

from __future__ import annotations

import sys

from drillbook.plugins import TARGETS, installed
from drillbook.target_kinds import known_kinds
from tests.helpers import install_distribution


def test_a_package_put_on_the_path_is_seen_and_the_path_read_once(tmp_path, monkeypatch):
    assert "cached-kind" not in known_kinds()
    assert installed(TARGETS) is installed(TARGETS)  # the same path: read once
    folder = install_distribution(tmp_path / "site", "cached-kind", [], {TARGETS: {"cached-kind": "nowhere:factory"}})
    monkeypatch.setattr(sys, "path", [str(folder), *sys.path])
    assert "cached-kind" in known_kinds()
