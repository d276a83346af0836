"""The kernel a runbook runs in: this interpreter, hermetic, over Unix sockets, and reachable by
the shutdown path.

Jupyter, IPython and matplotlib write under the run's folder, not $HOME; the kernelspec is our
own (so no other Python's `python3` kernel can stand in for this one); the kernel resolves
runbooks, experiments and profiles in the same project folder as the process that started it; and
every kernel started here is known, so that a signal can interrupt it (its experiment rolls back,
its load stops inside the cell) and a kernel still alive after a run can be killed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

KERNEL_NAME = "drillbook"
HERMETIC_DIRS = ("IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "MPLCONFIGDIR")
_LIVE: list[Any] = []  # kernel managers started in this process
KERNEL_LOG = "kernel.log"  # the kernel's stderr, in its hermetic folder; kept with the run's evidence


def _manager_class(log: Path) -> type:
    from jupyter_client.manager import AsyncKernelManager

    class RunKernelManager(AsyncKernelManager):  # type: ignore[misc]
        """A kernel manager that the shutdown path can find, whose kernel writes its own log (and
        anything its cells' processes write to the kernel's stderr) to log, not to the terminal."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            _LIVE.append(self)

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            with open(log, "ab") as stderr:  # the kernel holds its own copy of the descriptor
                await super()._async_launch_kernel(kernel_cmd, **{**kw, "stderr": stderr})

    return RunKernelManager


def _groups() -> list[int]:
    groups = []
    for manager in list(_LIVE):
        pgid = getattr(getattr(manager, "provisioner", None), "pgid", None)
        if pgid:
            groups.append(int(pgid))
    return groups


def signal_kernels(signum: int) -> bool:
    """Send signum to every kernel started here that is still running; False if there was none."""
    sent = False
    for pgid in _groups():
        try:
            os.killpg(pgid, signum)
            sent = True
        except ProcessLookupError:
            pass
    return sent


def interrupt_kernels(_signum: int) -> bool:
    """The gentle stop: SIGINT the running cell (KeyboardInterrupt; chaoslib rolls back)."""
    return signal_kernels(signal.SIGINT)


def forget_kernels() -> None:
    """Kill any kernel still alive (after an escalated stop) and forget them all."""
    signal_kernels(signal.SIGKILL)
    _LIVE.clear()


@contextmanager
def hermetic(folder: Path) -> Iterator[dict[str, Any]]:
    """For the duration: the environment the kernel inherits points into folder; yields papermill's
    keyword arguments that select the kernel. The kernel's stderr goes to folder/KERNEL_LOG."""
    from traitlets.config import Config

    from drillbook.config import ENV_HOME, project_dir

    overrides = {name: str(folder / name.lower()) for name in HERMETIC_DIRS}
    overrides[ENV_HOME] = str(project_dir())
    saved = {name: os.environ.get(name) for name in overrides}
    spec = folder / "jupyter_data_dir" / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python {sys.version_info.major}.{sys.version_info.minor} (drillbook)",
        "language": "python"}))
    kernel = Config()
    kernel.KernelManager.transport = "ipc"
    kernel.KernelManager.ip = str(folder / "kernel")  # sockets kernel-1..5; short: AF_UNIX paths stop at 107
    try:
        for name, value in overrides.items():
            if name in HERMETIC_DIRS:
                Path(value).mkdir(parents=True, exist_ok=True)
            os.environ[name] = value
        yield {"kernel_name": KERNEL_NAME, "config": kernel, "kernel_manager_class": _manager_class(folder / KERNEL_LOG)}
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
