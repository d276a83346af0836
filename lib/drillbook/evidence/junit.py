"""Verdicts as JUnit XML, for the CI systems and test dashboards that read nothing else.

One test suite per run (bundle), named by its control and runbook; in it, one test case per SLO
check, failed with the measured value and the threshold (an error instead, "not judged", when
the run itself was not judged: a setup problem is never an SLO failure), and two test cases that
make sure a run that judged nothing cannot look green:

- ``run completed``: an error when the run was interrupted, errored, aborted, killed or never
  sealed, or recorded no SLO check;
- ``evidence verifies``: an error when the bundle fails verification (a tampered bundle's
  checks are not believed, so they are reported but the suite fails).

A game day's runbooks that never ran (the game day was interrupted) are suites with one
``run completed`` error each. The document follows the Jenkins xunit schema (junit-10.xsd),
which the tests validate it against.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

from drillbook.evidence.catalog import RUNNING, BundleRow, GameDayRows
from drillbook.evidence.summary import SloCheck

PASSING_VERDICTS = ("PASS", "FAIL")  # verdicts of a run that judged what it measured


@dataclass
class Case:
    """One JUnit test case: passed, failed (an SLO missed) or an error (nothing could be judged)."""

    name: str
    classname: str
    failure: str | None = None
    error: str | None = None
    detail: str = ""


@dataclass
class Suite:
    name: str
    run: str  # the bundle's name, or "" for a runbook that never ran
    timestamp: str = ""
    target: str = ""
    cases: list[Case] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)

    def count(self, outcome: str) -> int:
        return sum(1 for case in self.cases if getattr(case, outcome) is not None)


def check_case(check: SloCheck, classname: str) -> Case:
    detail = f"measured {check.shown_value()}, threshold {check.comparison} {check.shown_threshold()}"
    return Case(check.name, classname, failure=None if check.passed else check.describe(), detail=detail)


def run_suite(row: BundleRow, failed: set[str]) -> Suite:
    """The suite of one run: its checks, whether it completed, whether its evidence verifies."""
    classname = f"drillbook.{row.control}.{row.runbook}"
    suite = Suite(f"{row.control}/{row.runbook}", row.name, row.finished_at, row.target,
                  properties={"bundle": row.name, "verdict": row.verdict, "status": row.status,
                              "manifest_sha256": row.manifest_sha256 or ""})
    checks = row.summary.checks if row.summary is not None else []
    judged = row.status == "complete" and row.verdict in PASSING_VERDICTS
    for check in checks:
        case = check_case(check, classname)
        if not judged and case.failure is not None:  # a check of a run that judged nothing is no SLO miss
            case.error, case.failure = f"not judged, the run is {row.verdict}: {case.failure}", None
        suite.cases.append(case)
    completed = Case("run completed", classname, detail=f"verdict {row.verdict}, sealed {row.status}")
    if not judged:
        completed.error = f"{row.verdict}: {row.reason or 'the run did not complete'}"
    elif not checks:
        completed.error = f"{row.verdict}: the run recorded no SLO check, so nothing was judged"
    suite.cases.append(completed)
    verifies = Case("evidence verifies", classname, detail="bundle files, signature and ledger entry")
    if row.name in failed:
        verifies.error = "the bundle fails verification (drillbook verify): its checks are not to be believed"
    suite.cases.append(verifies)
    return suite


def not_run_suite(runbook: str, why: str) -> Suite:
    from drillbook.scenarios import control_of

    control = control_of(runbook)
    suite = Suite(f"{control}/{runbook}", "")
    suite.cases.append(Case("run completed", f"drillbook.{control}.{runbook}", error=f"not run: {why}"))
    return suite


def document(suites: list[Suite], name: str = "drillbook") -> ElementTree.ElementTree:
    root = ElementTree.Element("testsuites", name=name, tests=str(sum(len(s.cases) for s in suites)),
                               failures=str(sum(s.count("failure") for s in suites)),
                               errors=str(sum(s.count("error") for s in suites)))
    for index, suite in enumerate(suites):
        attributes = {"name": suite.name, "tests": str(len(suite.cases)), "failures": str(suite.count("failure")),
                      "errors": str(suite.count("error")), "skipped": "0", "id": str(index)}
        if suite.timestamp:
            attributes["timestamp"] = suite.timestamp
        if suite.target:
            attributes["hostname"] = suite.target
        element = ElementTree.SubElement(root, "testsuite", attributes)
        if suite.properties:
            properties = ElementTree.SubElement(element, "properties")
            for key, value in suite.properties.items():
                ElementTree.SubElement(properties, "property", name=key, value=value)
        for case in suite.cases:
            node = ElementTree.SubElement(element, "testcase", name=case.name, classname=case.classname)
            if case.failure is not None:
                ElementTree.SubElement(node, "failure", message=case.failure, type="slo").text = case.detail
            if case.error is not None:
                ElementTree.SubElement(node, "error", message=case.error, type="run").text = case.detail
            elif case.failure is None and case.detail:
                ElementTree.SubElement(node, "system-out").text = case.detail
    ElementTree.indent(root)
    return ElementTree.ElementTree(root)


def write(suites: list[Suite], output: Path, name: str = "drillbook") -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    document(suites, name).write(output, encoding="utf-8", xml_declaration=True)
    return output


def report_suites(rows: list[BundleRow], failed: set[str]) -> list[Suite]:
    """Every run of a period, oldest first; game-day summaries are left out (their runs are in), and
    so are runs still going (they are counted once sealed)."""
    runs = [row for row in rows if row.gameday_plan is None and row.status != RUNNING]
    return [run_suite(row, failed) for row in sorted(runs, key=lambda r: (r.finished_at or r.name, r.name))]


def gameday_suites(gameday: GameDayRows, failed: set[str]) -> list[Suite]:
    """The runs one game day made, and the runbooks it never ran."""
    if gameday.summary.summary is None:
        return [not_run_suite(gameday.summary.name, "the game day's summary cannot be read")]
    why = gameday.summary.summary.reason or "the game day stopped"
    return [*(run_suite(row, failed) for row in gameday.runs), *(not_run_suite(name, why) for name in gameday.not_run)]
