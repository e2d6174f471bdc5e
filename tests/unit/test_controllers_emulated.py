"""Placer never fights a controller: every kind x every action, checked the way the controllers check.

For each workload kind (from the real captures) and each action, Placer admits the owner; then what the
controller makes from the patched owner goes through Placer again, exactly as it does in a cluster:

- the Deployment controller creates a ReplicaSet from the template (adding `pod-template-hash`) and finds it
  again with `EqualIgnoreHash`: Placer must leave the ReplicaSet alone, or the controller creates another
  ReplicaSet, forever (pkg/controller/deployment/util/deployment_util.go);
- the CronJob controller creates Jobs from its job template; ReplicaSets, StatefulSets, DaemonSets and Jobs
  create Pods, with per-pod labels, an owner reference and the API server's Pod defaults;
- every child's labels must still match its controller's selector, and the owner's selector its template
  (the API server's validation);
- the API server may call Placer again on its own output (`reinvocationPolicy: IfNeeded`): empty patch.
"""

import copy
from typing import Any

import jsonpatch
import pytest

from tests.conftest import REPO, fixture_request
from tests.helpers import read_yaml, review_for, run, snapshot_of
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.support.selectors import LabelSelector

TEAM_A = NamespaceInfo("team-a", {"environment": "production", "team": "ml"})

ACTIONS = {
    "add-node-selector": "{pool: ml}",
    "add-node-affinity": "{key: zone, values: 'a,b'}",
    "add-toleration": "{key: dedicated, value: gpu, effect: NoSchedule}",
    "add-topology-spread": "{topologyKey: topology.kubernetes.io/zone}",
    "add-pod-anti-affinity": "{topologyKey: kubernetes.io/hostname}",
    "add-pod-affinity": "{topologyKey: rack, labelSelector: 'tier=cache'}",
    "set-scheduler-name": "{schedulerName: batch}",
    "set-priority-class": "{priorityClassName: high}",
    "add-labels": "{team: ml, app: other}",
    "add-annotations": "{owner: platform}",
    "add-gang-labels": "{scheduler: kueue, queue: research}",
}

KINDS = {
    "Pod": "pod-bare-create-dryrun",
    "Deployment": "deployment-create-dryrun",
    "ReplicaSet": "replicaset-create-dryrun",
    "StatefulSet": "statefulset-create-dryrun",
    "DaemonSet": "daemonset-create-dryrun",
    "Job": "job-create-dryrun",
    "CronJob": "cronjob-create-dryrun",
}


def policy(action: str, parameters: str, condition: str = "true") -> str:
    return (f"apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: p}}\nspec:\n  rules:\n"
            f"  - {{name: r, action: {action}, condition: {condition!r}, parameters: {parameters}}}\n")


def admit(snapshot: PolicySnapshot, obj: dict[str, Any], *, operation: str = "CREATE") -> tuple[dict[str, Any], Any]:
    """Placer's answer for `obj`, and the object the API server would store."""
    mutation = run(snapshot, review_for(obj, namespace="team-a", operation=operation))
    assert mutation.denial is None
    return (jsonpatch.apply_patch(obj, mutation.patch) if mutation.patch else obj), mutation


