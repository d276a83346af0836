"""Bring a sandbox up, find a running one, and bring it down leaving no process behind.

One sandbox per state directory: the supervisor holds an exclusive lock on ``sandbox.lock``
for as long as it lives, so a second `up` is refused and `down` knows when it is gone.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from drillbook.config import SandboxConfig
from drillbook.errors import PortInUse, SandboxAlreadyRunning, SandboxNotRunning, SandboxStartFailed
from drillbook.polling import wait_until
from drillbook.ports import free_port
from drillbook.sandbox.client import ControlClient
from drillbook.sandbox.runtime import Runtime
from drillbook.sandbox.store import PostgresStore

Progress = Callable[[str], None]
STARTUP_MARGIN_S = 45.0


def _quiet(_: str) -> None:
    pass


@dataclass
class SandboxHandle:
    """A running sandbox as seen from outside: where it is and the secrets to use it."""

    runtime: Runtime
    pid: int
    control_url: str
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def state_dir(self) -> Path:
        return self.runtime.state_dir

    @property
    def gateway_url(self) -> str:
        return self.runtime.gateway_url

    @property
    def tenant_keys(self) -> dict[str, str]:
        return dict(self.runtime.tenant_keys)

    def control(self) -> ControlClient:
        return ControlClient(self.control_url, self.runtime.control_token)


def _lock_path(state_dir: Path) -> Path:
    return state_dir / "sandbox.lock"


def _try_lock(state_dir: Path) -> int | None:
    """An fd holding the sandbox lock, or None when a supervisor holds it. The state folder is
    made for this user only (0700) when it is made here: it holds the tenant keys, the store and
    its backups (a folder the user made is left as it is; the files are 0600 in any case)."""
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(_lock_path(state_dir), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def is_running(state_dir: Path) -> bool:
    if not _lock_path(state_dir).exists():
        return False
    fd = _try_lock(state_dir)
    if fd is None:
        return True
    os.close(fd)
    return False


def find(state_dir: Path) -> SandboxHandle | None:
    """The sandbox running on this state directory, if any."""
    if not is_running(state_dir):
        return None
    info_path = state_dir / "sandbox.json"  # missing while the supervisor still starts its control API
    wait_until(lambda: info_path.exists() or not is_running(state_dir), 10, 0.05)
    if not info_path.exists():
        return None
    info = json.loads(info_path.read_text())
    return SandboxHandle(Runtime.read(state_dir / "runtime.json"), info["pid"], info["control_url"])


def require(state_dir: Path) -> SandboxHandle:
    handle = find(state_dir)
    if handle is None:
        raise SandboxNotRunning(f"no sandbox is running on {state_dir}; start one with `drillbook sandbox up`")
    return handle


def check_port_free(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise PortInUse(f"port {port} on 127.0.0.1 is already in use; pick another with --gateway-port") from None




def _clear(state_dir: Path) -> None:
    for name in ("store", "backups", "logs"):
        shutil.rmtree(state_dir / name, ignore_errors=True)
    for name in ("events.jsonl", "sandbox.json", "runtime.json"):
        (state_dir / name).unlink(missing_ok=True)


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def start(config: SandboxConfig, state_dir: Path, progress: Progress = _quiet) -> SandboxHandle:
    """Start the supervisor and return once every service has its replicas ready.

    Input is checked before anything starts: a busy gateway port, an unreachable PostgreSQL
    DSN or a sandbox already running here are refused with InvalidInput.
    """
    if config.gateway_port:
        check_port_free(config.gateway_port)
    if config.store == "postgres":
        assert config.dsn is not None
        probe = PostgresStore(config.dsn)
        probe.check_reachable()
        probe.close()
    lock_fd = _try_lock(state_dir)
    if lock_fd is None:
        running = find(state_dir)
        where = f" (supervisor pid {running.pid}, gateway {running.gateway_url})" if running else ""
        raise SandboxAlreadyRunning(f"a sandbox is already running on {state_dir}{where}; "
                                    "run `drillbook sandbox down` first")
    try:
        _clear(state_dir)
        runtime = Runtime.create(config, state_dir, config.gateway_port or free_port())
        runtime.write()
        runtime.logs_dir.mkdir(parents=True, exist_ok=True)
        supervisor_log = runtime.logs_dir / "supervisor.log"
        with open(supervisor_log, "ab") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "drillbook.sandbox.supervisor", "--runtime", str(runtime.runtime_file)],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                start_new_session=True, pass_fds=(lock_fd,),
            )
    finally:
        os.close(lock_fd)  # the supervisor holds the lock from here on
    progress(f"supervisor started (pid {process.pid})")
    try:
        return _await_ready(runtime, process, progress)
    except BaseException:
        _terminate(process)
        raise


def _await_ready(runtime: Runtime, process: subprocess.Popen[bytes], progress: Progress) -> SandboxHandle:
    config = runtime.config
    deadline = time.monotonic() + STARTUP_MARGIN_S + config.effective_model_load_delay_s
    info_path = runtime.state_dir / "sandbox.json"
    supervisor_log = runtime.logs_dir / "supervisor.log"
    while not info_path.exists():
        if process.poll() is not None:
            raise SandboxStartFailed(f"supervisor exited with {process.returncode}: {_log_tail(supervisor_log)}")
        if time.monotonic() > deadline:
            raise SandboxStartFailed(f"supervisor did not start its control API; see {supervisor_log}")
        time.sleep(0.02)
    info = json.loads(info_path.read_text())
    handle = SandboxHandle(runtime, info["pid"], info["control_url"], process)
    reported: set[str] = set()
    with handle.control() as control:
        while True:
            if process.poll() is not None:
                raise SandboxStartFailed(f"supervisor exited with {process.returncode}: {_log_tail(supervisor_log)}")
            services = control.status()["services"]
            waiting = {name: s for name, s in services.items() if s["ready"] < s["desired"]}
            for name, service in services.items():
                if name not in waiting and name not in reported:
                    reported.add(name)
                    progress(f"{name}: {service['ready']}/{service['desired']} ready")
            if not waiting:
                return handle
            if time.monotonic() > deadline:
                name, service = next(iter(waiting.items()))
                replica = service["replicas"][0]["id"] if service["replicas"] else name
                raise SandboxStartFailed(
                    f"{name}: {service['ready']} of {service['desired']} replicas ready in time; "
                    f"log: {runtime.logs_dir / (replica + '.log')}: {_log_tail(runtime.logs_dir / (replica + '.log'), 2)}")
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
        return state not in {"Z", "X"}
    except (FileNotFoundError, IndexError):
        return False


def _is_ours(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"drillbook.sandbox." in handle.read()
    except FileNotFoundError:
        return False


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class StopReport:
    supervisor_pid: int
    replica_pids: list[int]
    forced: list[int]


def stop(state_dir: Path, timeout: float = 20.0, handle: SandboxHandle | None = None) -> StopReport:
    """Stop the sandbox on state_dir and every process it started; raises SandboxNotRunning if none."""
    handle = handle or require(state_dir)
    pids: list[int] = []
    with handle.control() as control:
        try:
            status = control.status()
            pids = [r["pid"] for s in status["services"].values() for r in s["replicas"] if r["pid"]]
            control.shutdown()
        except Exception:  # noqa: BLE001 - a wedged control API still gets stopped by signal below
            pass
    forced: list[int] = []
    deadline = time.monotonic() + timeout
    while is_running(state_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    if is_running(state_dir) and _alive(handle.pid) and _is_ours(handle.pid):
        os.kill(handle.pid, signal.SIGKILL)  # its children die with it (PR_SET_PDEATHSIG)
        forced.append(handle.pid)
    if handle.process is not None:
        handle.process.wait(10)
    for pid in pids:
        if _alive(pid) and _is_ours(pid):
            os.kill(pid, signal.SIGKILL)
            forced.append(pid)
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in [handle.pid, *pids]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return StopReport(handle.pid, pids, forced)


def leftover_processes(report: StopReport) -> list[int]:
    """PIDs from a stop that still run (should always be empty)."""
    return [pid for pid in [report.supervisor_pid, *report.replica_pids] if _alive(pid) and _is_ours(pid)]
