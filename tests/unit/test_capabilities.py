"""Which target offers which capability, and that nothing outside targets/ reaches around them."""

from __future__ import annotations

import re

from drillbook.targets.capabilities import Diagnostics, StoreCatalog, TenantLimits, TenantMetrics
from drillbook.targets.commands import CommandsTarget
from drillbook.targets.kubernetes import KubernetesTarget
from drillbook.targets.sandbox import SandboxTarget
from tests.helpers import REPOSITORY

CAPABILITIES = (TenantMetrics, TenantLimits, Diagnostics, StoreCatalog)


def offered(target: type) -> set[str]:
    return {capability.__name__ for capability in CAPABILITIES if issubclass(target, capability)}


def test_each_target_offers_what_it_can_do():
    assert offered(SandboxTarget) == {"TenantMetrics", "TenantLimits", "Diagnostics", "StoreCatalog"}
    assert offered(KubernetesTarget) == {"TenantMetrics", "TenantLimits"}
    assert offered(CommandsTarget) == set()


def test_no_code_outside_the_targets_reaches_around_them():
    reaching = re.compile(r"getattr\((self\.)?target\b|hasattr\((self\.)?(target|workload)\b|"
                          r"(target|workload)\.handle\b|replica_urls\(|"
                          r"\.kind\s*[!=]=\s*[\"'](sandbox|kubernetes|commands)[\"']")
    found = [f"{path.relative_to(REPOSITORY)}:{number}: {line.strip()}"
             for path in sorted((REPOSITORY / "lib" / "drillbook").rglob("*.py"))
             if "targets" not in path.parts and "sandbox" not in path.parts and path.name != "sandbox.py"
             and path.name != "profile.py"  # the profile's own schema: which sections each kind takes
             for number, line in enumerate(path.read_text().splitlines(), 1) if reaching.search(line)]
    assert found == []


def test_the_commands_target_docs_name_every_command_a_declared_runbook_runs():
    from drillbook.access import declared_needs
    from drillbook.targets.capabilities import STORE

    docs = (REPOSITORY / "docs" / "commands-target.md").read_text()
    for runbook, needs, _ in declared_needs():
        assert f"`{runbook}`" in docs, runbook
        for where, action in needs:
            if action in ("pods", "limit") or where in ("tenants", "sandboxes"):
                continue  # offered by no commands target: the docs say what is left empty
            field = f"workload.store.{action}" if where == STORE else f"workload.{where}.commands.{action}"
            assert f"`{field}`" in docs, f"{runbook} needs {field}"
