"""Locust as a bounded subprocess, and its results as pandas.

Locust is never imported here (it monkey-patches with gevent); it runs as
``python -m locust`` in its own process group, and a run that outlives its bound (run time +
stop timeout + a start-up margin) is killed with all its children and reported as overran.
With workers, Locust's own master/worker mode runs: a headless master bound to 127.0.0.1 that
waits for its workers, and that many ``--worker`` processes in the master's process group (on one
machine here; on a cluster, worker pods point at the master). Workers send their receipts and
request-log lines to the master, which writes one file of each per worker into the run's folder;
they are merged, and the delivery audit covers the turns of all of them.
Figures come from the request log the drillbook locustfiles write (one line per request, float
milliseconds): totals, failures, per-second counts and exact percentiles, whole-run, per second
and per phase. Locust's own aggregates are kept beside them (`locust_requests`) but not used where
the log has the request name: with workers under heavy load they missed 2.5-3.4 % of the turns
that the request logs and the delivery audit both had. A locustfile that writes no request log
(or not for some name) is counted from Locust's JSON and its response-time histogram.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from drillbook import jsonl
from drillbook import project
from drillbook.config import LoadOptions
from drillbook.delivery import Receipt, read_receipts
from drillbook.errors import ConfigError, LoadRunOverran
from drillbook.measure import percentile
from drillbook.ports import free_port
from drillbook.processes import ProcessLedger, die_with_parent
from drillbook.agentapi import AgentApi
from drillbook.profile import format_tenant_keys

STARTUP_MARGIN_S = 30.0
WORKERS_MAX_WAIT_S = 30  # how long a master waits for its workers to connect before giving up
REQUEST_LOG_COLUMNS = ["t", "name", "ms", "ok", "error"]


PROFILE_SETTINGS = {
    # --set name: the environment variable the drillbook locustfiles read
    "think-time": "DRILLBOOK_THINK_TIME", "max-tokens": "DRILLBOOK_MAX_TOKENS",
    "victim-tenant": "DRILLBOOK_VICTIM_TENANT", "aggressor-tenant": "DRILLBOOK_AGGRESSOR_TENANT",
    "victim-users": "DRILLBOOK_VICTIM_USERS", "aggressor-users": "DRILLBOOK_AGGRESSOR_USERS",
    "aggressor-tokens": "DRILLBOOK_AGGRESSOR_TOKENS", "baseline": "DRILLBOOK_BASELINE_S",
    "burst": "DRILLBOOK_BURST_S", "recovery": "DRILLBOOK_RECOVERY_S",
    "drop-rate": "DRILLBOOK_DROP_RATE", "handoff-rate": "DRILLBOOK_HANDOFF_RATE",
}
PHASE_SETTINGS = ("baseline", "burst", "recovery")
# What each setting must be for a run to mean something: seconds (zero or more), a count (one or
# more), or a tenant name.
SETTING_KINDS = {"think-time": "seconds", "baseline": "seconds", "burst": "seconds", "recovery": "seconds",
                 "max-tokens": "count", "victim-users": "count", "aggressor-users": "count",
                 "aggressor-tokens": "count", "victim-tenant": "tenant", "aggressor-tenant": "tenant",
                 "drop-rate": "fraction", "handoff-rate": "fraction"}


def check_setting(name: str, value: str) -> None:
    """One --set value against its kind; a value that cannot give a meaningful run is a ConfigError."""
    kind = SETTING_KINDS[name]
    if kind == "tenant":
        if not value.strip():
            raise ConfigError(f"invalid --set {name}: a tenant name is needed")
        return
    try:
        number = float(value) if kind in ("seconds", "fraction") else int(value)
    except ValueError:
        wanted = {"seconds": "a number of seconds", "fraction": "a fraction"}.get(kind, "a whole number")
        raise ConfigError(f"invalid --set {name}={value}: not {wanted}") from None
    if kind == "seconds" and not (0 <= number <= 86_400):
        raise ConfigError(f"invalid --set {name}={value}: seconds must be from 0 to 86400")
    if kind == "fraction" and not (0 <= number <= 1):
        raise ConfigError(f"invalid --set {name}={value}: a fraction must be from 0 to 1")
    if kind == "count" and number < 1:
        raise ConfigError(f"invalid --set {name}={value}: must be at least 1")


def locustfile_for(profile: str) -> Path:
    """A profile name from loadtests/ (dashes or underscores), or a path to a locustfile."""
    return project.find(project.LOAD_PROFILES, profile)


def profile_env(settings: dict[str, str], run_time_s: float) -> dict[str, str]:
    """Environment for the locustfile from --set name=value; phases default to thirds of the run."""
    unknown = sorted(set(settings) - set(PROFILE_SETTINGS))
    if unknown:
        raise ConfigError(f"unknown load setting {unknown[0]!r}; known: {', '.join(PROFILE_SETTINGS)}")
    for name, value in settings.items():
        check_setting(name, value)
    env = {PROFILE_SETTINGS[name]: value for name, value in settings.items()}
    for name in PHASE_SETTINGS:
        env.setdefault(PROFILE_SETTINGS[name], f"{run_time_s / 3:g}")
    return env


def api_env(api: AgentApi) -> dict[str, str]:
    """Environment that tells the drillbook locustfiles how to speak the workload's agent API."""
    return {"DRILLBOOK_AGENT_API": api.model_dump_json()}


