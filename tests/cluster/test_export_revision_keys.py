"""`placer export` writes the revision keys on a living cluster: the exported MutatingAdmissionPolicy, applied
to the API server, gives a DaemonSet's template and a ReplicaSet's Pod the `matchLabelKeys` `placer apply`
gives them (`controller-revision-hash`, `pod-template-hash`), on a spread and a pod anti-affinity term
without `labelSelector` (server-side dry-run creates).

Exported for the server's own version; needs it to serve MutatingAdmissionPolicies (admissionregistration.k8s.io/v1
from 1.36, v1beta1 on 1.34-1.35 with the MutatingAdmissionPolicy feature gate and --runtime-config); skipped,
saying so, when it does not. Kubernetes features on by default in every supported version: MatchLabelKeysInPodAffinity
(GA 1.33), MatchLabelKeysInPodTopologySpread (beta 1.27) and MatchLabelKeysInPodTopologySpreadSelectorMerge
(beta 1.34): kube-apiserver merges each key into the created Pod's selector as `key In [the Pod's value]`
(pkg/registry/core/pod/strategy.go, PrepareForCreate: mutatePodAffinity, mutateTopologySpreadConstraints),
which the comparison of the Pod allows for. The binding selects a namespace by a label of its own (not
placer.dev/inject), so the webhook this tier also runs is not called for it."""

import copy
import uuid
from typing import Any

import pytest
import yaml

from tests.cluster.harness import E2E_NAME, Cluster, wait_until
from tests.cluster.test_export_checks_on_cluster import served_api, target_of
from tests.helpers import REVISION_KEYS_POLICY
from webhook.admission.offline import apply_manifests
from webhook.export.admission_policy import export_policy
from webhook.policy.compiler import PolicyCompiler

pytestmark = pytest.mark.cluster

GROUP = "/apis/admissionregistration.k8s.io"
IMAGE = "registry.k8s.io/pause:3.10"


def daemonset(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "main", "image": IMAGE}]}}}}


def replicaset_pod(name: str) -> dict[str, Any]:
    """A Pod as a Deployment's ReplicaSet makes it (the owner need not exist for a dry-run create)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-5d8f7c-abcde", "labels": {"app": name, "pod-template-hash": "5d8f7c"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-5d8f7c",
                                              "uid": str(uuid.uuid4()), "controller": True}]},
            "spec": {"containers": [{"name": "main", "image": IMAGE}]}}


def terms(template: dict[str, Any]) -> list[dict[str, Any]]:
    """The spread constraint and the preferred anti-affinity term the policy writes."""
    spec = template["spec"]
    [spread] = spec["topologySpreadConstraints"]
    [anti] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    return [spread, anti["podAffinityTerm"]]


def requirements(selector: dict[str, Any]) -> set[tuple[str, str, tuple[str, ...]]]:
    """A label selector as its requirements (`matchLabels` as `In [value]`): equal selectors select alike."""
    found: set[tuple[str, str, tuple[str, ...]]] = {
        (key, "In", (value,)) for key, value in (selector.get("matchLabels") or {}).items()}
    found |= {(item["key"], item["operator"], tuple(item.get("values") or []))
              for item in selector.get("matchExpressions") or []}
    return found


def test_the_exported_policy_writes_the_revision_keys_placer_writes(cluster: Cluster, tmp_path: Any) -> None:
    target = target_of(cluster)
    version = served_api(cluster, target)
    marker = f"{E2E_NAME}-mlk-{uuid.uuid4().hex[:6]}"
    text = REVISION_KEYS_POLICY.replace("name: keys", f"name: {marker}")
    compiled = PolicyCompiler().compile(yaml.safe_load(text), "test")
    assert compiled.policy is not None, compiled.errors
    export = export_policy(compiled.policy, version, target=target)
    assert all(rule.exported for rule in export.rules), export.rules
    policy, binding = copy.deepcopy(export.objects)
    binding["spec"]["matchResources"]["namespaceSelector"] = {"matchLabels": {"placer-e2e-export": marker}}
    cluster.create(f"{GROUP}/{version}/mutatingadmissionpolicies", policy)
    cluster.create(f"{GROUP}/{version}/mutatingadmissionpolicybindings", binding)
    labels = {"placer-e2e-export": marker}
    namespace = f"{marker}-ns"
    cluster.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": namespace, "labels": labels}})
    (tmp_path / "policy.yaml").write_text(text)
    for kind, path, obj, key in [
        ("DaemonSet", f"/apis/apps/v1/namespaces/{namespace}/daemonsets", daemonset("agent"),
         "controller-revision-hash"),
        ("Pod", f"/api/v1/namespaces/{namespace}/pods", replicaset_pod("web"), "pod-template-hash"),
    ]:
        report = apply_manifests(policy_paths=[str(tmp_path / "policy.yaml")], manifest_paths=[],
                                 namespace_labels=labels, objects=[(kind, obj)], default_namespace=namespace)
        mutated = report.results[0].mutated
        expected = terms(mutated if kind == "Pod" else mutated["spec"]["template"])

        def admitted(obj: dict[str, Any] = obj, path: str = path) -> dict[str, Any] | None:
            created = cluster.api.create(path, obj, {"dryRun": "All"})
            template = created if created["kind"] == "Pod" else created["spec"]["template"]
            return template if "topologySpreadConstraints" in template["spec"] else None

        created = terms(wait_until(admitted, timeout=60, what=f"the exported policy to act on a {kind}"))
        for got, want in zip(created, expected, strict=True):
            assert want["matchLabelKeys"] == [key], want
            assert got["matchLabelKeys"] == [key], got
            merged = {(key, "In", (obj["metadata"]["labels"][key],))} if kind == "Pod" else set()
            assert requirements(got["labelSelector"]) == requirements(want["labelSelector"]) | merged, (got, want)
            assert {k: v for k, v in got.items() if k != "labelSelector"} == (
                {k: v for k, v in want.items() if k != "labelSelector"})
