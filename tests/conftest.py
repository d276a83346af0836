"""Shared fixtures: real sandboxes in temporary state directories and a real PostgreSQL server.

Integration tests skip with a visible reason when a prerequisite is missing on a developer's
machine; with CI=true every skip fails the run instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from glob import glob
from pathlib import Path

import pytest

# Tests never reach a real cluster: the kubeconfig every library sees (chaostoolkit-kubernetes
# reads the path once, when the kubernetes package is first imported) is this session's own,
# written by the k8s_cluster fixture.
SESSION_KUBECONFIG = Path(tempfile.gettempdir()) / f"drillbook-k8s-{os.getpid()}" / "kubeconfig"
os.environ["KUBECONFIG"] = str(SESSION_KUBECONFIG)

# Every bundle a test's drillbook seals is signed unless the test says otherwise (tests of unsigned
# evidence drop DRILLBOOK_SIGNING_KEY or name their own key), so that the reference in-toto and
# DSSE libraries check a signed attestation of each (tests/integration/conftest.py).
if "DRILLBOOK_SIGNING_KEY" not in os.environ:
    import atexit

    from drillbook.evidence.signing import new_key  # noqa: E402

    _key_folder = tempfile.mkdtemp(prefix="drillbook-test-key-")
    atexit.register(shutil.rmtree, _key_folder, True)
    new_key(Path(_key_folder) / "signing-key.pem")
    os.environ["DRILLBOOK_SIGNING_KEY"] = str(Path(_key_folder) / "signing-key.pem")

from drillbook.config import SandboxConfig, running_in_ci  # noqa: E402
from drillbook.sandbox import launcher
from drillbook.sandbox.launcher import SandboxHandle
from tests.helpers import free_port, fresh_database


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if running_in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"skipped in CI (CI=true forbids skips): {reason}"


# Test modules that must run on one worker, because they share what is expensive or exclusive to
# start: one LiteLLM proxy and the cached Agno and LiteLLM virtual environments, one built wheel,
# one cached JUnit schema; and the Kubernetes tests, whose control planes, kubelets and pods
# are many processes each: the real node and the process kubelet's cluster side by side on two
# cores starved the cluster's pods of CPU (steady states missed before the fault). Longest
# first: each group starts as soon as the unit tests are done, so the longest does not end the
# run alone. Every other test is a work unit of its own.
SHARED_WORKER = {
    "tests/integration/test_kubernetes_node.py": "kubernetes",
    "tests/integration/test_kubernetes.py": "kubernetes",
    "tests/integration/test_kubernetes_platform.py": "kubernetes",
    "tests/integration/test_agent_stacks.py": "agent-stacks",
    "tests/integration/test_install.py": "installed-wheel",
    "tests/integration/test_junit.py": "junit-schema",
    "tests/integration/test_probe_families.py": "probe-families",  # one pristine history, one target sandbox
}
GROUP_ORDER = list(dict.fromkeys(SHARED_WORKER.values()))


def worker_group(nodeid: str) -> str | None:
    """The group whose tests share one worker, from a test's node id (its module's path)."""
    return SHARED_WORKER.get(nodeid.split("::", 1)[0])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Unit tests (no processes) run first, so a broken change fails in seconds, not after the
    integration tests. On xdist workers (`-n`), the groups that share a worker come next, longest
    first, then the rest; in one process the rest keep the order they were collected in. The
    order within each is kept, and the workers take work in this order (pytest_xdist_make_scheduler)."""
    unit = Path(__file__).resolve().parent / "unit"
    distributed = "PYTEST_XDIST_WORKER" in os.environ

    def rank(item: pytest.Item) -> tuple[int, int]:
        if unit in Path(str(item.path)).parents:
            return (0, 0)
        group = worker_group(item.nodeid) if distributed else None
        return (1, GROUP_ORDER.index(group)) if group else (2, 0)

    items.sort(key=rank)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """With `-n N` and `--dist load` (pyproject.toml's addopts), a scheduler that sends each SHARED_WORKER
    group to one worker whole and every other test on its own, in collection order. (xdist's own
    `loadgroup` marks do not group on pytest 9: it renames node ids, which pytest 9 ignores.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedWorkerScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid) or nodeid

    return SharedWorkerScheduling(config, log)


def _pg_bin() -> Path | None:
    found = sorted(glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A throwaway PostgreSQL server on 127.0.0.1; yields a base DSN without a database name."""
    configured = os.environ.get("DRILLBOOK_TEST_PG_DSN")
    if configured:
        yield configured
        return
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not installed: apt-get install postgresql")
    # Not under pytest's tmp dirs: those are private to root, and the server runs as postgres.
    root = Path(tempfile.mkdtemp(prefix="drillbook-pg-"))
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")
    port = free_port()
    for step in (
        [str(bindir / "initdb"), "-D", str(data), "-U", "drillbook", "--auth=trust", "-E", "UTF8"],
        [str(bindir / "pg_ctl"), "start", "-D", str(data), "-w", "-t", "60", "-l", str(root / "pg.log"),
         "-o", f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={sockets} "
               "-c fsync=off -c synchronous_commit=off"],
    ):
        done = subprocess.run([*as_user, *step], capture_output=True, text=True, start_new_session=True)
        if done.returncode != 0:
            pytest.fail(f"{Path(step[0]).name} failed: {done.stderr.strip() or done.stdout.strip()}")
    try:
        yield f"postgresql://drillbook@127.0.0.1:{port}"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_dsn(pg_server: str) -> str:
    """A fresh database on the test server, for one test."""
    return fresh_database(pg_server)