def histogram_percentile(histogram: dict[str, int] | dict[int, int], quantile: float) -> float:
    """Percentile from Locust's response-time histogram ({rounded ms: count}), as Locust computes it:
    nearest rank over Locust's rounded buckets. Only Locust's own summary uses it; every figure
    drillbook judges comes from the exact request log (drillbook.measure.percentile)."""
    counts = sorted((float(ms), count) for ms, count in histogram.items())
    total = sum(count for _, count in counts)
    if total == 0:
        return math.nan
    needed = max(1, math.ceil(quantile * total))
    seen = 0
    for ms, count in counts:
        seen += count
        if seen >= needed:
            return ms
    return counts[-1][0]


@dataclass
class LoadResult:
    """One finished load run: exact totals, series, phases, errors, receipts and the raw files."""

    out_dir: Path
    exit_code: int | None
    wall_s: float
    stats: pd.DataFrame  # per request name: from the request log (Locust's JSON where it has none); locust_requests
    per_second: pd.DataFrame  # index: second (UTC); requests, failures, p50_ms, p95_ms, p99_ms
    requests: pd.DataFrame  # the request log: t, name, ms, ok, error
    phases: pd.DataFrame  # phase, start, end (epoch seconds)
    receipts: list[Receipt] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    @property
    def total_requests(self) -> int:
        return int(self.stats["requests"].sum()) if len(self.stats) else 0

    @property
    def total_failures(self) -> int:
        return int(self.stats["failures"].sum()) if len(self.stats) else 0

    @property
    def locust_requests(self) -> int:
        """What Locust's own aggregates counted (fewer than the request log when they missed some)."""
        return int(self.stats["locust_requests"].sum()) if len(self.stats) else 0

    def by_phase(self, names: list[str] | None = None) -> pd.DataFrame:
        """Requests, error rate and exact p50/p95/p99 per phase and request name."""
        if self.phases.empty:
            return pd.DataFrame(columns=["phase", "name", "requests", "failures", "error_rate",
                                         "p50_ms", "p95_ms", "p99_ms"])
        rows = []
        for phase in self.phases.itertuples():
            window = self.requests[(self.requests["t"] >= phase.start) & (self.requests["t"] < phase.end)]
            if names is not None:
                window = window[window["name"].isin(names)]
            for name, group in window.groupby("name"):
                rows.append(summarise(group, phase=phase.phase, name=name))
        return pd.DataFrame(rows)


def summarise(requests: pd.DataFrame, **labels: object) -> dict:
    count = len(requests)
    failures = int((~requests["ok"]).sum()) if count else 0
    ms = requests["ms"]
    return {**labels, "requests": count, "failures": failures,
            "error_rate": failures / count if count else math.nan,
            "p50_ms": percentile(ms, 0.50), "p95_ms": percentile(ms, 0.95), "p99_ms": percentile(ms, 0.99)}


