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