SandboxFactory = Callable[..., SandboxHandle]


@pytest.fixture
def sandbox_factory(tmp_path: Path) -> Iterator[SandboxFactory]:
    """Start real sandboxes with a given configuration; every one is stopped and checked for leftovers."""
    started: list[SandboxHandle] = []

    def start(**overrides: object) -> SandboxHandle:
        state = tmp_path / f"sandbox-{len(started)}"
        handle = launcher.start(SandboxConfig(**overrides), state)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        if launcher.is_running(handle.state_dir):
            report = launcher.stop(handle.state_dir, handle=handle)
            assert launcher.leftover_processes(report) == []


@pytest.fixture
def sandbox(sandbox_factory: SandboxFactory) -> SandboxHandle:
    """A healthy default sandbox with fast token streaming."""
    return sandbox_factory(tokens_per_second=0)


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[object]:
    """A real control plane (v1.20, built by tests/k8s/cluster/build.sh) with a process kubelet.

    Sets KUBECONFIG for the session (context drillbook-test). Skips with the build command
    when the binaries are not cached; in CI a skip is a failure.
    """
    import sys

    from kubernetes import config as kube_config

    from tests.k8s.cluster import controlplane
    from tests.k8s.kubelet import ProcessKubelet
    from tests.k8s.platform import reference_platform_runner

    if not controlplane.binaries_present():
        pytest.skip(f"no Kubernetes control plane in {controlplane.cache_bin()}: run tests/k8s/cluster/build.sh")
    folder = SESSION_KUBECONFIG.parent
    plane = controlplane.start(folder)
    assert plane.kubeconfig == SESSION_KUBECONFIG
    api = kube_config.new_client_from_config(str(plane.kubeconfig), context=controlplane.CONTEXT)
    runners = {"drillbook/test-http": lambda pod, address, port: [sys.executable, "-m", "http.server", str(port),
                                                                  "--bind", address],
               "drillbook/reference-platform": reference_platform_runner}
    kubelet = ProcessKubelet(api, runners=runners).start()
    plane.api = api  # type: ignore[attr-defined]
    plane.kubelet = kubelet  # type: ignore[attr-defined]
    try:
        yield plane
    finally:
        kubelet.stop()
        api.close()
        controlplane.stop(folder)
        shutil.rmtree(folder, ignore_errors=True)
