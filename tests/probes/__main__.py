"""Run every probe family and print the table: python -m tests.probes [--family NAME] [--keep DIR]."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.probes import run_family, table
from tests.probes import bad_input, concurrency, interrupts, secrets, tamper


FAMILIES = [tamper.FAMILY, bad_input.FAMILY, secrets.FAMILY, interrupts.FAMILY, concurrency.FAMILY]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.probes", description=__doc__)
    parser.add_argument("--family", choices=FAMILIES, action="append",
                        help="only this family (repeat); default: all")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    arguments = parser.parse_args()
    families = arguments.family or FAMILIES
    workspace = arguments.keep or Path(tempfile.mkdtemp(prefix="drillbook-probes-"))
    outcomes = []
    try:
        for family in families:
            started = time.monotonic()
            print(f"… {family}", file=sys.stderr, flush=True)
            if family == tamper.FAMILY:
                done = run_family(tamper.probes(tamper.pristine(workspace / "pristine")), workspace / "tamper")
            elif family in (interrupts.FAMILY, concurrency.FAMILY):
                module = interrupts if family == interrupts.FAMILY else concurrency
                done = run_family(module.probes(), workspace / family)
            else:
                with bad_input.target(workspace / family.replace(" ", "-")) as state:
                    probes = (bad_input.probes(state) if family == bad_input.FAMILY else
                              secrets.probes(workspace / "secret-runs", state))
                    done = run_family(probes, workspace / family.replace(" ", "-") / "probes")
            print(f"… {family}: {len(done)} probes in {time.monotonic() - started:.0f} s", file=sys.stderr)
            outcomes += done
    finally:
        if arguments.keep is None:
            shutil.rmtree(workspace, ignore_errors=True)
    print(table(outcomes))
    for what, seconds in interrupts.STOP_TIMES.items():
        print(f"stopped {seconds:5.2f} s after the signal: {what}")
    return 0 if all(o.held for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
