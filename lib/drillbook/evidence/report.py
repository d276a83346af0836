"""The auditor's report: one self-contained HTML page over the bundles of a period.

Every bundle is counted. Each run is filed under the control its runbook declares
(`drillbook.scenarios`, never a notebook cell that may not have run), whatever its verdict:
FAIL, ERROR, ABORTED, INTERRUPTED, a killed or never-sealed run, and a bundle that fails
verification all count as runs that did not pass. Per control: the latest verdict, the runs by
verdict, trend charts with the SLO threshold and the failed runs, and the key figures, each
naming the run it comes from; the digest of each bundle appears once, in the list of bundles.
Bundles of runbooks that are not controls (sandbox smoke, on-call runbooks, game-day
summaries) are listed, not scored. The period, the score's definition and how signatures were
checked are printed on the page. The framework view files the same runs under the framework
controls of a control mapping (drillbook.evidence.frameworks), with the gaps.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, PackageLoader, select_autoescape

from drillbook import __version__
from drillbook.errors import ConfigError
from drillbook.evidence.catalog import RUNNING, BundleRow, list_bundles, run_passed, shown_verdict
from drillbook.evidence.verify import (LEDGER_FINDING, TRUSTED, UNSIGNED, EvidenceSource, VerifyReport,
                                      verify_evidence)
from drillbook.plots import pyplot
from drillbook.scenarios import Figure, Scenario, controls

if TYPE_CHECKING:
    from drillbook.evidence.frameworks import ControlMapping
    from drillbook.evidence.remediation import RemediationItem

SCORE_DEFINITION = ("Resilience score: for each control, the share of its runs in the period that passed; a run "
                    "passes only when its verdict is PASS, it was sealed complete and its bundle verifies. FAIL, "
                    "ERROR, ABORTED and INTERRUPTED runs, runs that were killed or never sealed, and bundles that fail "
                    "verification count as runs that did not pass. The score is the mean of those shares over the "
                    "controls that have runs in the period, times 100; a control without runs is shown as NO "
                    "EVIDENCE and is not in the score.")
GOOD, BAD, GREY = "#2e7d32", "#c62828", "#777777"


@dataclass
class FigureCell:
    label: str
    value: str
    run: BundleRow
    verdict: str
    meaning: str = ""


@dataclass
class ControlSection:
    control: Scenario
    runs: list[BundleRow] = field(default_factory=list)
    passed: int = 0
    latest: BundleRow | None = None
    figures: list[FigureCell] = field(default_factory=list)
    charts: list[tuple[str, str]] = field(default_factory=list)  # (what it shows, base64 PNG)
    by_verdict: dict[str, int] = field(default_factory=dict)

    @property
    def share(self) -> float | None:
        return self.passed / len(self.runs) if self.runs else None

    def shown_check(self, check: Any) -> tuple[str, str]:
        """An SLO check's value and threshold as the report shows them: a share as a percentage."""
        spec = next((f for f in self.control.figures if f.check == check.name and f.share), None)
        if spec is None:
            return check.shown_value(), check.shown_threshold()
        value = spec.shown(check.value) if check.value is not None else check.shown_value()
        return value, spec.shown(check.threshold)


@dataclass(frozen=True)
class Period:
    """The bundles a report covers: finished (or, unsealed, started) in [since, until]."""

    since: datetime | None = None
    until: datetime | None = None

    def holds(self, row: BundleRow) -> bool:
        moment = moment_of(row)
        if moment is None:  # a folder that says nothing of its time is never left out
            return True
        return (self.since is None or moment >= self.since) and (self.until is None or moment <= self.until)

    def describe(self, rows: list[BundleRow]) -> str:
        moments = [m for m in (moment_of(r) for r in rows) if m is not None]
        first = self.since or (min(moments) if moments else None)
        last = self.until or (max(moments) if moments else None)
        if first is None or last is None:
            return "no bundles"
        chosen = "as chosen (--since/--until)" if self.since or self.until else \
            "from the first to the last bundle in the results folder"
        return f"{_stamp(first)} to {_stamp(last)}, {chosen}"


