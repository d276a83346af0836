"""Load figures come from the request log when Locust's own aggregates missed requests (issue 31,
item 10: with workers under heavy load Locust's totals missed 2.5-3.4 % of turns)."""

from __future__ import annotations

import json
from pathlib import Path

from drillbook.load import collect

START = 1_800_000_000


def write_run(out: Path, logged: int, locust_counted: int, failed: int = 0) -> None:
    """A run's files as a master with two workers writes them: Locust's JSON counted
    `locust_counted` turns; the two workers' request logs hold `logged`, `failed` of them failed."""
    out.mkdir()
    for worker in (1, 2):
        lines = [f"{START + n / 10:.6f},turn,{10.0 + n % 50:.3f},{0 if n < failed and worker == 1 else 1},"
                 f"{'HTTP 502' if n < failed and worker == 1 else ''}\n"
                 for n in range(worker - 1, logged, 2)]
        (out / f"requests-worker-{worker}.csv").write_text("".join(lines))
    (out / "locust.json").write_text(json.dumps([
        {"name": "turn", "method": "POST", "num_requests": locust_counted, "num_failures": 0,
         "max_response_time": 40, "response_times": {"10": locust_counted},
         "num_reqs_per_sec": {str(START): locust_counted}, "num_fail_per_sec": {}},
        {"name": "health", "method": "GET", "num_requests": 5, "num_failures": 0, "max_response_time": 2,
         "response_times": {"1": 5}, "num_reqs_per_sec": {str(START): 5}, "num_fail_per_sec": {}}]))


def test_totals_and_percentiles_come_from_the_request_log_when_locust_missed_turns(tmp_path):
    write_run(tmp_path / "run", logged=1000, locust_counted=968, failed=4)  # Locust missed 3.2 %
    result = collect(tmp_path / "run", 0, 10.0)
    turns = result.stats.set_index("name").loc["turn"]
    assert turns["requests"] == 1000 and turns["failures"] == 2 and turns["locust_requests"] == 968
    assert turns["method"] == "POST" and turns["max_ms"] == 59.0
    assert turns["p50_ms"] > 10.0  # exact, from the log: not Locust's one-bucket histogram
    # A name the log does not hold keeps Locust's own count.
    assert result.stats.set_index("name").loc["health", "requests"] == 5
    assert result.total_requests == 1005 and result.total_failures == 2 and result.locust_requests == 973
    # Per second, the counts are Locust's here, since Locust saw a name the log lacks...
    assert int(result.per_second["requests"].sum()) == 973


def test_per_second_counts_come_from_the_log_when_it_holds_every_name(tmp_path):
    write_run(tmp_path / "run", logged=200, locust_counted=190)
    data = json.loads((tmp_path / "run" / "locust.json").read_text())[:1]
    (tmp_path / "run" / "locust.json").write_text(json.dumps(data))
    result = collect(tmp_path / "run", 0, 10.0)
    assert result.total_requests == 200 == int(result.per_second["requests"].sum())
    assert result.locust_requests == 190


def test_a_locustfile_that_writes_no_request_log_is_counted_by_locust(tmp_path):
    write_run(tmp_path / "run", logged=0, locust_counted=50)
    result = collect(tmp_path / "run", 0, 10.0)
    assert result.total_requests == 55 == result.locust_requests
