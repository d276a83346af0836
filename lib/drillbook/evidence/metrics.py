"""drillbook's own verdicts and figures as Prometheus metrics, so teams can alert on a failed game day.

Written in the text format for node_exporter's textfile collector (``--metrics-file``), or pushed
to a Pushgateway (``--pushgateway``, job ``drillbook``; a game day groups by plan and target). Per runbook, the
latest run of the period: whether it passed (PASS, sealed complete, verifies), its verdict, when
it finished, and each SLO check's value, threshold and outcome; per control, runs by verdict;
the resilience score; for a game day, whether it passed and when.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile

from drillbook.evidence.catalog import BundleRow, GameDayRows

RUN_LABELS = ("control", "runbook", "target")
JOB = "drillbook"


class VerdictMetrics:
    """One registry of drillbook's metrics, filled from bundle rows."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        gauge = lambda name, doc, labels=RUN_LABELS: Gauge(name, doc, labels, registry=self.registry)  # noqa: E731
        self.passed = gauge("drillbook_run_passed", "1 when the latest run passed (PASS, sealed complete, verifies)")
        self.verdict = gauge("drillbook_run_verdict", "1 for the latest run's verdict", (*RUN_LABELS, "verdict"))
        self.finished = gauge("drillbook_run_finished_timestamp_seconds", "When the latest run finished")
        check_labels = (*RUN_LABELS, "check")
        self.slo_value = gauge("drillbook_slo_value", "The latest run's measured value of an SLO check", check_labels)
        self.slo_threshold = gauge("drillbook_slo_threshold", "The SLO check's threshold", check_labels)
        self.slo_passed = gauge("drillbook_slo_passed", "1 when the SLO check passed (unmeasured fails)", check_labels)
        self.runs = gauge("drillbook_runs", "Runs in the period by control and verdict", ("control", "verdict"))
        self.score = Gauge("drillbook_resilience_score", "The report's resilience score (0 to 100)",
                           registry=self.registry)
        self.gameday_passed = gauge("drillbook_gameday_passed", "1 when every runbook of the game day passed",
                                    ("plan", "target"))
        self.gameday_finished = gauge("drillbook_gameday_finished_timestamp_seconds", "When the game day finished",
                                      ("plan", "target"))

    def add_runs(self, rows: list[BundleRow], failed: set[str]) -> None:
        from drillbook.evidence.catalog import RUNNING
        from drillbook.evidence.report import build_sections, moment_of, resilience_score, run_passed, shown_verdict

        latest: dict[tuple[str, str, str], BundleRow] = {}
        for row in rows:
            if row.gameday_plan is not None or row.status == RUNNING:  # a live run counts once sealed
                continue
            self.runs.labels(row.control, shown_verdict(row, failed)).inc()
            key = (row.control, row.runbook, row.target)
            if key not in latest or (row.finished_at or row.name) > (latest[key].finished_at or latest[key].name):
                latest[key] = row
        score = resilience_score(build_sections(rows, failed, charts=False))
        if score is not None:
            self.score.set(score)
        for key, row in latest.items():
            self.passed.labels(*key).set(int(run_passed(row, failed)))
            self.verdict.labels(*key, shown_verdict(row, failed)).set(1)
            moment = moment_of(row)
            if moment is not None:
                self.finished.labels(*key).set(moment.timestamp())
            for check in (row.summary.checks if row.summary else []):
                if check.value is not None:
                    self.slo_value.labels(*key, check.name).set(check.value)
                self.slo_threshold.labels(*key, check.name).set(check.threshold)
                self.slo_passed.labels(*key, check.name).set(int(check.passed))

    def add_gameday(self, gameday: GameDayRows, failed: set[str]) -> None:
        """A game day's runs, and whether the game day passed and when it finished."""
        from drillbook.evidence.report import moment_of

        self.add_runs(gameday.runs, failed)
        summary = gameday.summary
        labels = (summary.gameday_plan or summary.runbook, summary.target)
        self.gameday_passed.labels(*labels).set(int(summary.verdict == "PASS" and summary.status == "complete"))
        moment = moment_of(summary)
        if moment is not None:
            self.gameday_finished.labels(*labels).set(moment.timestamp())

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(str(path), self.registry)
        return path

    def push(self, url: str, grouping: dict[str, str]) -> None:
        """Replace this group's metrics on the Pushgateway (one line and exit 1 when it fails)."""
        from drillbook.errors import DrillbookError

        try:
            push_to_gateway(url, job=JOB, registry=self.registry, grouping_key=grouping, timeout=10)
        except OSError as error:
            raise DrillbookError(f"pushing to the Pushgateway at {url} failed: {error}; the evidence is sealed, "
                                 "push again with `drillbook report --pushgateway`") from None


def pushgateway_ready(url: str) -> None:
    """Refuse with one line unless the Pushgateway at url answers that it is ready."""
    from drillbook.promql import ready

    ready(url, "Pushgateway")