def moment_of(row: BundleRow) -> datetime | None:
    try:
        return datetime.fromisoformat(row.finished_at.replace("Z", "+00:00")) if row.finished_at else None
    except ValueError:
        return None


def _stamp(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def number(value: object) -> float | None:
    """A metric as a plottable number; None for what is not one (None, NaN, text, a flag)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _thresholds(spec: Figure, runs: list[BundleRow]) -> list[tuple[datetime, str, float]]:
    """Each run's own SLO threshold for a figure (a run may have been given another one)."""
    found = []
    for row in runs:
        moment = moment_of(row)
        check = next((c for c in (row.summary.checks if row.summary else []) if spec.check and c.name == spec.check),
                     None)
        if moment is not None and check is not None:
            found.append((moment, check.comparison, check.threshold))
    return sorted(found)


FEW_RUNS = 10  # below this many measured runs, a figure is drawn run by run against its threshold


def value_axis(values: list[float]) -> tuple[float, float]:
    """The value axis for these values (and thresholds): from a little below zero when nothing is
    negative, so that a zero is drawn above the axis line and seen, to a little above the top."""
    top = max(values, default=0.0)
    bottom = min(values, default=0.0)
    span = (top - min(bottom, 0.0)) or 1.0
    return (bottom - 0.08 * span if bottom < 0 else -0.08 * span, top + 0.15 * span)


def _scaled(spec: Figure, value: float) -> float:
    return 100 * value if spec.share else value


def _axis_unit(spec: Figure) -> str:
    return "%" if spec.share else (spec.unit or "value")


def chart_alt(spec: Figure, measured: int) -> str:
    """What the chart of a figure shows, as its alternative text (the kind of chart included)."""
    if measured < FEW_RUNS:
        return f"{spec.label}: each run's value against its SLO threshold"
    return f"{spec.label} over the period, with each run's SLO threshold"


def measured_count(spec: Figure, runs: list[BundleRow]) -> int:
    return sum(1 for r in runs if r.summary and number(r.summary.metrics.get(spec.metric)) is not None)


def figure_chart(spec: Figure, runs: list[BundleRow], failed: set[str], period: tuple[datetime, datetime]) -> str:
    """A PNG (base64) of one figure: run by run against its threshold when fewer than FEW_RUNS
    runs measured it (a trend of one or two dots says nothing), else a trend over the period."""
    if measured_count(spec, runs) < FEW_RUNS:
        return values_chart(spec, runs, failed)
    return trend_chart(spec, runs, failed, period)


def _png(figure: Any) -> str:
    plt = pyplot()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def values_chart(spec: Figure, runs: list[BundleRow], failed: set[str]) -> str:
    """Each run a column, oldest first: its value as a dot with the number written beside it
    (green passed, red did not), a run that did not measure it as a red cross at zero, and each
    run's own SLO threshold as a dashed mark across its column."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6.4, 2.8), dpi=110)
    ordered = sorted(runs, key=lambda r: r.finished_at)
    thresholds = {moment: value for moment, _, value in _thresholds(spec, ordered)}
    drawn: list[float] = []
    for index, row in enumerate(ordered):
        value = number(row.summary.metrics.get(spec.metric)) if row.summary else None
        threshold = thresholds.get(moment_of(row)) if moment_of(row) else None
        if threshold is not None:
            axis.plot([index - 0.35, index + 0.35], [_scaled(spec, threshold)] * 2, color=BAD, linestyle="--",
                      linewidth=1.2, label="SLO threshold" if "SLO threshold" not in axis.get_legend_handles_labels()[1]
                      else None)
            drawn.append(_scaled(spec, threshold))
        if value is None:
            axis.scatter([index], [0.0], marker="x", color=BAD, s=48, zorder=4)
            axis.annotate("not measured", (index, 0.0), textcoords="offset points", xytext=(6, 4), fontsize=8,
                          color=BAD)
            continue
        shown = _scaled(spec, value)
        drawn.append(shown)
        axis.scatter([index], [shown], color=GOOD if run_passed(row, failed) else BAD, s=46, zorder=4)
        axis.annotate(spec.shown(value), (index, shown), textcoords="offset points", xytext=(7, 3), fontsize=9)
    axis.set_xticks(range(len(ordered)))
    axis.set_xticklabels([f"{row.run_id}\n{row.finished_at[5:16].replace('T', ' ')}" for row in ordered], fontsize=8)
    axis.set_xlim(-0.6, len(ordered) - 0.4)
    axis.set_ylim(*value_axis(drawn))
    axis.axhline(0.0, color=GREY, linewidth=0.6, zorder=0)
    axis.set_title(f"{spec.label}: each run against its SLO", fontsize=11)
    axis.set_ylabel(_axis_unit(spec), fontsize=9)
    axis.tick_params(labelsize=9)
    if axis.get_legend_handles_labels()[1]:
        axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _png(figure)


def trend_chart(spec: Figure, runs: list[BundleRow], failed: set[str], period: tuple[datetime, datetime]) -> str:
    """A PNG (base64) of one figure over the period: each run a dot (green passed, red did not,
    drawn on top), runs that did not measure it as red crosses on the axis, each run's SLO
    threshold as a dashed line; zeros sit above the axis line."""
    import matplotlib.dates as mdates

    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6.4, 2.8), dpi=110)
    measured, missing = [], []
    for row in sorted(runs, key=lambda r: r.finished_at):
        moment = moment_of(row)
        if moment is None:
            continue
        value = number(row.summary.metrics.get(spec.metric)) if row.summary else None
        if value is not None:
            measured.append((moment, _scaled(spec, value), run_passed(row, failed)))
        else:
            missing.append(moment)
    if measured:
        axis.plot([t for t, _, _ in measured], [v for _, v, _ in measured], color=GREY, linewidth=1, zorder=1)
        for good, colour, label, order in ((True, GOOD, "passed", 3), (False, BAD, "did not pass", 4)):
            points = [(t, v) for t, v, ok in measured if ok is good]
            if points:
                axis.scatter([t for t, _ in points], [v for _, v in points], color=colour, s=36, zorder=order,
                             label=label)
    if missing:
        axis.scatter(missing, [0.0] * len(missing), marker="x", color=BAD, s=48, zorder=4, label="did not measure it")
    first, last = period
    pad = max(timedelta(minutes=5), (last - first) * 0.05)
    thresholds = [(t, c, _scaled(spec, v)) for t, c, v in _thresholds(spec, runs)]
    if thresholds:  # each run's threshold from that run on, across the whole period
        comparison = thresholds[-1][1]
        shown = sorted({spec.shown(value / 100 if spec.share else value) for _, _, value in thresholds})
        xs = [first - pad, *(t for t, _, _ in thresholds), last + pad]
        ys = [thresholds[0][2], *(v for _, _, v in thresholds), thresholds[-1][2]]
        axis.step(xs, ys, where="post", color=BAD, linestyle="--", linewidth=1.2,
                  label=f"SLO {comparison} {', '.join(shown[:3])}")
    axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    axis.set_xlim(first - pad, last + pad)
    axis.set_ylim(*value_axis([v for _, v, _ in measured] + [v for _, _, v in thresholds]))
    axis.axhline(0.0, color=GREY, linewidth=0.6, zorder=0)
    axis.set_title(f"{spec.label}: {len(measured)} run{'' if len(measured) == 1 else 's'} measured it, "
                   f"{len(missing)} did not", fontsize=11)
    axis.set_ylabel(_axis_unit(spec), fontsize=9)
    axis.tick_params(labelsize=9)
    axis.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M"))
    figure.autofmt_xdate()
    return _png(figure)


def build_sections(rows: list[BundleRow], failed: set[str], charts: bool = True) -> list[ControlSection]:
    moments = [m for m in (moment_of(r) for r in rows) if m is not None]
    span = (min(moments), max(moments)) if moments else None
    sections = []
    for control in controls():  # a run still going is listed, and counted once it is sealed
        runs = [r for r in rows if r.control == control.control and r.status != RUNNING]
        section = ControlSection(control, runs)
        if runs:
            section.passed = sum(run_passed(r, failed) for r in runs)
            for row in runs:
                verdict = shown_verdict(row, failed)
                section.by_verdict[verdict] = section.by_verdict.get(verdict, 0) + 1
            newest_first = sorted(runs, key=lambda r: r.finished_at, reverse=True)
            section.latest = newest_first[0]
            for spec in control.figures:
                source = next((r for r in newest_first if r.name not in failed and r.summary
                               and number(r.summary.metrics.get(spec.metric)) is not None), None)
                if source is not None and source.summary is not None:
                    section.figures.append(FigureCell(spec.label, spec.shown(source.summary.metrics[spec.metric]),
                                                      source, shown_verdict(source, failed), spec.meaning))
            if span is not None and charts:
                section.charts = [(chart_alt(spec, measured_count(spec, runs)), figure_chart(spec, runs, failed, span))
                                  for spec in control.figures if spec.check]
        sections.append(section)
    return sections


def resilience_score(sections: list[ControlSection]) -> float | None:
    shares = [s.share for s in sections if s.share is not None]
    return 100 * sum(shares) / len(shares) if shares else None


HISTORY_BROKEN = ("history-cut", "history-rewritten")  # the ledger no longer holds the head kept outside


def score_withheld(verification: VerifyReport) -> str | None:
    """Why no score can be given: a ledger that does not hold the head kept outside has lost, or
    had rewritten, runs that cannot be placed under any control, so no share of them is known."""
    broken = next((f for f in verification.findings if f.bundle == LEDGER_FINDING and f.kind in HISTORY_BROKEN), None)
    return None if broken is None else f"withheld: {broken.detail}"


def signatures_line(verification: VerifyReport, trusted: set[str] | None) -> str:
    """How signatures were checked, as counted: never "where present" when none are."""
    counts = verification.signature_counts()
    total = sum(counts.values())
    signed = total - counts.get(UNSIGNED, 0)
    if total == 0:
        return "No sealed bundle in the results folder, so no signature to check."
    if trusted is None:
        return (f"Signatures were not checked against a trusted key (none was given): {signed} of {total} sealed "
                f"bundles in the results folder carry a signature, {counts.get(UNSIGNED, 0)} are unsigned.")
    others = {state: n for state, n in counts.items() if state not in (TRUSTED, UNSIGNED)}
    line = (f"{counts.get(TRUSTED, 0)} of {total} sealed bundles in the results folder are signed by one of the {len(trusted)} trusted "
            f"key(s); {counts.get(UNSIGNED, 0)} are unsigned")
    if others:
        line += "; " + ", ".join(f"{n} {state}" for state, n in sorted(others.items()))
    return line + "."


@dataclass
class PeriodEvidence:
    """The bundles of a period and the verification of their results folder, read once for every
    output made of them (the page, JUnit XML, metrics)."""

    results_dir: Path
    period: Period
    rows: list[BundleRow]
    verification: VerifyReport
    trusted: set[str] | None = None
    source: EvidenceSource | None = None

    @classmethod
    def read(cls, results_dir: Path, trusted: set[str] | None = None, since: datetime | None = None,
             until: datetime | None = None, source: EvidenceSource | None = None,
             expected_head: dict[str, Any] | None = None, head_source: str = "") -> "PeriodEvidence":
        """source: where the evidence was read from, with what that place itself showed (an
        object store's findings and head), when it is not the results folder itself.
        expected_head: a ledger head kept outside (`drillbook head`), which the ledger must still
        hold: without one, a ledger cut at its tail cannot be told from a short one."""
        period = Period(since, until)
        verification = verify_evidence(results_dir, trusted, source, expected_head=expected_head,
                                       head_source=head_source)
        rows = [r for r in list_bundles(results_dir, verification.ledger) if period.holds(r)]
        return cls(results_dir, period, rows, verification, trusted, source)

    @property
    def failed(self) -> set[str]:
        return self.verification.failed_bundles()

    def remediation(self) -> list["RemediationItem"]:
        """The remediation items of the results folder that were open at some time in the period
        (drillbook.evidence.remediation): opened before it ended, and open or closed after it began."""
        from drillbook.evidence.remediation import read_records, remediation_items

        records, _ = read_records(self.results_dir)
        items = remediation_items(list_bundles(self.results_dir, self.verification.ledger), records, self.failed)
        since, until = self.period.since, self.period.until

        def overlaps(item: "RemediationItem") -> bool:
            opened = datetime.fromisoformat(item.opened_at.replace("Z", "+00:00"))
            closed = datetime.fromisoformat(item.closed_at.replace("Z", "+00:00")) if item.closed_at else None
            return (until is None or opened <= until) and (since is None or closed is None or closed >= since)

        return [item for item in items if overlaps(item)]


def render_report(results_dir: Path, trusted: set[str] | None = None, since: datetime | None = None,
                  until: datetime | None = None, mapping: "ControlMapping | None" = None) -> str:
    return render(PeriodEvidence.read(results_dir, trusted, since, until), mapping)


def render(evidence: PeriodEvidence, mapping: "ControlMapping | None" = None) -> str:
    """The page; mapping: the control mapping of its framework view (None: the shipped one)."""
    from drillbook.evidence.frameworks import load_mapping, requirement_statuses

    mapping = mapping if mapping is not None else load_mapping()
    rows, verification, failed = evidence.rows, evidence.verification, evidence.failed
    sections = build_sections(rows, failed)
    scored = {s.control.control for s in sections}
    gamedays = [r for r in rows if r.gameday_plan is not None]
    others = [r for r in rows if r.control not in scored and r not in gamedays]
    environment = Environment(loader=PackageLoader("drillbook.evidence", "templates"),
                              autoescape=select_autoescape(["html", "j2"]))
    template = environment.get_template("report.html.j2")
    withheld = score_withheld(verification)
    return template.render(
        generated_at=_stamp(datetime.now(timezone.utc)), version=__version__,
        results_dir=evidence.source.name if evidence.source else str(evidence.results_dir),
        period=evidence.period.describe(rows), sections=sections, rows=rows, gamedays=gamedays, others=others,
        score=None if withheld else resilience_score(sections), withheld=withheld, score_definition=SCORE_DEFINITION,
        findings=verification.findings, failed=failed, checked=len(verification.checked),
        signatures=signatures_line(verification, evidence.trusted), shown_verdict=shown_verdict,
        head=verification.head or "no kept head given (--expect-head): a ledger cut at its tail cannot be seen",
        history=verification.entries, mapping=mapping, requirements=requirement_statuses(mapping, rows, failed),
        remediation=sorted(evidence.remediation(), key=lambda i: (not i.open, i.opened_at)),
        now=datetime.now(timezone.utc),
    )


def write_report(evidence: PeriodEvidence, output: Path, mapping: "ControlMapping | None" = None) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render(evidence, mapping), encoding="utf-8")
    return output


def pdf_engine() -> Any:
    """WeasyPrint's HTML class, or one ConfigError line when it cannot load (it needs Pango)."""
    try:
        from weasyprint import HTML
    except (ImportError, OSError) as error:
        raise ConfigError(f"--pdf needs WeasyPrint and the Pango library (Debian: apt-get install libpango-1.0-0 "
                          f"libpangoft2-1.0-0): {str(error).splitlines()[0]}") from None
    return HTML


def write_pdf(evidence: PeriodEvidence, output: Path, mapping: "ControlMapping | None" = None) -> Path:
    """The same page printed to PDF by WeasyPrint (A4 landscape; charts, rows and each framework's
    table kept whole on a page)."""
    engine = pdf_engine()
    output.parent.mkdir(parents=True, exist_ok=True)
    engine(string=render(evidence, mapping)).write_pdf(output)
    return output


def write_junit(evidence: PeriodEvidence, output: Path) -> Path:
    """The period's runs as JUnit XML (drillbook.evidence.junit): one suite per run."""
    from drillbook.evidence import junit

    return junit.write(junit.report_suites(evidence.rows, evidence.failed), output)
