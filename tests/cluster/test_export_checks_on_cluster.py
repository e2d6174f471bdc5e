"""`placer export` against a living API server: the export targets the server's own version (read from
`/version`), writes `admissionregistration.k8s.io/v1` where it is served (GA and on by default from 1.36, no
feature gate needed), and what it refuses as missing from the server's CEL environment the server does not
run either, while what it exports the server takes.

Needs Kubernetes 1.34-1.37 serving MutatingAdmissionPolicies (1.34/1.35: the `MutatingAdmissionPolicy` feature
gate and `--runtime-config=admissionregistration.k8s.io/v1beta1=true`); skipped, saying so, otherwise. The
bindings select namespaces by a label of their own, so the webhook this tier also runs is not called there.
"""

import os
import shutil
import subprocess
import uuid
from typing import Any

import pytest
import yaml

from tests.cluster.harness import E2E_NAME, Cluster, wait_until
from tests.conftest import KUBECONFIG_ENV
from webhook.admission.offline import apply_manifests
from webhook.cluster.client.api import ApiError
from webhook.export.admission_policy import export_policy
from webhook.export.kubernetes_env import Kind, KubernetesCel
from webhook.export.versions import SUPPORTED, KubernetesVersion, api_version_for
from webhook.policy.compiler import PolicyCompiler

pytestmark = pytest.mark.cluster

