"""Enforced policies on a living cluster (issue: placement tenants cannot escape).

In a namespace an Enforced policy puts on pool `general` (a node labelled here `placer-e2e-pool=general`)
with only the `dedicated=gpu` toleration allowed:
- the controller labels the namespace `placer.dev/enforce=true`, so the fail-closed webhook entry serves it;
- a compliant pod is admitted and placed on the pool;
- a pod or a Deployment with its own conflicting nodeSelector, a pod with another toleration and a pod naming
  its node are refused (HTTP 403) with the policy, rule, field, wanted and found;
- the opt-out label `placer.dev/inject: disabled` exempts nothing;
- the same pod under an Advisory policy is admitted with its value kept and a warning (kubectl prints it);
- issue 48's escapes, each refused or placed: Placer's marks and a controller of one's own, a Pod update
  that tolerates every taint, a suspended Job moved to another pool, a template naming a node, a rule that
  cannot be evaluated; an Enforced policy without a namespaceSelector or with an objectSelector exemption is
  refused by the validating webhook; an exempt user's Deployment gets its pods from the ReplicaSet
  controller (through Placer's seal) while a tenant's edit of it and a copy of its seal are refused.

Needs no feature gate (admission webhooks and warnings are GA). Needs one untainted schedulable node (it gets
the label `placer-e2e-pool=general` for the test and loses it after) and `kubectl` on PATH for the warning.
"""

import contextlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.harness import DOCS, Cluster, wait_until
from tests.conftest import KUBECONFIG_ENV
from webhook.cluster.client.api import ApiError

pytestmark = pytest.mark.cluster

POOL_KEY = "placer-e2e-pool"
ENFORCE_LABEL = "placer.dev/enforce"
GPU = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


def boundary(tenant: str, enforcement: str) -> dict[str, Any]:
    return {"enforcement": enforcement, "namespaceSelector": {"matchLabels": {"placer-e2e-tenant": tenant}},
            "rules": [{"name": "general-pool", "action": "add-node-selector", "parameters": {POOL_KEY: "general"}},
                      {"name": "only-gpu-toleration", "action": "restrict-tolerations",
                       "parameters": {"allowed": [GPU]}}]}


def pod(name: str, spec: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **({"labels": labels} if labels else {})},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                     **(spec or {})}}


def deployment(name: str, template_spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}}, "spec": {**pod(name)["spec"], **template_spec}}}}


@pytest.fixture
def general_node(cluster: Cluster) -> Iterator[str]:
    nodes = [node for node in cluster.api.get("/api/v1/nodes")["items"]
             if not node["spec"].get("unschedulable") and not node["spec"].get("taints")]
    if not nodes:
        pytest.fail(f"the cluster tier needs an untainted schedulable node (see {DOCS})")
    name = nodes[-1]["metadata"]["name"]
    cluster.api.merge_patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {POOL_KEY: "general"}}})
    try:
        yield name
    finally:
        with contextlib.suppress(ApiError):
            cluster.api.merge_patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {POOL_KEY: None}}})


def refused(cluster: Cluster, path: str, obj: dict[str, Any]) -> str:
    """The API server's refusal message for creating `obj` (the test fails if it is admitted)."""
    with pytest.raises(ApiError) as denial:
        cluster.api.create(path, obj)
    assert denial.value.code == 403, denial.value
    return denial.value.message


