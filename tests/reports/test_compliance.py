"""Which stored workloads follow the current policies: the engine run on each as its CREATE, per rule."""

import copy
from pathlib import Path
from typing import Any

import jsonpatch

from tests.conftest import fixture_request
from tests.helpers import snapshot_of
from webhook.cluster.reports.compliance import as_create, evaluate
from webhook.engine.exemption_seal import SEAL_ANNOTATION, Seals, seal
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.workloads import default_workload_table

ORG_WIDE = (Path(__file__).parents[2] / "policies" / "org-wide-policy.yaml").read_text()
TEAM_A = NamespaceInfo("team-a", {"environment": "production"})
WORKLOADS = default_workload_table()


def stored_deployment() -> dict[str, Any]:
    """A Deployment as kube-apiserver v1.34 stored it (the oldObject of a captured UPDATE): status, uid,
    managedFields, defaults and all."""
    obj: dict[str, Any] = fixture_request("deployment-update-label-real")["request"]["oldObject"]
    return obj


def org_wide() -> PolicySnapshot:
    return snapshot_of(ORG_WIDE, namespaces=[TEAM_A])


def results_of(verdict: Any) -> dict[str, str]:
    return {f"{r.policy}/{r.rule}": r.result for r in verdict.results}


def test_a_deployment_created_before_the_policy_fails_with_the_patch_that_brings_it_in() -> None:
    stored = stored_deployment()
    verdict = evaluate(stored, org_wide(), WORKLOADS)
    assert results_of(verdict) == {
        "org-wide-policy/production-isolation": "fail",
        "org-wide-policy/gpu-workload-taints": "fail",
        "org-wide-policy/multi-zone-ha": "fail",
    }
    assert verdict.drifted and verdict.skipped is None
    paths = {op["path"] for op in verdict.patch}
    assert "/spec/template/spec/nodeSelector" in paths
    assert all("/status" not in path and "managedFields" not in path for path in paths)
    fail = next(r for r in verdict.results if r.rule == "multi-zone-ha")
    assert "topologySpreadConstraints" in fail.message
    assert verdict.workload.as_report_resource() == {
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer", "namespace": "team-a",
        "uid": stored["metadata"]["uid"]}


def test_after_the_patch_the_same_workload_passes_every_rule() -> None:
    stored = stored_deployment()
    patched = jsonpatch.apply_patch(stored, evaluate(stored, org_wide(), WORKLOADS).patch)
    verdict = evaluate(patched, org_wide(), WORKLOADS)
    assert set(results_of(verdict).values()) == {"pass"}
    assert verdict.patch == [] and not verdict.drifted


def test_what_the_api_server_set_is_not_part_of_the_create() -> None:
    create = as_create(stored_deployment())
    assert "status" not in create
    assert not {"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"} & set(create["metadata"])
    assert create["metadata"]["labels"] == {"app": "trainer"}
    assert create["spec"] == stored_deployment()["spec"]


def test_a_namespace_no_policy_selects_gives_no_result() -> None:
    stored = stored_deployment()
    stored["metadata"]["namespace"] = "elsewhere"
    selector = "\n  namespaceSelector: {matchLabels: {environment: production}}"
    policy = ORG_WIDE.replace("spec:\n  priority: 100", "spec:\n  priority: 100" + selector)
    verdict = evaluate(stored, snapshot_of(policy, namespaces=[TEAM_A]), WORKLOADS)
    assert verdict.results == () and not verdict.drifted


def test_an_opted_out_workload_is_skip_for_every_rule() -> None:
    stored = stored_deployment()
    stored["spec"]["template"]["metadata"]["labels"]["placer.dev/inject"] = "disabled"
    verdict = evaluate(stored, org_wide(), WORKLOADS)
    assert set(results_of(verdict).values()) == {"skip"} and len(verdict.results) == 3
    assert verdict.skipped is not None and "placer.dev/inject=disabled" in verdict.skipped
    assert verdict.patch == []


def test_a_replicaset_of_a_deployment_and_a_pod_of_a_replicaset_are_skip() -> None:
    owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer", "uid": "u", "controller": True}
    replica_set = copy.deepcopy(stored_deployment())
    replica_set.update(kind="ReplicaSet")
    replica_set["metadata"]["ownerReferences"] = [owner]
    verdict = evaluate(replica_set, org_wide(), WORKLOADS)
    assert set(results_of(verdict).values()) == {"skip"}
    assert "Deployment/trainer" in str(verdict.skipped)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "trainer-abc", "namespace": "team-a",
        "ownerReferences": [{**owner, "kind": "ReplicaSet", "name": "trainer-5d4"}]},
        "spec": stored_deployment()["spec"]["template"]["spec"]}
    verdict = evaluate(pod, org_wide(), WORKLOADS)
    assert set(results_of(verdict).values()) == {"skip"} and "ReplicaSet/trainer-5d4" in str(verdict.skipped)