def equal_ignore_hash(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The Deployment controller's template comparison (EqualIgnoreHash, with Semantic.DeepEqual's rule that
    empty and missing maps and lists are equal)."""
    def strip(template: dict[str, Any]) -> Any:
        template = copy.deepcopy(template)
        (template.get("metadata") or {}).get("labels", {}).pop("pod-template-hash", None)
        return _prune(template)
    return bool(strip(a) == strip(b))


def _prune(value: Any) -> Any:
    if isinstance(value, dict):
        pruned = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in ({}, [], None)}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def owner_reference(owner: dict[str, Any], kind: str) -> dict[str, Any]:
    name = owner["metadata"].get("name") or owner["metadata"].get("generateName", "x-") + "abcde"
    return {"apiVersion": owner.get("apiVersion", "apps/v1"), "kind": kind, "name": name, "uid": "1234",
            "controller": True, "blockOwnerDeletion": True}


def replicaset_from(deployment: dict[str, Any]) -> dict[str, Any]:
    """What the Deployment controller creates (getNewReplicaSet): the template plus pod-template-hash."""
    template = copy.deepcopy(deployment["spec"]["template"])
    template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = "5d8f9c7b6"
    selector = copy.deepcopy(deployment["spec"]["selector"])
    selector.setdefault("matchLabels", {})["pod-template-hash"] = "5d8f9c7b6"
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": deployment["metadata"]["name"] + "-5d8f9c7b6", "namespace": "team-a",
                         "labels": copy.deepcopy(template["metadata"]["labels"]),
                         "annotations": {"deployment.kubernetes.io/revision": "1"},
                         "ownerReferences": [owner_reference(deployment, "Deployment")]},
            "spec": {"replicas": deployment["spec"].get("replicas", 1), "selector": selector, "template": template}}


def job_from(cronjob: dict[str, Any]) -> dict[str, Any]:
    """What the CronJob controller creates (getJobFromTemplate2)."""
    spec = copy.deepcopy(cronjob["spec"]["jobTemplate"]["spec"])
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": cronjob["metadata"]["name"] + "-29000000", "namespace": "team-a",
                         "ownerReferences": [owner_reference(cronjob, "CronJob")]},
            "spec": spec}


def pod_from(owner: dict[str, Any], kind: str, extra_labels: dict[str, str]) -> dict[str, Any]:
    """A Pod as the controller creates it and in-tree admission defaults it before webhooks run."""
    template = copy.deepcopy(owner["spec"]["template"])
    metadata = template.get("metadata") or {}
    metadata["labels"] = {**(metadata.get("labels") or {}), **extra_labels}
    metadata.update(generateName=owner["metadata"].get("name", "x") + "-", namespace="team-a",
                    ownerReferences=[owner_reference(owner, kind)])
    spec = template["spec"]
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("tolerations", []).extend([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def selects(selector: Any, labels: Any) -> bool:
    parsed = LabelSelector.from_object(selector)
    return parsed is not None and parsed.matches(labels or {})


POD_LABELS = {
    "ReplicaSet": {},
    "StatefulSet": {"controller-revision-hash": "db-6d4f", "statefulset.kubernetes.io/pod-name": "db-0",
                    "apps.kubernetes.io/pod-index": "0"},
    "DaemonSet": {"controller-revision-hash": "7c9f", "pod-template-generation": "1"},
    "Job": {"batch.kubernetes.io/job-name": "train", "job-name": "train",
            "batch.kubernetes.io/controller-uid": "1234", "controller-uid": "1234"},
}


def check_pods(snapshot: PolicySnapshot, owner: dict[str, Any], kind: str) -> None:
    """Pods made from the owner's (patched) template get nothing new and keep matching the selector."""
    pod = pod_from(owner, kind, POD_LABELS[kind])
    stored, mutation = admit(snapshot, pod)
    assert mutation.patch == [], (kind, mutation.patch)
    selector = owner["spec"].get("selector") or {"matchLabels": {"batch.kubernetes.io/controller-uid": "1234"}}
    assert selects(selector, stored["metadata"]["labels"])


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_owner_children_and_second_pass_agree(kind: str, action: str) -> None:
    snapshot = snapshot_of(policy(action, ACTIONS[action]), namespaces=[TEAM_A])
    original = fixture_request(KINDS[kind])["request"]["object"]
    patched, first = admit(snapshot, original)
    assert first.patch, f"{action} changed nothing on the {kind}"
    _, second = admit(snapshot, patched)
    assert second.patch == [], f"second pass on Placer's own output: {second.patch}"
    if "selector" in patched.get("spec", {}) and kind != "Job":
        assert selects(patched["spec"]["selector"], patched["spec"]["template"]["metadata"]["labels"])
    if kind == "Deployment":
        replicaset = replicaset_from(patched)
        stored, mutation = admit(snapshot, replicaset)
        assert mutation.patch == [] and "managed by its controller Deployment" in (mutation.passed_through or "")
        assert equal_ignore_hash(patched["spec"]["template"], stored["spec"]["template"])
        check_pods(snapshot, stored, "ReplicaSet")
    elif kind == "CronJob":
        job = job_from(patched)
        stored, mutation = admit(snapshot, job)
        assert mutation.patch == [] and stored["spec"] == patched["spec"]["jobTemplate"]["spec"]
        check_pods(snapshot, stored, "Job")
    elif kind != "Pod":
        check_pods(snapshot, patched, kind)