def test_an_enforced_policy_holds_the_tenant_boundary(cluster: Cluster, general_node: str) -> None:
    tenant = os.urandom(3).hex()
    namespace = cluster.namespace({"placer-e2e-tenant": tenant})
    cluster.policy(f"enforced-{tenant}", boundary(tenant, "Enforced"))
    try:
        wait_until(lambda: (cluster.api.get(f"/api/v1/namespaces/{namespace}")["metadata"].get("labels") or {})
                   .get(ENFORCE_LABEL) == "true", timeout=30, what="the controller's placer.dev/enforce label")
        pods = f"/api/v1/namespaces/{namespace}/pods"

        placed = cluster.api.create(pods, pod("compliant", {"tolerations": [GPU]}))
        assert placed["spec"]["nodeSelector"] == {POOL_KEY: "general"}
        wait_until(lambda: cluster.api.get(f"{pods}/compliant")["spec"].get("nodeName") == general_node,
                   timeout=60, what="the compliant pod scheduled on the general pool")

        own_pool = {"nodeSelector": {POOL_KEY: "shared-premium"}}
        message = refused(cluster, pods, pod("own-pool", own_pool))
        assert ('pods "own-pool" is forbidden: policy placer-e2e-enforced-' + tenant + ", rule general-pool: "
                f'spec.nodeSelector[{POOL_KEY}]: wanted "general", found "shared-premium"') in message, message

        message = refused(cluster, f"/apis/apps/v1/namespaces/{namespace}/deployments",
                          deployment("own-pool", own_pool))
        assert f'spec.template.spec.nodeSelector[{POOL_KEY}]: wanted "general"' in message, message

        other = {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}
        message = refused(cluster, pods, pod("other-toleration", {"tolerations": [other]}))
        assert 'spec.tolerations: wanted one of "dedicated=gpu:NoSchedule", found "dedicated=batch:NoSchedule"' \
            in message, message

        message = refused(cluster, pods, pod("own-node", {"nodeName": general_node}))
        assert f'spec.nodeName: wanted unset (the scheduler places pods), found "{general_node}"' in message

        message = refused(cluster, pods, pod("opted-out", own_pool, labels={"placer.dev/inject": "disabled"}))
        assert 'found "shared-premium"' in message, "the opt-out label exempts nothing"
    finally:
        cluster.delete_policy(f"enforced-{tenant}")


