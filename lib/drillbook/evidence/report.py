"""The auditor's report: one self-contained HTML page over many bundles.

Per control (HA, tenant isolation, cold start, restore): the latest verdict, a trend chart, the
key figures each with the bundle and manifest digest it comes from, and a resilience score whose
definition is printed on the page. Bundles that fail verification are listed and never counted.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape

from drillbook import __version__
from drillbook.evidence.catalog import BundleRow, list_bundles
from drillbook.evidence.verify import VerifyReport, verify_path
from drillbook.plots import pyplot


@dataclass(frozen=True)
class Figure:
    metric: str
    label: str
    unit: str = ""


@dataclass(frozen=True)
class Control:
    key: str
    title: str
    figures: tuple[Figure, ...]


CONTROLS = (
    Control("ha", "High availability: replica loss",
            (Figure("recovery_time_s", "recovery time", "s"), Figure("lost_turns", "acknowledged turns lost"),
             Figure("error_rate_fault", "error rate in the fault window"))),
    Control("isolation", "Tenant isolation: noisy neighbour",
            (Figure("victim_p95_ratio", "victim p95 ratio", "×"), Figure("victim_error_rate", "victim error rate"))),
    Control("cold-start", "Scale from zero: cold start",
            (Figure("cold_start_p95_s", "cold-start P95", "s"), Figure("cold_start_p50_s", "cold-start P50", "s"))),
    Control("restore", "Disaster recovery: restore drill",
            (Figure("rto_s", "RTO", "s"), Figure("rpo_turns", "RPO (acknowledged turns lost)"),
             Figure("integrity", "restored sessions whose chain verifies"))),
)

SCORE_DEFINITION = ("Resilience score: for each control, the share of SLO checks that passed across all its "
                    "verified bundles in the period; the score is the mean of those shares over the controls "
                    "that have runs, times 100. Unverified bundles count for nothing.")


@dataclass
class FigureCell:
    label: str
    value: str
    bundle: str
    digest: str


@dataclass
class ControlSection:
    control: Control
    runs: list[BundleRow] = field(default_factory=list)
    latest: BundleRow | None = None
    figures: list[FigureCell] = field(default_factory=list)
    chart: str | None = None
    check_share: float | None = None


def _format(value: object, unit: str) -> str:
    if isinstance(value, float):
        return f"{value:.3g}{unit}"
    return f"{value}{unit}"


def trend_chart(control: Control, runs: list[BundleRow]) -> str | None:
    """A small PNG (base64) of the control's first figure over time, each point coloured by verdict."""
    plt = pyplot()

    figure_spec = control.figures[0]
    points = []
    for row in sorted(runs, key=lambda r: r.finished_at):
        value = row.summary.metrics.get(figure_spec.metric) if row.summary else None
        moment = datetime.fromisoformat(row.finished_at.replace("Z", "+00:00"))
        points.append((moment, value if isinstance(value, (int, float)) else None, row.verdict))
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(4.8, 1.8), dpi=100)
    numeric = [(t, v) for t, v, _ in points if v is not None]
    if numeric:
        ax.plot([t for t, _ in numeric], [v for _, v in numeric], color="#999999", linewidth=1)
        ax.set_ylabel(f"{figure_spec.label} ({figure_spec.unit})" if figure_spec.unit else figure_spec.label,
                      fontsize=7)
    for moment, value, verdict in points:
        ax.scatter([moment], [value if value is not None else 0], color="#2e7d32" if verdict == "PASS" else "#c62828",
                   s=18, zorder=3)
    if len(points) == 1:  # one run: a day either side, not matplotlib's default of years
        from datetime import timedelta

        ax.set_xlim(points[0][0] - timedelta(days=1), points[0][0] + timedelta(days=1))
    ax.tick_params(labelsize=6)
    fig.autofmt_xdate()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def build_sections(rows: list[BundleRow], failed: set[str]) -> list[ControlSection]:
    sections = []
    for control in CONTROLS:
        runs = [r for r in rows if r.summary and r.summary.control == control.key and r.name not in failed]
        section = ControlSection(control, runs)
        if runs:
            latest = max(runs, key=lambda r: r.finished_at)
            section.latest = latest
            for spec in control.figures:
                source = next((r for r in sorted(runs, key=lambda r: r.finished_at, reverse=True)
                               if r.summary and r.summary.metrics.get(spec.metric) is not None), None)
                if source is not None and source.summary is not None:
                    section.figures.append(FigureCell(spec.label, _format(source.summary.metrics[spec.metric], spec.unit),
                                                      source.name, source.manifest_sha256 or ""))
            checks = [c for r in runs if r.summary for c in r.summary.checks]
            section.check_share = sum(c.passed for c in checks) / len(checks) if checks else None
            section.chart = trend_chart(control, runs)
        sections.append(section)
    return sections


def resilience_score(sections: list[ControlSection]) -> float | None:
    shares = [s.check_share for s in sections if s.check_share is not None]
    return 100 * sum(shares) / len(shares) if shares else None


def render_report(results_dir: Path, trusted: set[str] | None = None) -> str:
    rows = [r for r in list_bundles(results_dir) if r.status != "unsealed"]
    verification: VerifyReport = verify_path(results_dir, trusted)
    failed = verification.failed_bundles()
    sections = build_sections(rows, failed)
    environment = Environment(loader=PackageLoader("drillbook.evidence", "templates"),
                              autoescape=select_autoescape(["html", "j2"]))
    template = environment.get_template("report.html.j2")
    return template.render(
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        version=__version__, results_dir=str(results_dir), sections=sections, rows=rows,
        score=resilience_score(sections), score_definition=SCORE_DEFINITION,
        findings=verification.findings, failed=failed, checked=len(verification.checked),
    )


def write_report(results_dir: Path, output: Path, trusted: set[str] | None = None) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render_report(results_dir, trusted), encoding="utf-8")
    return output
