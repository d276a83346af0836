"""deploy/: every manifest kustomize would apply validates against current Kubernetes schemas
(strict: an unknown field is an error), and the shape the issue asks for is there."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.helpers import REPOSITORY


SCHEMA_VERSION = "1.30.0"


def kustomized(folder: Path) -> list[dict]:
    """The documents a kustomization lists, following nested kustomizations (resources only)."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources"}, "only plain resources are used"
    documents = []
    for entry in kustomization["resources"]:
        path = folder / entry
        if path.is_dir():
            documents += kustomized(path)
        else:
            documents += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return documents


DOCUMENTS = kustomized(REPOSITORY / "deploy")


def by_kind(kind: str) -> list[dict]:
    return [d for d in DOCUMENTS if d["kind"] == kind]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: f"{d['kind']}/{d['metadata'].get('namespace', '-')}/"
                                                             f"{d['metadata']['name']}")
def test_every_manifest_validates_against_current_schemas(document):
    kubernetes_validate.validate(document, SCHEMA_VERSION, strict=True)


def test_a_wrong_field_is_caught_by_the_same_validation():
    broken = yaml.safe_load(yaml.safe_dump(by_kind("Deployment")[0]))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, SCHEMA_VERSION, strict=True)


def test_every_container_has_requests_limits_and_platform_pods_a_readiness_probe():
    for workload in by_kind("Deployment") + by_kind("StatefulSet"):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            assert container["resources"]["requests"] and container["resources"]["limits"], workload["metadata"]
            if workload["metadata"]["namespace"] == "agents" and not workload["metadata"]["name"].startswith("locust-w"):
                assert "readinessProbe" in container, workload["metadata"]["name"]


def test_the_platform_has_a_pdb_gpu_quota_and_a_network_policy_per_tenant():
    assert [p["spec"]["selector"]["matchLabels"] for p in by_kind("PodDisruptionBudget")] == [{"app": "agent"}]
    model = next(d for d in by_kind("Deployment") if d["metadata"]["name"] == "model-server")
    assert model["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    quotas = {q["metadata"]["namespace"]: q["spec"]["hard"] for q in by_kind("ResourceQuota")}
    assert all("requests.nvidia.com/gpu" in hard for hard in quotas.values())
    tenants = {n["metadata"]["name"] for n in by_kind("Namespace") if "drillbook.dev/tenant" in n["metadata"].get("labels", {})}
    assert tenants == {"tenant-a", "tenant-b"} and tenants <= set(quotas)
    assert {p["metadata"]["namespace"] for p in by_kind("NetworkPolicy")} == tenants
    assert [c["kind"] for c in by_kind("CronJob")] == ["CronJob"]
    assert {d["metadata"]["name"] for d in by_kind("Deployment")} >= {"locust-master", "locust-worker"}


def test_the_runner_is_least_privilege_and_namespace_scoped():
    from drillbook.access import declared_needs
    from drillbook.targets.kubernetes import KUBERNETES_RIGHTS

    assert not by_kind("ClusterRole") and not by_kind("ClusterRoleBinding")
    runner = {r["metadata"]["namespace"]: r for r in by_kind("Role") if r["metadata"]["name"] == "drillbook-runner"}
    assert set(runner) == {"agents", "tenant-a", "tenant-b"}

    def granted(role: dict) -> set[tuple[str, str, str]]:
        return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
                for resource in rule["resources"] for verb in rule["verbs"]}

    def needed(where: set[str]) -> set[tuple[str, str, str]]:
        return {(group, resource, verb) for _, needs, _ in declared_needs() for tier, action in needs
                if tier in where for verb, group, resource in KUBERNETES_RIGHTS.get(action, [])}

    # Exactly what the runbooks need, no more: the platform's tiers live in agents, quotas in
    # tenants, and the noisy tenant's aggressor (deploy/tenants/aggressor.yaml) in tenant-b.
    assert granted(runner["agents"]) == needed({"agent", "inference"}) | {("", "configmaps", "get")}  # the halt
    (halt_rule,) = [rule for rule in runner["agents"]["rules"] if "configmaps" in rule["resources"]]
    assert halt_rule["resourceNames"] == ["drillbook-halt"]  # that one ConfigMap, no other
    assert granted(runner["tenant-a"]) == needed({"tenants"})
    assert granted(runner["tenant-b"]) == needed({"tenants", "aggressor"})
    (aggressor,) = [d for d in by_kind("Deployment") if d["metadata"]["name"] == "aggressor"]
    assert aggressor["metadata"]["namespace"] == "tenant-b" and aggressor["spec"]["replicas"] == 0


def test_the_watchdog_may_only_read_and_patch_deployments_where_runs_scale_them():
    from drillbook.kube_leases import WATCHDOG_RIGHTS

    watchdog = {r["metadata"]["namespace"]: r for r in by_kind("Role") if r["metadata"]["name"] == "drillbook-watchdog"}
    assert set(watchdog) == {"agents", "tenant-b"}  # the platform's tiers, and the noisy tenant's aggressor
    for role in watchdog.values():
        assert {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
                for resource in rule["resources"] for verb in rule["verbs"]} == WATCHDOG_RIGHTS
    (deployment,) = [d for d in by_kind("Deployment") if d["metadata"]["name"] == "drillbook-watchdog"]
    spec = deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "drillbook-watchdog"
    args = spec["containers"][0]["args"]
    assert args[0] == "watchdog" and {args[i + 1] for i, a in enumerate(args) if a == "--namespace"} == set(watchdog)
