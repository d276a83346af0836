"""`drillbook report --pdf`, through the real CLI: WeasyPrint prints the report's page, and the
tests open the PDF with PDFium (pypdfium2), turn every page into an image, and check that charts
and each framework's table are whole on one page."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pypdfium2
import pypdfium2.raw as pdfium_c
import pytest

from drillbook.evidence import BundleWriter, RunSummary, SloCheck
from drillbook.evidence.frameworks import load_mapping

pytestmark = pytest.mark.integration

A4_LANDSCAPE = (841.89, 595.28)  # points


def seal(results: Path, runbook: str, control: str, figures: dict[str, tuple[str, float, float]]) -> None:
    """A run whose summary holds each figure (metric: (check name, value, threshold))."""
    summary = RunSummary.judge(runbook, control, {metric: value for metric, (_, value, _) in figures.items()},
                               [SloCheck(name=name, comparison="<=", threshold=threshold, value=value)
                                for name, value, threshold in figures.values()])
    with BundleWriter(results, runbook, "sandbox", {"trials": 1}) as bundle:
        bundle.write_json("summary.json", summary.to_json())


@pytest.fixture()
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    for recovery in (1.5, 2.5, 7.0):
        seal(folder, "ha-replica-loss", "ha", {
            "recovery_time_s": ("service recovery time", recovery, 5.0),
            "lost_turns": ("acknowledged turns lost", 0.0, 0.0),
            "error_rate_fault": ("error rate in the fault window", 0.01, 0.05)})
    for rpo in (12.0, 0.0):  # a zero is a value, drawn like any other
        seal(folder, "restore-drill", "restore", {"rto_s": ("RTO", 20.0, 60.0),
                                                  "rpo_s": ("RPO (data-loss window)", rpo, 30.0)})
    return folder


def drillbook(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CONFIG_HOME": str(cwd / "config"), "COLUMNS": "200"}
    env.pop("DRILLBOOK_SIGNING_KEY", None)
    return subprocess.run([sys.executable, "-m", "drillbook", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180)


def page_texts(document: pypdfium2.PdfDocument) -> list[str]:
    """Each page's text, one space between words (PDFium gives a hyphen at a line's end as \\x02)."""
    return [" ".join(document[i].get_textpage().get_text_bounded().replace("\x02", "-").split())
            for i in range(len(document))]


def test_the_pdf_prints_the_report_with_charts_and_tables_whole(results: Path, tmp_path: Path) -> None:
    ran = drillbook("report", str(results), "-o", "report.html", "--pdf", "report.pdf", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"PDF written to {tmp_path / 'report.pdf'}" in ran.stdout
    charts = (tmp_path / "report.html").read_text().count('<img alt=')
    assert charts == 6, "three HA figures and three restore figures have thresholds"

    document = pypdfium2.PdfDocument(tmp_path / "report.pdf")
    assert len(document) >= 3
    images, drawn = 0, []
    for index in range(len(document)):
        page = document[index]
        width, height = page.get_size()
        assert (round(width), round(height)) == tuple(round(x) for x in A4_LANDSCAPE)
        rendered = page.render(scale=1).to_pil().convert("L")
        assert sum(rendered.histogram()[:128]) > 0, f"page {index + 1} renders blank"
        for chart in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE]):
            left, bottom, right, top = chart.get_bounds()
            assert left >= 0 and bottom >= 0 and right <= width and top <= height, f"a chart cut on page {index + 1}"
            images += 1
        drawn.append(images)
    assert images == charts, "each chart drawn once, whole: none split over two pages"

    texts = page_texts(document)
    for index, text in enumerate(texts):  # a page holds words or charts, never its footer alone
        words = len(text.replace(f"page {index + 1} of {len(texts)}", "").strip())
        assert words > 20 or drawn[index] > (drawn[index - 1] if index else 0), f"page {index + 1} is empty"
    assert "Framework view" in " ".join(texts) and "page 1 of" in texts[0]
    for framework in load_mapping().frameworks:
        first = next(i for i, text in enumerate(texts) if framework.title in text)
        on_page = texts[first]
        last = framework.requirements[-1]
        assert last.title[:30] in on_page, f"{framework.id}'s table runs over to the next page"


def test_pdf_into_a_folder_that_is_a_file_is_refused_before_anything_is_written(results: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    ran = drillbook("report", str(results), "-o", "report.html", "--pdf", "afile/report.pdf", cwd=tmp_path)
    assert ran.returncode == 2 and "--pdf afile/report.pdf cannot be written" in ran.stderr
    assert not (tmp_path / "report.html").exists()
