"""How a code sandbox is walled in: bubblewrap for the namespaces, cgroups for the limits.

We use Debian's bubblewrap (`bwrap`) rather than util-linux `unshare` and our own mounts: it is
the tool Flatpak builds on, kept and audited for exactly this, it makes the read-only root, the
one writable bind and the fresh /proc and /dev in one call, and it dies with its parent
(--die-with-parent) so a sandbox never outlives the service that started it. What bwrap does not
do, the limits, is done with the kernel's cgroups: memory, process count and CPU, in a group per
sandbox under the service's own (cgroup v1 controllers, or the v2 unified hierarchy).

A sandbox gets new user, PID, mount, network, IPC, UTS and cgroup namespaces (its network holds
only its own loopback: no route anywhere, not even to the platform's ports on this machine), runs
as the unprivileged user `nobody` when the platform runs as root, sees /usr read-only and its
workspace read-write at /workspace and nothing else of the machine, and starts with an empty
environment (no token, no key, no variable of the platform's).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

BWRAP = "bwrap"
NOBODY = 65534
WORKSPACE = "/workspace"
INIT_INSIDE = "/opt/codebox/init.py"
PYTHON_INSIDE = "/usr/bin/python3"
PR_SET_PDEATHSIG = 1
CGROUP_ROOT = Path("/sys/fs/cgroup")


def live_folder(record: Path) -> Path:
    """A folder for running sandboxes that `nobody` can pass through (0711, under the system's
    temporary folder: a state folder under /root could not be bound by an unprivileged bwrap),
    holding a copy of the init program. The one a killed service left (named in record) goes first."""
    import tempfile

    from drillbook.sandbox import codebox_init

    try:
        shutil.rmtree(record.read_text().strip(), ignore_errors=True)
    except OSError:
        pass
    folder = Path(tempfile.mkdtemp(prefix="drillbook-codebox-"))
    folder.chmod(0o711)
    init = folder / "init.py"
    shutil.copyfile(codebox_init.__file__, init)
    init.chmod(0o644)
    record.write_text(str(folder))
    return folder


def bwrap_path() -> str | None:
    return shutil.which(BWRAP)


def sandbox_argv(workspace: Path, init: Path) -> list[str]:
    """The bwrap command line of one sandbox whose init program is init (run with /usr's Python)."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise FileNotFoundError("bubblewrap (bwrap) is not installed: code sandboxes need it (apt install bubblewrap)")
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", WORKSPACE, "--hostname", "codebox",
            "--ro-bind", "/usr", "/usr"]
    for link, target in (("/bin", "usr/bin"), ("/lib", "usr/lib"), ("/lib64", "usr/lib64"), ("/sbin", "usr/sbin")):
        if Path(link).is_symlink():
            argv += ["--symlink", target, link]
        elif Path(link).is_dir():
            argv += ["--ro-bind", link, link]
    argv += ["--proc", "/proc", "--dev", "/dev", "--bind", str(workspace), WORKSPACE, "--chdir", WORKSPACE,
             "--ro-bind", str(init), INIT_INSIDE, "--", PYTHON_INSIDE, "-I", "-S", INIT_INSIDE]
    return argv


def plain_argv(init: Path) -> list[str]:
    """The no-isolation defect: the init program as a plain subprocess of the service (with the
    same Python a sandbox has, where there is one, so that the two differ by their walls alone)."""
    import sys

    return [PYTHON_INSIDE if Path(PYTHON_INSIDE).exists() else sys.executable, "-I", "-S", str(init)]


@dataclass
class Limits:
    memory_bytes: int
    pids: int
    cpus: float