GPU_POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: NAME}
spec:
  rules:
  - name: gpu-nodes
    condition: "pod.spec.containers.exists(c, 'nvidia.com/gpu' in c.?resources.?limits.orValue({}))"
    action: add-node-selector
    parameters: {node-pool: gpu}
  - name: gpu-taint
    condition: "pod.spec.containers.exists(c, 'nvidia.com/gpu' in c.?resources.?limits.orValue({}))"
    action: add-toleration
    parameters: {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
"""

UNGUARDED_EXTRA = "request.userInfo.extra.size() >= 0 && request.operation.size() > 0"
GUARDED_EXTRA = "(!has(request.userInfo.extra) || request.userInfo.extra.size() >= 0) && request.operation.size() > 0"
NO_EXTRA_USER = f"{E2E_NAME}-no-extra"
"""Impersonated (kubectl --as): the API server gives an impersonated user only the extra asked for, none."""

PROBES = [
    "cel.bind(n, object.metadata.name, n.size() > 1)",
    "{'a': 1, 'b': 'x'}.size() == 2",
    "'abc'.reverse() == 'cba'",
    "[2, 1, 2].distinct().size() == 2",
    "lists.range(3).size() == 3",
    "object.metadata.?labels.orValue({}).size() >= 0",
    # the types the API server declares: an optional entry counted as the type it holds, typed objects
    "{'a': dyn(1), ?'b': optional.of(['x'].filter(k, k != ''))}.size() == 2",
    "{'a': dyn(1), ?'b': optional.of(dyn(['x'].filter(k, k != '')))}.size() == 2",
    "[namespaceObject.metadata.name, object.kind].size() == 2",
    "[dyn(namespaceObject.metadata.name), object.kind].size() == 2",
    # guarded: a user without extra has no `request.userInfo.extra` key (test_an_unguarded_read_of_extra_...)
    GUARDED_EXTRA,
    "has(request.userInfo.extra) || request.userInfo.groups.size() >= 0",
]
"""Each probe is the expression of a variable of a probe policy (`probe_policy`)."""


def target_of(cluster: Cluster) -> KubernetesVersion:
    version = cluster.api.get("/version")
    found = (int(version["major"]), int("".join(ch for ch in version["minor"] if ch.isdigit())))
    if found not in SUPPORTED:
        pytest.skip(f"the export supports Kubernetes 1.34-1.37; this API server is {found[0]}.{found[1]}")
    return found


def served_api(cluster: Cluster, target: KubernetesVersion) -> str:
    api_version = api_version_for(target)
    try:
        resources = cluster.api.get(f"/apis/admissionregistration.k8s.io/{api_version}")["resources"]
    except ApiError:
        resources = []
    if not any(resource["name"] == "mutatingadmissionpolicies" for resource in resources):
        if api_version == "v1":
            pytest.fail("Kubernetes 1.36+ serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicies by default")
        pytest.skip("this API server does not serve admissionregistration.k8s.io/v1beta1 MutatingAdmissionPolicies "
                    "(enable the MutatingAdmissionPolicy feature gate)")
    return api_version


def probe_policy(api_version: str, name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": f"admissionregistration.k8s.io/{api_version}", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "variables": [{"name": "probe", "expression": expression}],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {
                "expression": "variables.probe ? [JSONPatch{op: 'add', path: '/data', value: {'probe': 'ran'}}] "
                              ": []"}}],
        },
    }


def install_probe(cluster: Cluster, api_version: str, expression: str) -> str | None:
    """The probe policy, its binding and the namespace it selects, all named alike (the name is returned);
    None when the API server refuses the policy at create (422)."""
    group = f"/apis/admissionregistration.k8s.io/{api_version}"
    marker = f"{E2E_NAME}-probe-{uuid.uuid4().hex[:6]}"
    try:
        cluster.create(f"{group}/mutatingadmissionpolicies", probe_policy(api_version, marker, expression))
    except ApiError as error:
        assert error.code == 422, error
        return None
    cluster.create(f"{group}/mutatingadmissionpolicybindings", {
        "apiVersion": f"admissionregistration.k8s.io/{api_version}", "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": marker},
        "spec": {"policyName": marker, "matchResources": {"namespaceSelector": {"matchLabels": {
            "placer-e2e-probe": marker}}}}})
    cluster.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": marker, "labels": {"placer-e2e-probe": marker}}})
    return marker


def server_runs(cluster: Cluster, api_version: str, expression: str) -> bool:
    """The API server takes the expression and evaluates it: refused at create (422), or created and then
    failing the request under failurePolicy Fail, both say no."""
    marker = install_probe(cluster, api_version, expression)
    if marker is None:
        return False
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe"}}

    def verdict() -> str | None:
        try:
            created = cluster.api.create(f"/api/v1/namespaces/{marker}/configmaps", configmap, {"dryRun": "All"})
        except ApiError:
            return "fails"
        return "runs" if (created.get("data") or {}).get("probe") == "ran" else None  # None: not in effect yet

    return bool(wait_until(verdict, timeout=30, what=f"the probe policy to act ({expression})") == "runs")


def test_an_unguarded_read_of_extra_fails_for_a_user_without_extra(cluster: Cluster) -> None:
    """The API server binds `request` converted to unstructured, and a user without extra has no `extra` key
    (CreateAdmissionRequest, staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/condition.go): the
    unguarded read the export takes (it compiles there) fails the request under failurePolicy Fail. So whether
    it runs depends on who sends the request (an x509 client certificate carries a credential id, a static
    token none), and the probes guard it."""
    api_version = served_api(cluster, target_of(cluster))
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is not on PATH: this test sends a request as another user with kubectl --as")
    assert KubernetesCel(target_of(cluster)).refusal(UNGUARDED_EXTRA, Kind.VARIABLE) is None
    marker = install_probe(cluster, api_version, UNGUARDED_EXTRA)
    assert marker is not None, "the API server refused the unguarded read at create"
    command = [kubectl, "--kubeconfig", os.environ[KUBECONFIG_ENV], "--as", NO_EXTRA_USER, "--as-group",
               "system:masters", "--namespace", marker, "create", "configmap", "probe", "--dry-run=server"]

    def refused() -> str | None:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=30)
        return done.stderr if done.returncode != 0 else None

    message = wait_until(refused, timeout=30, what="the probe policy to fail a request without extra")
    assert "no such key: extra" in message, message


@pytest.mark.parametrize("expression", PROBES)
def test_what_the_export_refuses_the_server_does_not_run(cluster: Cluster, expression: str) -> None:
    target = target_of(cluster)
    api_version = served_api(cluster, target)
    exported = KubernetesCel(target).refusal(expression, Kind.VARIABLE) is None
    assert server_runs(cluster, api_version, expression) == exported, (expression, target)


def test_gpu_to_pool_exported_for_the_servers_version_places_as_placer_apply(cluster: Cluster,
                                                                            tmp_path: Any) -> None:
    target = target_of(cluster)
    api_version = served_api(cluster, target)
    marker = f"{E2E_NAME}-gpu-{uuid.uuid4().hex[:6]}"
    text = GPU_POLICY.replace("NAME", marker)
    compiled = PolicyCompiler().compile(yaml.safe_load(text), "test")
    assert compiled.policy is not None, compiled.errors
    export = export_policy(compiled.policy, target=target)
    assert not export.refused and all(rule.written for rule in export.rules), export.rules
    policy, binding = export.objects
    assert policy["apiVersion"] == f"admissionregistration.k8s.io/{api_version}"
    binding["spec"]["matchResources"]["namespaceSelector"] = {"matchLabels": {"placer-e2e-export": marker}}
    group = f"/apis/admissionregistration.k8s.io/{api_version}"
    cluster.create(f"{group}/mutatingadmissionpolicies", policy)
    cluster.create(f"{group}/mutatingadmissionpolicybindings", binding)
    labels = {"placer-e2e-export": marker}
    namespace = f"{marker}-ns"
    cluster.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": namespace, "labels": labels}})
    (tmp_path / "policy.yaml").write_text(text)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"},
           "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    report = apply_manifests(policy_paths=[str(tmp_path / "policy.yaml")], manifest_paths=[],
                             namespace_labels=labels, objects=[("Pod", pod)], default_namespace=namespace)
    expected = report.results[0].mutated

    def admitted() -> dict[str, Any] | None:
        created = cluster.api.create(f"/api/v1/namespaces/{namespace}/pods", pod, {"dryRun": "All"})
        return created if "placer.dev/applied" in (created["metadata"].get("annotations") or {}) else None

    created = wait_until(admitted, timeout=60, what="the exported GPU policy to act on a Pod")
    assert created["spec"]["nodeSelector"] == expected["spec"]["nodeSelector"] == {"node-pool": "gpu"}
    wanted = expected["spec"]["tolerations"][-1]
    assert wanted in created["spec"]["tolerations"]
