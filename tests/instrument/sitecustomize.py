"""Counts, per process, how often drillbook resolves a run: profiles loaded, parameters validated
against a scenario, targets built. Active only where DRILLBOOK_TEST_COUNT_DIR names a folder and
this folder is on PYTHONPATH (tests/integration/test_runspec.py); each process writes
<pid>.json there as it exits. It wraps the functions and calls through: nothing is replaced."""

from __future__ import annotations

import atexit
import collections
import json
import os
import sys

FOLDER = os.environ.get("DRILLBOOK_TEST_COUNT_DIR")


def _count() -> None:
    import drillbook.profile as profile
    import drillbook.targets as targets
    from drillbook.scenarios.registry import Scenario

    counts: collections.Counter[str] = collections.Counter()

    def counted(name: str, function):  # noqa: ANN001, ANN202 - any callable
        def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            counts[name] += 1
            return function(*args, **kwargs)
        return call

    profile.load_profile = counted("profiles_loaded", profile.load_profile)
    targets.target_for = counted("targets_built", targets.target_for)
    Scenario.validate = counted("validations", Scenario.validate)

    @atexit.register
    def write() -> None:
        with open(os.path.join(str(FOLDER), f"{os.getpid()}.json"), "w", encoding="utf-8") as out:
            json.dump({"argv": sys.argv, **counts}, out)


if FOLDER:
    _count()
