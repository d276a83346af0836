"""What a runbook notebook calls: begin a run, run experiments, record values, judge SLOs, finish.

Every recorded value is displayed as a custom MIME bundle (with a text/plain fallback), so the
executed notebook carries it and tests and reports can read it back with nbformat. Files go to
the run's work folder (plots/, chaos/, load/, summary.json), which `drillbook run` seals into
the evidence bundle. Events and recorded values are appended to timeline.jsonl and
records.jsonl as they happen, so a run stopped halfway still leaves what it had measured.
Notebooks never import locust.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drillbook import jsonl
from drillbook.timeline import TIMELINE, Timeline, written_to
from drillbook.errors import LANDING_MARK
from drillbook.evidence.summary import RunSummary, SloCheck
from drillbook.measure import Judgement
from drillbook.measure import check as slo_check
from drillbook.processes import PROCESSES

if TYPE_CHECKING:
    from drillbook.profile import LoadedProfile
    from drillbook.targets import Target

RECORD_MIME = "application/vnd.drillbook.record+json"
RECORDS = "records.jsonl"
REASON_MAX = 200  # a reason is one line; details go to the evidence


def _display(kind: str, payload: dict[str, Any], text: str) -> None:
    try:
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython comes with the kernel
        return
    display({RECORD_MIME: {"kind": kind, **payload}, "text/plain": text}, raw=True)


class Run:
    """One execution of a runbook against a target."""

    def __init__(self, runbook: str, control: str, profile: "LoadedProfile", parameters: dict[str, Any],
                 work_dir: Path, state_dir: Path) -> None:
        self.runbook, self.control = runbook, control
        self.profile = profile
        self.target = profile.name
        self.parameters = parameters
        self.work_dir = work_dir
        self.state_dir = state_dir
        self.metrics: dict[str, Any] = {}
        self.checks: list[SloCheck] = []
        self.timeline = Timeline(written_to(work_dir / TIMELINE))
        self.chaos_runs = 0
        self.experiment_problems: list[str] = []
        self.unjudgeable: list[str] = []
        self._workload: Target | None = None
        self.started_at = time.time()
        (work_dir / "plots").mkdir(parents=True, exist_ok=True)
        self.event("run_started", runbook=runbook, target=self.target, target_kind=profile.kind,
                   parameters=self.parameters)

    @classmethod
    def begin(cls, runbook: str, control: str, target: str = "sandbox", parameters: dict[str, Any] | None = None,
              work_dir: str = "", state_dir: str = "") -> "Run":
        """target: a profile name from targets/ or a path to a profile."""
        from drillbook.profile import load_profile

        profile = load_profile(target)
        work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix=f"drillbook-{runbook}-"))
        return cls(runbook, control, profile, dict(parameters or {}), work,
                   Path(state_dir) if state_dir else profile.state_dir())

    # -- target ------------------------------------------------------------------------------
    def workload(self) -> Target:
        """Where this run acts, as the profile describes it."""
        if self._workload is None:
            from drillbook.targets import target_for

            self._workload = target_for(self.profile, self.state_dir)
        return self._workload

    def target_configuration(self) -> dict[str, Any]:
        from drillbook.chaos.runner import target_configuration

        return target_configuration(self.profile, self.state_dir)

    def gateway(self) -> tuple[str, dict[str, str]]:
        return self.workload().gateway()

    def audit_delivery(self, receipts: list[Any]) -> Any:
        """The delivery audit with the profile's verifier (not verifiable when it names none)."""
        from drillbook.delivery import audit_delivery, open_verifier

        gateway, keys = self.gateway()
        with open_verifier(self.profile, gateway, keys) as verifier:
            report = audit_delivery(receipts, verifier)
        if not report.verifiable:
            self.record("delivery_verifiable", False)
        return report

    def model_metrics(self) -> dict[str, dict[str, float]]:
        """Per tenant, summed over inference replicas: GPU-seconds and queue-wait sum and count,
        where the target offers them (TenantMetrics); empty elsewhere."""
        from drillbook.targets.capabilities import TenantMetrics

        workload = self.workload()
        return workload.tenant_metrics() if isinstance(workload, TenantMetrics) else {}

    def start_load(self, profile: str, users: int, duration_s: float, settings: dict[str, str] | None = None,
                   workers: int = 0) -> Any:
        """Start Locust (a subprocess, never imported here; with workers, a master and that many
        workers); its files go under load/.

        The target profile's own locustfile, when it names one, replaces the load profile.
        """
        from drillbook.config import LoadOptions
        from drillbook.load import api_env, locustfile_for, profile_env, start_load

        gateway, keys = self.gateway()
        locustfile = self.profile.locustfile() or locustfile_for(profile)
        options = LoadOptions(host=gateway, users=users, spawn_rate=max(users, 1) * 5, run_time_s=duration_s,
                              stop_timeout_s=5, workers=workers, env={**profile_env(settings or {}, duration_s),
                                                     **api_env(self.profile.spec.api)})
        from drillbook.processes import ProcessLedger

        self.event("load_started", profile=locustfile.stem, users=users, duration_s=duration_s, workers=workers)
        return start_load(options, locustfile, keys, self.work_dir / "load", ProcessLedger(self.state_dir / PROCESSES))

    def target_events(self, since: float = 0.0) -> list[dict[str, Any]]:
        """The workload's replica lifecycle events since a moment (empty where it keeps none)."""
        return [e for e in self.workload().events() if e["t"] >= since]

    def on_call(self, operator: str, incident: str) -> None:
        """Record who runs this on-call runbook and for which incident (kept in the evidence)."""
        self.record("operator", operator)
        self.record("incident", incident or "none")
        self.event("on_call", operator=operator, incident=incident)

    # -- recording ---------------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> None:
        self.timeline.add(kind, **fields)

    def record(self, name: str, value: Any, unit: str = "") -> Any:
        """Keep a measured value; it is shown in the notebook and lands in summary.json."""
        self.metrics[name] = value
        jsonl.append(self.work_dir / RECORDS, {"record": name, "value": value, "unit": unit})
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        _display("record", {"name": name, "value": value, "unit": unit}, f"{name} = {shown}{unit}")
        return value

    def check(self, name: str, value: float | None, comparison: str, threshold: float, unit: str = "",
              missing: str = "") -> SloCheck:
        """Judge a value against an SLO; unmeasured values fail, with missing as their reason."""
        return self._keep_check(slo_check(name, value, comparison, threshold, unit, missing))

    def keep(self, judgement: "Judgement") -> "Judgement":
        """Keep what a drill's judge said: its checks, in order, and why nothing could be judged."""
        if judgement.cannot_judge:
            self.cannot_judge(judgement.cannot_judge)
        for judged in judgement.checks:
            self._keep_check(judged)
        return judgement

    def _keep_check(self, judged: SloCheck) -> SloCheck:
        self.checks.append(judged)
        jsonl.append(self.work_dir / RECORDS, {"check": judged.model_dump()})
        _display("check", {**judged.model_dump(), "passed": judged.passed}, judged.describe())
        return judged

    def cannot_judge(self, reason: str, unless_failed: bool = False) -> None:
        """The drill cannot be judged (a fault not seen to land): the verdict is ERROR with this
        reason, whatever the checks say. unless_failed: only one figure could not be judged (a
        run too short to see a recovery), so a check that failed on a measured value still FAILs."""
        reason = reason if len(reason) <= REASON_MAX else reason[:REASON_MAX - 1] + "…"
        kept = self.experiment_problems if unless_failed else self.unjudgeable
        if reason not in kept:
            kept.append(reason)
            self.event("cannot_judge", reason=reason)

    def chaos(self, experiment: str, **variables: Any) -> Any:
        """Run one experiment on the target (rollbacks always); its files go under chaos/."""
        from drillbook.chaos import run as run_experiment

        self.chaos_runs += 1
        run_dir = self.work_dir / "chaos" / f"{self.chaos_runs:02d}-{experiment}"
        self.event("experiment_started", experiment=experiment, variables=variables)
        try:
            result = run_experiment(experiment, self.target_configuration(), run_dir, variables,
                                    target=self.workload())
        except KeyboardInterrupt:  # its rollbacks ran; keep what it did in the run's timeline
            self.timeline.merge(jsonl.read(run_dir / TIMELINE), experiment=experiment)
            self.event("experiment_interrupted", experiment=experiment)
            raise
        self.timeline.merge(result.timeline, experiment=experiment)
        self.event("experiment_finished", experiment=experiment, verdict=result.verdict)
        for reason in result.reasons:  # a fault not seen to land: nothing of this drill can be judged
            if reason.startswith(LANDING_MARK):
                self.cannot_judge(reason)
        if result.verdict in ("ERROR", "ABORTED"):  # the run cannot judge what did not happen
            self.experiment_problems.append(
                f"experiment {experiment} {result.verdict}: {'; '.join(result.reasons) or 'see its journal'}")
        return result

    def save_plot(self, name: str, figure: Any) -> Path:
        from drillbook.plots import pyplot

        path = self.work_dir / "plots" / f"{name}.png"
        figure.savefig(path, dpi=100, bbox_inches="tight")
        pyplot().close(figure)  # a kernel runs many drills; figures are kept only as files
        return path

    def promql_checks(self) -> None:
        """The profile's PromQL SLOs for this runbook (drillbook.promql), asked now over the run's
        length; each answer (query as sent, value, time, or why there is none) is kept as a record."""
        from drillbook import promql

        spec = self.profile.spec.prometheus
        slos = spec.slos_for(self.runbook) if spec is not None else []
        if spec is None or not slos:
            return
        if spec.settle_s:
            time.sleep(spec.settle_s)
        now = time.time()
        for slo in slos:
            answer = promql.instant(spec.url, promql.render(slo.query, now - self.started_at), now, spec.timeout_s)
            self.record(f"promql {slo.name}", answer.record())
            self.check(slo.name, answer.value, slo.comparison, slo.threshold, slo.unit,
                       missing=f"{answer.note} (PromQL {answer.query})")

    def finish(self, reason: str = "") -> RunSummary:
        """Ask the profile's PromQL SLOs, judge all checks into a verdict (ERROR when an experiment
        errored or was aborted and no check failed on a measured value) and write summary.json."""
        self.promql_checks()
        summary = RunSummary.judge(self.runbook, self.control, self.metrics, self.checks, reason=reason,
                                   errors=self.experiment_problems, unjudgeable=self.unjudgeable)
        self.event("run_finished", verdict=summary.verdict)
        (self.work_dir / "summary.json").write_text(json.dumps(summary.to_json(), indent=2, default=str))
        _display("verdict", {"verdict": summary.verdict}, f"verdict: {summary.verdict}")
        return summary