def test_a_rule_that_errors_is_error_and_the_others_still_judge() -> None:
    broken = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: broken}
spec:
  rules:
  - name: divides-by-zero
    condition: "workload.replicas / 0 > 1"
    action: add-node-selector
    parameters: {pool: x}
  - name: fine
    condition: "true"
    action: add-node-selector
    parameters: {zone: a}
"""
    verdict = evaluate(stored_deployment(), snapshot_of(broken, namespaces=[TEAM_A]), WORKLOADS)
    assert results_of(verdict) == {"broken/divides-by-zero": "error", "broken/fine": "fail"}
    error = next(r for r in verdict.results if r.result == "error")
    assert "divide by zero" in error.message


def test_an_operator_resource_is_judged_like_a_builtin() -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "train", "namespace": "team-a", "uid": "x", "resourceVersion": "9"},
           "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4, "template": {"spec": {"containers": [
               {"name": "w", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}},
           "status": {"conditions": []}}
    verdict = evaluate(job, org_wide(), WORKLOADS)
    assert results_of(verdict)["org-wide-policy/gpu-workload-taints"] == "fail"
    assert any(op["path"].startswith("/spec/pytorchReplicaSpecs/Worker/template") for op in verdict.patch)


def test_a_workload_an_enforced_policy_would_refuse_fails_the_refusing_rule_only() -> None:
    """A Deployment stored before an Enforced policy, with a nodeSelector of another pool: it runs outside the
    boundary. The rule that refuses it is `fail` with the refusal; the policy's other rule, which would change
    nothing (the Deployment has no tolerations to restrict), passes. No patch can bring it in step."""
    enforced = (Path(__file__).parents[2] / "policies" / "enforced-team-pool.yaml").read_text()
    stored = stored_deployment()
    stored["spec"]["template"]["spec"]["nodeSelector"] = {"node-pool": "shared-premium"}
    snapshot = snapshot_of(enforced, namespaces=[NamespaceInfo("team-a", {"tenant": "team-a"})])
    verdict = evaluate(stored, snapshot, WORKLOADS)
    assert results_of(verdict) == {"enforced-team-pool/general-pool": "fail",
                                   "enforced-team-pool/only-gpu-toleration": "pass"}
    refusing = next(r for r in verdict.results if r.rule == "general-pool")
    assert refusing.message == ('refused (enforcement: Enforced): spec.template.spec.nodeSelector[node-pool]: wanted '
                                '"general", found "shared-premium"')
    assert verdict.patch == [] and verdict.refused is not None and "is forbidden" in verdict.refused


def test_exempt_workloads_are_skipped_with_the_exemption_named() -> None:
    """As the admission judges them: an exempt namespace from the stored workload; an exempt group from Placer's
    exemption seal on its templates (what the admission of an exempt author wrote), given the key."""
    enforced = (Path(__file__).parents[2] / "policies" / "enforced-team-pool.yaml").read_text()
    stored = stored_deployment()
    stored["spec"]["template"]["spec"]["nodeSelector"] = {"node-pool": "shared-premium"}
    snapshot = snapshot_of(enforced, namespaces=[NamespaceInfo("team-a", {"tenant": "team-a"})])
    key = b"k" * 32
    template = stored["spec"]["template"]
    template["metadata"].setdefault("annotations", {})[SEAL_ANNOTATION] = seal(key, "team-a", template)
    verdict = evaluate(stored, snapshot, WORKLOADS, seals=Seals(key))
    assert set(results_of(verdict).values()) == {"skip"}
    assert verdict.results[0].message == (
        "exempt from the Enforced policy enforced-team-pool: its pod templates carry Placer's exemption seal: an "
        "exempt user or group wrote them")
    assert verdict.patch == [] and verdict.refused is None and not verdict.drifted

    assert results_of(evaluate(stored, snapshot, WORKLOADS))["enforced-team-pool/general-pool"] == "fail", \
        "without the key a seal cannot be told from a copy: judged as anyone's"
    template["spec"]["containers"][0]["image"] = "tenant/own:1"
    assert results_of(evaluate(stored, snapshot, WORKLOADS, seals=Seals(key)))["enforced-team-pool/general-pool"] == \
        "fail", "a template changed since it was sealed exempts nothing"

    by_namespace = enforced.replace("groups: [platform-admins]", "namespaces: [team-a]")
    verdict = evaluate(stored, snapshot_of(by_namespace, namespaces=[NamespaceInfo("team-a", {"tenant": "team-a"})]),
                       WORKLOADS)
    assert {r.message for r in verdict.results} == {
        "exempt from the Enforced policy enforced-team-pool: namespace team-a is exempt"}
