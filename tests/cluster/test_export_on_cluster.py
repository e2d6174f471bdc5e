"""`placer export` on a living cluster: the exported MutatingAdmissionPolicy, applied to the API server, makes
the objects `placer apply` makes from the same policy (server-side dry-run creates, compared on every field
the policy writes), exported for the server's own version in the admissionregistration version it serves for
it. Needs Kubernetes 1.34-1.37 serving MutatingAdmissionPolicies (GA and on by default from 1.36; 1.34/1.35: the
MutatingAdmissionPolicy feature gate and `--runtime-config=admissionregistration.k8s.io/v1beta1=true`); skipped,
saying so, when it does not. The binding selects a namespace by a label of its own (not placer.dev/inject), so
the webhook this tier also runs is not called for it."""

import copy
import uuid
from typing import Any

import pytest
import yaml

from tests.cluster.harness import E2E_NAME, Cluster, wait_until
from tests.cluster.test_export_checks_on_cluster import served_api, target_of
from webhook.admission.offline import apply_manifests
from webhook.export.admission_policy import export_policy
from webhook.policy.compiler import PolicyCompiler

pytestmark = pytest.mark.cluster

POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: NAME}
spec:
  rules:
  - name: pool
    condition: "namespaceObject.metadata.?labels.?environment.orValue('') == 'production'"
    action: add-node-selector
    parameters: {environment: production}
  - name: dedicated
    action: add-toleration
    parameters: {key: dedicated, value: data-eng, effect: NoSchedule}
  - name: zone
    action: add-node-affinity
    parameters: {key: topology.kubernetes.io/zone, operator: In, values: "eu-west-1a,eu-west-1b"}
  - name: on-demand
    action: add-node-affinity
    parameters: {key: node.kubernetes.io/lifecycle, values: on-demand, type: preferred, weight: 80}
  - name: spread
    condition: "workload.replicas >= 2"
    action: add-topology-spread
    parameters: {topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway}
  - name: team-label
    action: add-labels
    parameters: {team: data-eng}
"""

WRITTEN = [("spec", "nodeSelector"), ("spec", "tolerations"), ("spec", "affinity"),
           ("spec", "topologySpreadConstraints"), ("metadata", "labels")]


def template_of(obj: dict[str, Any]) -> dict[str, Any]:
    return obj if obj["kind"] == "Pod" else obj["spec"]["template"]


def deployment(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                             "nodeSelectorTerms": [
                                 {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In",
                                                        "values": ["linux"]}]},
                                 {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In",
                                                        "values": ["arm64"]}]}]}}},
                         "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}}


def test_the_exported_policy_makes_what_placer_apply_makes(cluster: Cluster, tmp_path: Any) -> None:
    target = target_of(cluster)
    api_version = served_api(cluster, target)
    group = f"/apis/admissionregistration.k8s.io/{api_version}"
    marker = f"{E2E_NAME}-export-{uuid.uuid4().hex[:6]}"
    text = POLICY.replace("NAME", marker)
    compiled = PolicyCompiler().compile(yaml.safe_load(text), "test")
    assert compiled.policy is not None, compiled.errors
    export = export_policy(compiled.policy, api_version, target=target)
    assert all(rule.exported for rule in export.rules), export.rules
    policy, binding = copy.deepcopy(export.objects)
    binding["spec"]["matchResources"]["namespaceSelector"] = {"matchLabels": {"placer-e2e-export": marker}}
    cluster.create(f"{group}/mutatingadmissionpolicies", policy)
    cluster.create(f"{group}/mutatingadmissionpolicybindings", binding)
    labels = {"placer-e2e-export": marker, "environment": "production"}
    namespace = f"{marker}-ns"
    cluster.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": namespace, "labels": labels}})
    (tmp_path / "policy.yaml").write_text(text)
    for kind, path, obj in [
        ("Deployment", f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment("web")),
        ("Pod", f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo", "labels": {"app": "solo"}},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}),
    ]:
        report = apply_manifests(policy_paths=[str(tmp_path / "policy.yaml")], manifest_paths=[],
                                 namespace_labels=labels, objects=[(kind, obj)], default_namespace=namespace)
        expected = template_of(report.results[0].mutated)

        def admitted(obj: dict[str, Any] = obj, path: str = path) -> dict[str, Any] | None:
            created = template_of(cluster.api.create(path, obj, {"dryRun": "All"}))
            annotations = created["metadata"].get("annotations") or {}
            return created if "placer.dev/applied" in annotations else None

        created = wait_until(admitted, timeout=60, what=f"the exported policy to act on a {kind}")
        assert created["metadata"]["annotations"]["placer.dev/applied"] == (
            expected["metadata"]["annotations"]["placer.dev/applied"])
        for part, name in WRITTEN:
            want, got = expected[part].get(name), created[part].get(name)
            if kind == "Pod" and name == "tolerations":  # the API server adds its not-ready/unreachable ones
                assert all(toleration in got for toleration in want), (got, want)
            else:
                assert got == want, (kind, part, name)
