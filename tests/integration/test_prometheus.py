"""SLOs stated as PromQL, asked of a real Prometheus (Debian's package) that scrapes the sandbox,
and drillbook's own verdicts published as metrics: a textfile, and a real Pushgateway."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from drillbook.chaos import run as run_experiment
from drillbook.chaos.runner import target_configuration
from drillbook.profile import load_profile
from tests.helpers import REPOSITORY, free_port, wait_for

pytestmark = pytest.mark.integration
REQUESTS = 'sum(increase(drillbook_gateway_requests_total[$__range]))'
P95 = 'histogram_quantile(0.95, sum by (le) (rate(drillbook_gateway_request_seconds_bucket[$__range])))'


def binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed: apt-get install {name}")
    return found


class Server:
    """A server binary started on 127.0.0.1 for one test, stopped by its PID."""

    def __init__(self, argv: list[str], url: str, log: Path) -> None:
        self.url = url
        with open(log, "wb") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(self.ready, timeout=30, interval=0.2)

    def ready(self) -> bool:
        assert self.process.poll() is None, f"{self.url} exited {self.process.returncode}"
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def prometheus(sandbox, tmp_path) -> Iterator[Server]:
    """Prometheus scraping the sandbox's gateway every second."""
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                      "scrape_configs": [{"job_name": "gateway", "static_configs": [
                                          {"targets": [sandbox.gateway_url.split("://", 1)[1]]}]}]}))
    server = Server([binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                     f"--web.listen-address=127.0.0.1:{port}"], f"http://127.0.0.1:{port}", tmp_path / "prometheus.log")
    try:
        wait_for(lambda: httpx.get(f"{server.url}/api/v1/query", params={"query": 'up{job="gateway"}'})
                 .json()["data"]["result"], timeout=30, interval=0.5)
        yield server
    finally:
        server.stop()


@pytest.fixture
def pushgateway(tmp_path) -> Iterator[Server]:
    port = free_port()
    server = Server([binary("prometheus-pushgateway"), f"--web.listen-address=127.0.0.1:{port}"],
                    f"http://127.0.0.1:{port}", tmp_path / "pushgateway.log")
    try:
        yield server
    finally:
        server.stop()


def profile_with(folder: Path, url: str, slos: list[dict], settle_s: float = 2.0) -> Path:
    path = folder / "sandbox-prometheus.yaml"
    path.write_text(yaml.safe_dump({"name": "sandbox-prometheus", "kind": "sandbox",
                                    "prometheus": {"url": url, "settle_s": settle_s, "slos": slos}}))
    return path


def drillbook(*args: str, state: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "drillbook", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "DRILLBOOK_STATE_DIR": str(state), "COLUMNS": "200", **env},
                          stdin=subprocess.DEVNULL)


