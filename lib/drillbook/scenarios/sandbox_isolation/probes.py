"""Escape probes, run inside a code sandbox as the session's own code (standard library only).

The drill sends this file's text with a JSON plan appended (PLAN = {...}); it prints one JSON
line per attempt: what it tried, where, "escaped" or "refused", what it saw, and when it started
and ended (epoch seconds: the sandbox shares the machine's clock). Every attempt is bounded in
count and time; every address is one of the platform's loopback ports or files, named by the
drill: nothing here looks anywhere else.
"""

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

PLAN = {}  # replaced by the drill


def attempt(name, kind, address, fn):
    started = time.time()
    try:
        escaped, detail = fn()
    except Exception as error:  # noqa: BLE001 - a refusal is an error here, named
        escaped, detail = False, f"{type(error).__name__}: {error}"
    print(json.dumps({"probe": name, "kind": kind, "address": address, "outcome": "escaped" if escaped else "refused",
                      "detail": str(detail)[:300], "started": started, "ended": time.time()}), flush=True)


def tcp(address):
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=1.0):
        return True, "connected"


def read(path):
    if os.path.isdir(path):
        names = os.listdir(path)
        return True, f"listed {len(names)} entries"
    with open(path, "rb") as handle:
        return True, f"read {len(handle.read(64))} bytes"


def write(folder):
    path = os.path.join(folder, f"drillbook-escape-{os.getpid()}-{time.time_ns()}")
    with open(path, "w") as handle:
        handle.write("escape")
    os.unlink(path)
    return True, f"wrote and removed {path}"


def secrets_in_environment():
    digests = set(PLAN.get("secret_digests", []))
    found = [name for name, value in os.environ.items() if hashlib.sha256(value.encode()).hexdigest() in digests]
    return bool(found), f"{len(found)} of {len(os.environ)} variables hold a platform secret"


def platform_processes():
    needle = ".".join(["drillbook", "sandbox", ""]).encode()  # the services' modules; not in this program's text
    seen, platform = 0, 0
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            seen += 1
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if needle in handle.read():
                        platform += 1
            except OSError:
                pass
    return platform > 0, f"{seen} processes visible, {platform} of the platform's"


def memory():
    target = int(PLAN.get("memory_mib", 1024))
    code = ("import sys\nb=[]\nfor i in range(%d):\n b.append(bytearray(16*1024*1024)); print((i+1)*16, flush=True)"
            % (target // 16))
    child = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, timeout=60)
    reached = int((child.stdout.split() or [b"0"])[-1])
    return reached >= target, f"allocated {reached} of {target} MiB (exit {child.returncode})"


def processes():
    target, children = int(PLAN.get("processes", 256)), []
    try:
        for _ in range(target):
            pid = os.fork()
            if pid == 0:
                time.sleep(5)
                os._exit(0)
            children.append(pid)
        return True, f"started {len(children)} of {target} processes"
    except OSError as error:
        return False, f"started {len(children)} of {target} processes, then {error.strerror or error}"
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass


def cpu():
    """Busy workers for a while: the CPUs they got, from their own accounting."""
    workers, seconds = int(PLAN.get("cpu_workers", 4)), float(PLAN.get("cpu_s", 3.0))
    started, children = time.monotonic(), []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                pass
            os._exit(0)
        children.append(pid)
    used = 0.0
    for pid in children:
        _, _, usage = os.wait4(pid, 0)
        used += usage.ru_utime + usage.ru_stime
    cores = used / max(1e-9, time.monotonic() - started)
    return cores > float(PLAN.get("cpu_budget", 1.0)), f"{workers} busy workers got {cores:.2f} CPUs"


def main():
    if PLAN.get("mode") == "cpu":
        attempt("CPU", "exhaust", "cpu", cpu)
        return
    for target in PLAN.get("targets", []):
        fn = {"tcp": tcp, "read": read, "write": write}[target["kind"]]
        attempt(target["name"], target["kind"], target["address"], lambda: fn(target["address"]))
    attempt("platform secrets (environment)", "read", "environ", secrets_in_environment)
    attempt("the platform's processes", "read", "/proc", platform_processes)
    attempt("memory", "exhaust", "memory", memory)
    attempt("process count", "exhaust", "pids", processes)


main()