@dataclass
class CgroupSet:
    """One sandbox's cgroups (a folder per controller, or one on v2)."""

    folders: list[Path] = field(default_factory=list)

    def attach(self, pid: int) -> None:
        for folder in self.folders:
            (folder / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        """Kill what is left in the groups, then remove them."""
        for folder in self.folders:
            try:
                for pid in (folder / "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            except OSError:
                pass
        for folder in self.folders:
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # its processes are still exiting
                    import time

                    time.sleep(0.02)


class Cgroups:
    """Where per-sandbox cgroups are made, and whether they can be: `enforced` is False (with
    `why`) when this process may not make them (not root, or a hierarchy it cannot write)."""

    def __init__(self, prefix: str = "drillbook-codebox") -> None:
        self.prefix = prefix
        self.parents: dict[str, Path] = {}
        self.version = 0
        self.why = ""
        own = self._own_paths()
        v1 = {c: CGROUP_ROOT / c / own.get(c, "").lstrip("/") for c in ("memory", "pids", "cpu")}
        if all((CGROUP_ROOT / c / "cgroup.procs").exists() for c in v1):
            self.version, self.parents = 1, {c: p / prefix for c, p in v1.items()}
        elif (CGROUP_ROOT / "cgroup.controllers").exists():
            self.version, self.parents = 2, {"unified": CGROUP_ROOT / own.get("", "").lstrip("/") / prefix}
        else:
            self.why = "no cgroup hierarchy with memory, pids and cpu controllers"
            return
        self._sweep()
        try:
            for parent in self.parents.values():
                parent.mkdir(exist_ok=True)
            if self.version == 2:
                unified = self.parents["unified"]
                (unified.parent / "cgroup.subtree_control").write_text("+memory +pids +cpu")
                (unified / "cgroup.subtree_control").write_text("+memory +pids +cpu")
        except OSError as error:
            self.why = f"cgroups cannot be made here ({error.strerror or error})"

    def _sweep(self) -> None:
        """Remove the groups of services that died without removing theirs (their pid is gone)."""
        base = self.prefix.rsplit("-", 1)[0]
        for parent in self.parents.values():
            for stale in parent.parent.glob(f"{base}-*"):
                pid = stale.name.rsplit("-", 1)[1]
                if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                    CgroupSet([p for p in stale.iterdir() if p.is_dir()]).remove()
                    try:
                        stale.rmdir()
                    except OSError:
                        pass

    def close(self) -> None:
        """Remove this service's own parent groups (its sandboxes' are gone by now)."""
        for parent in self.parents.values():
            try:
                parent.rmdir()
            except OSError:
                pass

    @property
    def enforced(self) -> bool:
        return not self.why

    @staticmethod
    def _own_paths() -> dict[str, str]:
        paths: dict[str, str] = {}
        try:
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    paths[controller] = path
        except OSError:
            pass
        return paths

    def create(self, name: str, limits: Limits) -> CgroupSet:
        if not self.enforced:
            return CgroupSet()
        made = CgroupSet()
        try:
            if self.version == 1:
                for controller, parent in self.parents.items():
                    folder = parent / name
                    folder.mkdir(exist_ok=True)
                    made.folders.append(folder)
                memory, pids, cpu = (made.folders[i] for i in range(3))
                (memory / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
                try:  # no swap beyond the limit, where swap accounting is on
                    (memory / "memory.memsw.limit_in_bytes").write_text(str(limits.memory_bytes))
                except OSError:
                    pass
                (pids / "pids.max").write_text(str(limits.pids))
                period = 100_000
                (cpu / "cpu.cfs_period_us").write_text(str(period))
                (cpu / "cpu.cfs_quota_us").write_text(str(int(limits.cpus * period)))
            else:
                folder = self.parents["unified"] / name
                folder.mkdir(exist_ok=True)
                made.folders.append(folder)
                (folder / "memory.max").write_text(str(limits.memory_bytes))
                try:
                    (folder / "memory.swap.max").write_text("0")
                except OSError:
                    pass
                (folder / "pids.max").write_text(str(limits.pids))
                (folder / "cpu.max").write_text(f"{int(limits.cpus * 100_000)} 100000")
        except OSError:
            made.remove()
            raise
        return made


def preexec(groups: CgroupSet, drop_to_nobody: bool) -> Callable[[], None]:
    """Runs in the child before exec: join the sandbox's cgroups (while still allowed to), become
    nobody when root, then ask for SIGKILL when the service dies (a change of user clears that,
    so it comes last)."""

    def run() -> None:
        for folder in groups.folders:
            with open(folder / "cgroup.procs", "w") as procs:
                procs.write(str(os.getpid()))
        if drop_to_nobody:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    return run