def drill(runbook: str, target: str = "sandbox", work_dir: str = "", state_dir: str = "", **values: Any) -> Run:
    """Begin a run of a declared scenario and run its drill: the control, the parameter limits
    and the drill function all come from its declaration (drillbook.scenarios). The notebook
    passes its parameters cell by name; the validated values are kept in the run's timeline
    (run_started)."""
    from drillbook.scenarios import scenario

    declared = scenario(runbook)
    if declared is None or declared.drill is None:
        raise ValueError(f"{runbook} is not a declared drill; a runbook of your own calls Run.begin and its own steps")
    parameters = declared.validate(values).model_dump()
    run = Run.begin(runbook, declared.control, target, parameters, work_dir, state_dir)
    declared.drill_function()(run, **parameters)
    return run


def recorded(notebook_path: Path) -> dict[str, Any]:
    """Read back what an executed notebook recorded: values, checks and the verdict."""
    import nbformat

    notebook = nbformat.read(str(notebook_path), as_version=4)
    found: dict[str, Any] = {"values": {}, "checks": [], "verdict": None}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {}).get(RECORD_MIME)
            if not data:
                continue
            if data["kind"] == "record":
                found["values"][data["name"]] = data["value"]
            elif data["kind"] == "check":
                found["checks"].append(data)
            elif data["kind"] == "verdict":
                found["verdict"] = data["verdict"]
    return found