def read_stats(json_path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-name totals with histogram percentiles, and per-second requests/failures, from Locust's JSON."""
    entries = json.loads(json_path.read_text()) if json_path.exists() else []
    rows, per_second = [], []
    for entry in entries:
        histogram = entry["response_times"]
        rows.append({"name": entry["name"], "method": entry["method"], "requests": entry["num_requests"],
                     "failures": entry["num_failures"],
                     "p50_ms": histogram_percentile(histogram, 0.50), "p95_ms": histogram_percentile(histogram, 0.95),
                     "p99_ms": histogram_percentile(histogram, 0.99),
                     "max_ms": entry["max_response_time"] or math.nan})
        for second, count in entry["num_reqs_per_sec"].items():
            per_second.append({"second": int(second), "requests": count, "failures": 0})
        for second, count in entry["num_fail_per_sec"].items():
            per_second.append({"second": int(second), "requests": 0, "failures": count})
    stats = pd.DataFrame(rows, columns=["name", "method", "requests", "failures", "p50_ms", "p95_ms", "p99_ms",
                                        "max_ms"])
    seconds = pd.DataFrame(per_second, columns=["second", "requests", "failures"])
    seconds = seconds.groupby("second").sum() if len(seconds) else seconds.set_index("second")
    return stats, seconds


STATS_COLUMNS = ["name", "method", "requests", "failures", "p50_ms", "p95_ms", "p99_ms", "max_ms", "locust_requests"]


def stats_from_log(log: pd.DataFrame, locust: pd.DataFrame) -> pd.DataFrame:
    """Per request name, the figures of the request log (every request it holds, exact
    percentiles), with what Locust counted beside them; a name only Locust saw keeps Locust's."""
    counted = locust.set_index("name") if len(locust) else pd.DataFrame(columns=STATS_COLUMNS).set_index("name")
    rows = []
    for name, group in log.groupby("name", sort=True):
        row = summarise(group, name=name)
        del row["error_rate"]
        rows.append({**row, "method": counted["method"].get(name, ""), "max_ms": float(group["ms"].max()),
                     "locust_requests": int(counted["requests"].get(name, 0))})
    logged = set(log["name"])
    rows += [{**entry, "locust_requests": entry["requests"]} for entry in locust.to_dict("records")
             if entry["name"] not in logged]
    return pd.DataFrame(rows, columns=STATS_COLUMNS)


def seconds_from_log(log: pd.DataFrame) -> pd.DataFrame:
    """Requests and failures per second (epoch second), from the request log."""
    by_second = log.assign(second=log["t"].astype(int), failed=~log["ok"]).groupby("second")
    return pd.DataFrame({"requests": by_second.size(), "failures": by_second["failed"].sum().astype(int)})


def read_request_log(paths: list[Path]) -> pd.DataFrame:
    frames = [pd.read_csv(path, names=REQUEST_LOG_COLUMNS, header=None, keep_default_na=False,
                          dtype={"name": str, "error": str}) for path in paths if path.stat().st_size]
    if not frames:
        return pd.DataFrame({"t": pd.Series(dtype=float), "name": pd.Series(dtype=str),
                             "ms": pd.Series(dtype=float), "ok": pd.Series(dtype=bool),
                             "error": pd.Series(dtype=str)})
    log = pd.concat(frames, ignore_index=True).sort_values("t", ignore_index=True)
    log["ok"] = log["ok"].astype(bool)
    return log


def read_phases(path: Path, run_end: float) -> pd.DataFrame:
    marks = jsonl.read(path)
    rows = []
    for index, mark in enumerate(marks):
        if mark["phase"] == "done":
            continue
        end = marks[index + 1]["started"] if index + 1 < len(marks) else run_end
        rows.append({"phase": mark["phase"], "start": mark["started"], "end": end})
    return pd.DataFrame(rows, columns=["phase", "start", "end"])


def latency_per_second(log: pd.DataFrame) -> pd.DataFrame:
    if log.empty:
        return pd.DataFrame(columns=["p50_ms", "p95_ms", "p99_ms"])
    grouped = log.assign(second=log["t"].astype(int)).groupby("second")["ms"]
    return pd.DataFrame({f"p{round(q * 100)}_ms": grouped.agg(lambda ms, q=q: percentile(ms, q))
                         for q in (0.50, 0.95, 0.99)})


INTERRUPT_GRACE_S = 1.5  # an interrupted run's users stop gently within this, then the group is killed


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    for signum, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        if signum == signal.SIGTERM:
            try:  # children of locust (workers, anything a locustfile started) go too
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return


def locust_command(options: LoadOptions, locustfile: Path, out_dir: Path, master_port: int | None = None) -> list[str]:
    """The Locust that runs the test: alone, or as the master of options.workers workers."""
    argv = [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "--host", options.host,
            "-u", str(options.users), "-r", str(options.spawn_rate), "-t", f"{options.run_time_s:g}s",
            "--stop-timeout", f"{options.stop_timeout_s:g}", "--csv", str(out_dir / "locust"),
            "--csv-full-history", "--json-file", str(out_dir / "locust"), "--only-summary",
            "--logfile", str(out_dir / "locust.log"), "--exit-code-on-error", "1"]
    if options.workers:
        assert master_port is not None
        argv += ["--master", "--master-bind-host", options.master_bind, "--master-bind-port", str(master_port),
                 "--expect-workers", str(options.workers), "--expect-workers-max-wait", str(workers_wait_s(options))]
    return argv


def workers_wait_s(options: LoadOptions) -> int:
    """How long the master waits for its workers: longer for workers started elsewhere (pods)."""
    return WORKERS_MAX_WAIT_S * (4 if options.remote_workers else 1)


def worker_command(locustfile: Path, out_dir: Path, master_port: int, index: int) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(locustfile), "--worker", "--master-host", "127.0.0.1",
            "--master-port", str(master_port), "--logfile", str(out_dir / f"locust-worker-{index}.log")]