@pytest.mark.parametrize("variant", ["opted-out owner", "condition differs on the child", "owner before Placer"])
def test_a_deployments_replicaset_is_never_mutated(variant: str) -> None:
    """The three loops seen on a real cluster (collisionCount 52, 214, 77 after a minute)."""
    deployment = fixture_request("deployment-create-dryrun")["request"]["object"]
    condition = "workload.replicas < 3" if variant == "condition differs on the child" else "true"
    snapshot = snapshot_of(policy("add-node-selector", "{pool: ml}", condition), namespaces=[TEAM_A])
    if variant == "opted-out owner":
        deployment["metadata"].setdefault("labels", {})["placer.dev/inject"] = "disabled"
    patched, _ = admit(snapshot, deployment)
    replicaset = replicaset_from(patched)
    replicaset["spec"]["replicas"] = 1  # mid-surge: the new ReplicaSet is scaled up one pod at a time
    stored, mutation = admit(snapshot, replicaset)
    assert mutation.patch == []
    assert equal_ignore_hash(patched["spec"]["template"], stored["spec"]["template"])


def test_operator_owned_workloads_are_left_to_their_operator() -> None:
    statefulset = fixture_request("statefulset-create-dryrun")["request"]["object"]
    statefulset["metadata"]["ownerReferences"] = [{"apiVersion": "db.example/v1", "kind": "Cluster", "name": "pg",
                                                   "uid": "9", "controller": True}]
    snapshot = snapshot_of(policy("add-node-selector", "{pool: ml}"), namespaces=[TEAM_A])
    _, mutation = admit(snapshot, statefulset)
    assert mutation.patch == [] and mutation.passed_through.startswith("managed by its controller Cluster/pg")


def test_pods_of_a_controller_whose_template_placer_did_not_change_are_evaluated() -> None:
    """E.g. a ReplicaSet of an Argo Rollout, or a Deployment created before its namespace opted in."""
    pod = fixture_request("pod-rs-owned-generatename-create-dryrun")["request"]["object"]
    snapshot = snapshot_of(policy("add-node-selector", "{pool: ml}"), namespaces=[TEAM_A])
    _, mutation = admit(snapshot, pod)
    assert {"op": "add", "path": "/spec/nodeSelector", "value": {"pool": "ml"}} in mutation.patch


OPERATOR_OBJECTS = ["jobset", "mpijob", "pytorchjob", "raycluster", "rayjob", "sparkapplication", "tfjob"]


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize("name", OPERATOR_OBJECTS)
def test_operator_resources_settle_and_their_children_pass_through(name: str, action: str) -> None:
    """Operators create Jobs and Pods from the resource's templates: those children are left as they are."""
    snapshot = snapshot_of(policy(action, ACTIONS[action]), namespaces=[TEAM_A])
    original = read_yaml(REPO / "tests/gang/objects" / f"{name}.yaml")
    patched, first = admit(snapshot, original)
    _, second = admit(snapshot, patched)
    assert second.patch == [], f"second pass on Placer's own output: {second.patch}"
    owner = [owner_reference(patched, original["kind"])]
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "child", "namespace": "team-a", "ownerReferences": owner},
           "spec": {"template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [
               {"name": "c", "image": "x"}]}}}}
    _, mutation = admit(snapshot, job)
    assert mutation.patch == [] and mutation.passed_through.startswith(f"managed by its controller {original['kind']}/")
    if first.patch:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "child-0", "namespace": "team-a", "ownerReferences": owner,
            "annotations": {"placer.dev/applied": "p/r"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        _, mutation = admit(snapshot, pod)
        assert mutation.patch == []