def only_summary(results: Path) -> dict:
    (bundle,) = [p for p in results.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return json.loads((bundle / "summary.json").read_text())


def metrics_of(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_promql_slos_judge_a_runbook_and_keep_their_queries_in_the_evidence(sandbox, prometheus, tmp_path):
    cold = ["run", "cold-start", "-p", "trials=1", "-p", "idle_s=0.1"]
    passing = profile_with(tmp_path, prometheus.url, [
        {"name": "gateway requests in the run", "query": REQUESTS, "comparison": ">=", "threshold": 1}])
    done = drillbook(*cold, "--target", str(passing), "--results", str(tmp_path / "pass"), state=sandbox.state_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = only_summary(tmp_path / "pass")
    check = next(c for c in summary["checks"] if c["name"] == "gateway requests in the run")
    assert check["value"] >= 1
    asked = summary["metrics"]["promql gateway requests in the run"]
    assert asked["query"].startswith("sum(increase(drillbook_gateway_requests_total[") and "$__range" not in asked["query"]
    assert asked["value"] == check["value"] and asked["at"] > 0 and asked["server"] == prometheus.url

    failing = profile_with(tmp_path, prometheus.url, [
        {"name": "gateway p95 latency", "query": P95, "threshold": 0.000001, "unit": "s"},
        {"name": "a metric that does not exist", "query": "sum(drillbook_no_such_metric)", "threshold": 1}])
    done = drillbook(*cold, "--target", str(failing), "--results", str(tmp_path / "fail"), state=sandbox.state_dir)
    assert done.returncode == 1 and "FAIL" in done.stdout, done.stdout + done.stderr
    summary = only_summary(tmp_path / "fail")
    assert summary["verdict"] == "FAIL"
    checks = {c["name"]: c for c in summary["checks"]}
    assert checks["gateway p95 latency"]["value"] > 0.000001  # measured, and over the threshold
    missing = checks["a metric that does not exist"]
    assert missing["value"] is None and "matched no series" in missing["note"] and "drillbook_no_such_metric" in missing["note"]

    out = tmp_path / "textfile" / "drillbook.prom"
    done = drillbook("report", str(tmp_path / "fail"), "-o", str(tmp_path / "r.html"), "--metrics-file", str(out),
                     state=sandbox.state_dir)
    assert done.returncode == 0, done.stderr
    published = metrics_of(out.read_text())
    labels = (("control", "cold-start"), ("runbook", "cold-start"), ("target", "sandbox-prometheus"))
    assert published[("drillbook_run_passed", labels)] == 0
    assert published[("drillbook_slo_passed", tuple(sorted((*labels, ("check", "gateway p95 latency")))))] == 0
    assert published[("drillbook_resilience_score", ())] == 0


def test_an_unreachable_prometheus_is_refused_before_anything_runs(sandbox, tmp_path):
    profile = profile_with(tmp_path, f"http://127.0.0.1:{free_port()}", [
        {"name": "requests", "query": REQUESTS, "threshold": 1, "comparison": ">="}])
    results = tmp_path / "results"
    done = drillbook("run", "cold-start", "--target", str(profile), "--results", str(results), state=sandbox.state_dir)
    assert done.returncode == 2 and "Prometheus at http://127.0.0.1:" in done.stderr and "does not answer" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not results.exists() or not any(results.iterdir())  # nothing half-written
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"name: p\ntarget: {profile}\nrunbooks:\n  - runbook: cold-start\n")
    done = drillbook("gameday", str(plan), "--results", str(results), state=sandbox.state_dir)
    assert done.returncode == 2 and "does not answer" in done.stderr


def test_an_experiment_states_its_hypothesis_in_promql(sandbox, prometheus, tmp_path):
    experiment = yaml.safe_load((REPOSITORY / "experiments" / "ha-replica-loss.yaml").read_text())
    experiment["steady-state-hypothesis"]["probes"] = [{
        "type": "probe", "name": "gateway-scraped", "tolerance": True,
        "provider": {"type": "python", "module": "drillbook.chaos.probes", "func": "promql_within",
                     "arguments": {"query": 'up{job="gateway"}', "comparison": "==", "threshold": 1}}}]
    experiment["method"] = [experiment["method"][0] | {"background": False}]  # client traffic only, no kill
    path = tmp_path / "promql-experiment.yaml"
    path.write_text(yaml.safe_dump(experiment))
    profile = load_profile(str(profile_with(tmp_path, prometheus.url, [])))
    result = run_experiment(str(path), target_configuration(profile, sandbox.state_dir), tmp_path / "run",
                            {"traffic_s": 1.0})
    assert result.verdict == "PASS", result.reasons
    asked = result.measurements["promql"]
    assert [a["phase"] for a in asked] == ["before", "after"] and all(a["value"] == 1.0 for a in asked)


def test_a_game_day_pushes_its_verdicts_to_a_pushgateway(tmp_path, pushgateway):
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: pushed\ntarget: sandbox\nrunbooks:\n"
                    "  - runbook: cold-start\n    parameters: {trials: 1, idle_s: 0.1, slo_p95_s: 0.0001}\n")
    done = drillbook("gameday", str(plan), "--results", str(tmp_path / "results"), "--pushgateway", pushgateway.url,
                     state=tmp_path / "state")
    assert done.returncode == 1, done.stdout + done.stderr
    published = metrics_of(httpx.get(f"{pushgateway.url}/metrics", timeout=10).text)
    gameday = {labels: value for (name, labels), value in published.items() if name == "drillbook_gameday_passed"}
    assert gameday == {(("instance", ""), ("job", "drillbook"), ("plan", "pushed"), ("target", "sandbox")): 0}
    runs = [value for (name, labels), value in published.items()
            if name == "drillbook_run_passed" and ("runbook", "cold-start") in labels]
    assert runs == [0]

    down = f"http://127.0.0.1:{free_port()}"
    done = drillbook("gameday", str(plan), "--results", str(tmp_path / "results2"), "--pushgateway", down,
                     state=tmp_path / "state2")
    assert done.returncode == 2 and "Pushgateway at" in done.stderr
    assert not (tmp_path / "state2").exists() and not (tmp_path / "results2").exists()