class LoadRun:
    """A Locust run in progress (its own process group); `wait` bounds it and collects the result.

    Locust never outlives the process that started it: it gets SIGTERM when that process dies
    (even by SIGKILL), and with a ledger it is written down so `drillbook rollback` can stop a
    group whose owner is gone.
    """

    def __init__(self, options: LoadOptions, locustfile: Path, tenant_keys: dict[str, str], out_dir: Path,
                 ledger: ProcessLedger | None = None) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **options.env,
               "DRILLBOOK_TENANT_KEYS": format_tenant_keys(tenant_keys),
               "DRILLBOOK_LOAD_OUT": str(out_dir)}
        self.options, self.out_dir = options, out_dir
        self.bound = options.run_time_s + options.stop_timeout_s + STARTUP_MARGIN_S + \
            (workers_wait_s(options) if options.workers else 0)
        self.started = time.time()
        port = (options.master_port or free_port()) if options.workers else None
        # Its own process group (a terminal's Ctrl-C reaches drillbook, which stops it gently);
        # the workers join that group, so that stopping the group stops them all.
        with open(out_dir / "locust.stdout.log", "wb") as console:
            self.process = subprocess.Popen(locust_command(options, locustfile, out_dir, port), env=env,
                                            stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                            process_group=0, preexec_fn=die_with_parent(signal.SIGTERM))
        self.workers: list[subprocess.Popen[bytes]] = []
        # Workers get no output folder: they send their lines to the master (drillbook.loadkit).
        worker_env = {k: v for k, v in env.items() if k != "DRILLBOOK_LOAD_OUT"}
        for index in range(0 if options.remote_workers else options.workers):
            assert port is not None
            with open(out_dir / f"locust-worker-{index}.stdout.log", "wb") as console:
                self.workers.append(subprocess.Popen(worker_command(locustfile, out_dir, port, index), env=worker_env,
                                                     stdin=subprocess.DEVNULL, stdout=console,
                                                     stderr=subprocess.STDOUT, process_group=self.process.pid,
                                                     preexec_fn=die_with_parent(signal.SIGTERM)))
        self.ledger = ledger
        self.entry = ledger.started("locust", self.process.pid, str(out_dir)) if ledger else None

    def _forget(self, how: str) -> None:
        if self.ledger is not None and self.entry is not None:
            self.ledger.stopped(self.entry, how)
            self.entry = None

    def wait_until_flowing(self, timeout_s: float = 60.0) -> bool:
        """Block until the first requests show in the request log (Locust can take seconds to start)."""
        deadline = time.time() + timeout_s
        while time.time() < deadline and self.process.poll() is None:
            if any(path.stat().st_size > 0 for path in self.out_dir.glob("requests-*.csv")):
                return True
            time.sleep(0.1)
        return False

    def stop(self, grace_s: float = 10.0) -> None:
        """End the run before its time (SIGTERM lets Locust stop its users), then make sure the
        whole process group is gone."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(grace_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        _kill_group(self.process)
        self._forget("stopped early")

    def wait(self, progress: Callable[[float, float], None] | None = None) -> LoadResult:
        overran = interrupted = False
        try:
            while self.process.poll() is None:
                if time.time() - self.started > self.bound:
                    overran = True
                    break
                if progress is not None:
                    progress(time.time() - self.started, self.options.run_time_s)
                time.sleep(0.1)
        except BaseException:  # Ctrl-C, SIGTERM: the master and its workers are told to stop now
            interrupted = True
            raise
        finally:
            if interrupted:  # waiting for workers whose master still runs took the whole stop timeout + 10 s
                self.stop(grace_s=INTERRUPT_GRACE_S)
            elif not overran:  # workers quit when their master does, after writing their last receipts
                deadline = time.time() + self.options.stop_timeout_s + 10
                while any(worker.poll() is None for worker in self.workers) and time.time() < deadline:
                    time.sleep(0.1)
            _kill_group(self.process)  # always: nothing Locust started outlives the run
            self._forget("finished")
        wall = time.time() - self.started
        if overran:
            raise LoadRunOverran(f"locust ran past its bound of {self.bound:.0f}s and was killed with its children; "
                                 f"see {self.out_dir / 'locust.log'}")
        return collect(self.out_dir, self.process.returncode, wall)


def start_load(options: LoadOptions, locustfile: Path, tenant_keys: dict[str, str], out_dir: Path,
               ledger: ProcessLedger | None = None) -> LoadRun:
    """Start Locust without waiting (for load that must run while something else happens)."""
    return LoadRun(options, locustfile, tenant_keys, out_dir, ledger)


def run_load(options: LoadOptions, locustfile: Path, tenant_keys: dict[str, str], out_dir: Path,
             progress: Callable[[float, float], None] | None = None, ledger: ProcessLedger | None = None) -> LoadResult:
    """Run Locust within its bound and collect everything it wrote into out_dir."""
    return start_load(options, locustfile, tenant_keys, out_dir, ledger).wait(progress)


def collect(out_dir: Path, exit_code: int | None, wall_s: float) -> LoadResult:
    stats, seconds = read_stats(out_dir / "locust.json")
    log = read_request_log(sorted(out_dir.glob("requests-*.csv")))
    if len(log):  # the log has every request; Locust's aggregates can miss some (see the module's docstring)
        stats = stats_from_log(log, stats)
        if set(stats["name"]) == set(log["name"]):
            seconds = seconds_from_log(log)
    else:
        stats = stats.assign(locust_requests=stats["requests"])
    per_second = seconds.join(latency_per_second(log), how="outer").fillna({"requests": 0, "failures": 0})
    if len(per_second):
        per_second.index = pd.to_datetime(per_second.index, unit="s", utc=True)
        per_second.index.name = "second"
    run_end = float(log["t"].max()) + 1 if len(log) else time.time()
    phases = read_phases(out_dir / "phases.jsonl", run_end)
    receipts = read_receipts(sorted(out_dir.glob("receipts-*.jsonl")))
    files = sorted(p for p in out_dir.iterdir() if p.is_file())
    return LoadResult(out_dir, exit_code, wall_s, stats, per_second, log, phases, receipts, files)