def test_the_same_pod_under_an_advisory_policy_keeps_its_value_with_a_warning(
        cluster: Cluster, tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl, "this test reads the warning as users do, from kubectl: put it on PATH"
    tenant = os.urandom(3).hex()
    namespace = cluster.namespace({"placer-e2e-tenant": tenant})
    cluster.policy(f"advisory-{tenant}", boundary(tenant, "Advisory"))
    try:
        wait_until(lambda: cluster.api.get(f"/apis/placer.dev/v1alpha1/schedulingpolicies/"
                                           f"placer-e2e-advisory-{tenant}").get("status", {}).get("conditions"),
                   timeout=30, what="the policy compiled")
        manifest = tmp_path / "pod.yaml"
        manifest.write_text(yaml.safe_dump(pod("own-pool", {"nodeSelector": {POOL_KEY: "shared-premium"}})))
        created = subprocess.run([kubectl, "--kubeconfig", os.environ[KUBECONFIG_ENV], "create", "-n", namespace,
                                  "-f", str(manifest), "--dry-run=server", "--validate=false", "-o", "yaml"],
                                 check=False, capture_output=True, text=True, timeout=60)
        assert created.returncode == 0, created.stderr
        assert yaml.safe_load(created.stdout)["spec"]["nodeSelector"] == {POOL_KEY: "shared-premium"}
        assert (f"Warning: placer: placer-e2e-advisory-{tenant}/general-pool: nodeSelector {POOL_KEY} is "
                "'shared-premium', kept (wanted 'general')") in created.stderr, created.stderr
        labels = cluster.api.get(f"/api/v1/namespaces/{namespace}")["metadata"].get("labels") or {}
        assert ENFORCE_LABEL not in labels, "an Advisory policy does not fail closed"
    finally:
        cluster.delete_policy(f"advisory-{tenant}")


def enforced_namespace(cluster: Cluster, tenant: str, **rules: Any) -> str:
    namespace = cluster.namespace({"placer-e2e-tenant": tenant})
    cluster.policy(f"enforced-{tenant}", {**boundary(tenant, "Enforced"), **rules})
    wait_until(lambda: (cluster.api.get(f"/api/v1/namespaces/{namespace}")["metadata"].get("labels") or {})
               .get(ENFORCE_LABEL) == "true", timeout=30, what="the controller's placer.dev/enforce label")
    return namespace


def test_marks_owners_updates_and_pinned_templates_no_longer_leak(cluster: Cluster, general_node: str) -> None:
    tenant = os.urandom(3).hex()
    namespace = enforced_namespace(cluster, tenant)
    try:
        pods = f"/api/v1/namespaces/{namespace}/pods"
        owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "mine", "uid": str(uuid.uuid4()), "controller": True}
        forged = pod("forged-marks", {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": POOL_KEY, "operator": "In",
                                                         "values": ["shared-premium"]}]}]}}}})
        forged["metadata"] |= {"annotations": {"placer.dev/applied": "x/general-pool"}, "ownerReferences": [owner]}
        placed = cluster.api.create(pods, forged)
        assert placed["spec"]["nodeSelector"] == {POOL_KEY: "general"}, "the marks excuse nothing: placed on general"

        replicaset = deployment("forged", {"nodeSelector": {POOL_KEY: "shared-premium"},
                                           "tolerations": [{"operator": "Exists"}]})
        replicaset["kind"] = "ReplicaSet"
        replicaset["metadata"]["ownerReferences"] = [owner]
        message = refused(cluster, f"/apis/apps/v1/namespaces/{namespace}/replicasets", replicaset)
        assert 'replicasets "forged" is forbidden' in message, message

        message = refused(cluster, f"/apis/apps/v1/namespaces/{namespace}/deployments",
                          deployment("pinned", {"nodeName": general_node}))
        assert "spec.template.spec.nodeName: wanted unset" in message, message

        stored = cluster.api.create(pods, pod("pending", {"tolerations": [GPU]}))
        every = [*stored["spec"]["tolerations"], {"operator": "Exists"}]  # an update may only add tolerations
        with pytest.raises(ApiError) as denial:
            cluster.api.merge_patch(f"{pods}/pending", {"spec": {"tolerations": every}})
        assert denial.value.code == 403 and 'found "*"' in denial.value.message, denial.value
        relabelled = cluster.api.merge_patch(f"{pods}/pending", {"metadata": {"labels": {"reviewed": "yes"}}})
        assert relabelled["metadata"]["labels"]["reviewed"] == "yes", "an update Placer does not read passes"

        jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}, "spec": {
            "suspend": True, "template": {"spec": {**pod("train")["spec"], "restartPolicy": "Never"}}}}
        created = cluster.api.create(jobs, job)
        assert created["spec"]["template"]["spec"]["nodeSelector"] == {POOL_KEY: "general"}
        with pytest.raises(ApiError) as denial:
            cluster.api.merge_patch(f"{jobs}/train", {"spec": {"template": {"spec": {
                "nodeSelector": {POOL_KEY: "shared-premium"}}}}})
        assert denial.value.code == 403 and 'jobs "train" is forbidden' in denial.value.message, denial.value
        resumed = cluster.api.merge_patch(f"{jobs}/train", {"spec": {"suspend": False}})
        assert resumed["spec"]["suspend"] is False
    finally:
        cluster.delete_policy(f"enforced-{tenant}")


def test_an_enforced_policy_that_cannot_be_evaluated_refuses(cluster: Cluster) -> None:
    tenant = os.urandom(3).hex()
    failing = {"rules": [{"name": "general-pool", "action": "add-node-selector", "parameters": {POOL_KEY: "general"},
                          "condition": "int(object.metadata.name) > 0"}]}
    namespace = enforced_namespace(cluster, tenant, **failing)
    try:
        message = refused(cluster, f"/api/v1/namespaces/{namespace}/pods", pod("web"))
        assert "an Enforced policy that cannot be evaluated refuses" in message, message
    finally:
        cluster.delete_policy(f"enforced-{tenant}")


def test_an_enforced_policy_must_name_its_namespaces_and_exempt_by_who_not_by_labels(cluster: Cluster) -> None:
    tenant = os.urandom(3).hex()
    spec = boundary(tenant, "Enforced")
    for name, broken, wanted in (
            ("everywhere", {k: v for k, v in spec.items() if k != "namespaceSelector"},
             "an Enforced policy must say which namespaces it holds"),
            ("self-exempt", {**spec, "exemptions": {"objectSelector": {"matchLabels": {"tier": "system"}}}},
             "spec.exemptions.objectSelector: removed")):
        with pytest.raises(ApiError) as denial:
            cluster.policy(f"{name}-{tenant}", broken)
        assert wanted in denial.value.message, denial.value
        cluster.delete_policy(f"{name}-{tenant}")


def kubectl_as(user: str, groups: list[str], *args: str, manifest: dict[str, Any] | None = None
               ) -> subprocess.CompletedProcess[str]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "this test acts as other users with kubectl --as: put it on PATH"
    command = [kubectl, "--kubeconfig", os.environ[KUBECONFIG_ENV], "--as", user,
               *(f"--as-group={group}" for group in groups), *args]
    if args[0] == "create":
        command.append("--validate=false")  # the object is checked by the API server, not kubectl's copy of it
    return subprocess.run(command, input=json.dumps(manifest) if manifest else None, check=False,
                          capture_output=True, text=True, timeout=60)


def test_an_exempt_users_deployment_gets_its_pods_and_a_tenant_claims_nothing(cluster: Cluster) -> None:
    """With no step but the install: Placer seals with the key it keeps itself (issue 60)."""
    tenant = os.urandom(3).hex()
    namespace = enforced_namespace(cluster, tenant, exemptions={"groups": ["placer-e2e-platform"]})
    try:
        cluster.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "edit"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "placer-e2e-platform"},
                         {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "placer-e2e-bob"}]})
        agent = deployment("agent", {"nodeSelector": {POOL_KEY: "gpu"}, "tolerations": [{"operator": "Exists"}]})
        made = kubectl_as("placer-e2e-alice", ["placer-e2e-platform"], "create", "-n", namespace, "-f", "-",
                          "-o", "json", manifest=agent)
        assert made.returncode == 0, made.stderr
        template = json.loads(made.stdout)["spec"]["template"]
        assert template["metadata"]["annotations"]["placer.dev/exempt"].startswith("v1."), "sealed"
        assert template["spec"]["nodeSelector"] == {POOL_KEY: "gpu"}, "kept for the exempt user"
        pods = f"/api/v1/namespaces/{namespace}/pods"
        wait_until(lambda: cluster.api.get(pods, {"labelSelector": "app=agent"})["items"], timeout=60,
                   what="the ReplicaSet controller's pod of the exempt user's Deployment")

        image = {"name": "main", "image": "registry.k8s.io/pause:3.9"}
        patch = {"spec": {"template": {"spec": {"containers": [image]}}}}
        changed = kubectl_as("placer-e2e-bob", [], "patch", "-n", namespace, "deployment", "agent",
                             "--type=strategic", "-p", json.dumps(patch))
        assert changed.returncode != 0 and "is forbidden" in changed.stderr, changed.stderr

        copied = pod("miner", {"nodeSelector": {POOL_KEY: "gpu"}, "tolerations": [{"operator": "Exists"}]})
        seal = template["metadata"]["annotations"]["placer.dev/exempt"]
        copied["metadata"]["annotations"] = {"placer.dev/exempt": seal}
        created = kubectl_as("placer-e2e-bob", [], "create", "-n", namespace, "-f", "-", manifest=copied)
        assert created.returncode != 0 and 'pods "miner" is forbidden' in created.stderr, created.stderr
    finally:
        cluster.delete_policy(f"enforced-{tenant}")
