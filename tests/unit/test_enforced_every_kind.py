"""Under an Enforced policy nothing a request's author writes exempts any workload kind: a forged controller
owner, Placer's applied mark on the templates, a copied seal. Each kind of the workload table, built-in and
operator, is refused with a template on another pool, and placed without one."""

import copy
from typing import Any

import jsonpatch
import pytest

from tests.helpers import review_for, snapshot_of
from webhook.admission.review import parse_review
from webhook.engine.exemption_seal import SEAL_ANNOTATION, Seals, seal
from webhook.engine.mutate import mutate
from webhook.policy.snapshot import NamespaceInfo
from webhook.workloads import all_kinds, default_workload_table

TEAM_A = NamespaceInfo("team-a", {"tenant": "team-a"})
POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: boundary}
spec:
  enforcement: Enforced
  namespaceSelector: {matchLabels: {tenant: team-a}}
  rules:
  - {name: pool, action: add-node-selector, parameters: {node-pool: general}}
"""
CONTAINER = {"name": "main", "image": "registry.example/app:1"}
TEMPLATE = {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": [CONTAINER], "restartPolicy": "Never"}}


def spark() -> dict[str, Any]:
    return {"type": "Python", "mode": "cluster", "mainApplicationFile": "local:///app.py", "sparkVersion": "3.5.0",
            "driver": {"cores": 1, "memory": "512m"}, "executor": {"cores": 1, "instances": 2, "memory": "512m"}}


def replica_specs(field: str) -> dict[str, Any]:
    return {field: {"Master": {"replicas": 1, "template": TEMPLATE}, "Worker": {"replicas": 2, "template": TEMPLATE}}}


RAY = {"headGroupSpec": {"template": TEMPLATE},
       "workerGroupSpecs": [{"groupName": "w", "replicas": 2, "template": TEMPLATE}]}
SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "Deployment": ("apps/v1", {"selector": {"matchLabels": {"app": "w"}}, "template": TEMPLATE}),
    "ReplicaSet": ("apps/v1", {"selector": {"matchLabels": {"app": "w"}}, "template": TEMPLATE}),
    "StatefulSet": ("apps/v1", {"selector": {"matchLabels": {"app": "w"}}, "serviceName": "w", "template": TEMPLATE}),
    "DaemonSet": ("apps/v1", {"selector": {"matchLabels": {"app": "w"}}, "template": TEMPLATE}),
    "Job": ("batch/v1", {"template": TEMPLATE}),
    "CronJob": ("batch/v1", {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": TEMPLATE}}}),
    "SparkApplication": ("sparkoperator.k8s.io/v1beta2", spark()),
    "PyTorchJob": ("kubeflow.org/v1", replica_specs("pytorchReplicaSpecs")),
    "TFJob": ("kubeflow.org/v1", replica_specs("tfReplicaSpecs")),
    "MPIJob": ("kubeflow.org/v2beta1", replica_specs("mpiReplicaSpecs")),
    "RayCluster": ("ray.io/v1", RAY),
    "RayJob": ("ray.io/v1", {"entrypoint": "python job.py", "rayClusterSpec": RAY}),
    "JobSet": ("jobset.x-k8s.io/v1alpha2", {"replicatedJobs": [
        {"name": "w", "replicas": 1, "template": {"spec": {"template": TEMPLATE}}}]}),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io/v1", {"replicas": 1, "leaderWorkerTemplate": {
        "size": 2, "workerTemplate": TEMPLATE}}),
}
KINDS = [kind for kind in all_kinds() if kind.kind != "Pod"]


def test_every_kind_is_covered() -> None:
    assert {kind.kind for kind in KINDS} == set(SPECS)


def workload(kind: str) -> dict[str, Any]:
    api_version, spec = SPECS[kind]
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "namespace": "team-a"},
            "spec": copy.deepcopy(spec)}


def with_templates(obj: dict[str, Any], change: Any) -> dict[str, Any]:
    """`obj` with `change(template)` done on every pod template its kind names, through the kind's slots."""
    kind = default_workload_table().lookup(obj["apiVersion"].rpartition("/")[0], obj["kind"])
    assert kind is not None
    patch = []
    for slot in kind.templates(obj):
        raw = slot.read(obj)
        assert raw is not None
        view = copy.deepcopy(slot.view(obj, raw))
        change(view)
        patch.extend(slot.patch(obj, raw, view))
    changed: dict[str, Any] = jsonpatch.apply_patch(obj, patch)
    return changed


def other_pool(template: dict[str, Any]) -> None:
    template.setdefault("spec", {})["nodeSelector"] = {"node-pool": "shared-premium"}
    template.setdefault("metadata", {}).setdefault("annotations", {})["placer.dev/applied"] = "boundary/pool"


def evaluate(obj: dict[str, Any], seals: Seals | None = None) -> Any:
    body = review_for(obj)
    body["request"]["userInfo"] = {"username": "bob", "groups": ["system:authenticated"]}
    return mutate(parse_review(body), snapshot_of(POLICY, namespaces=[TEAM_A]), default_workload_table(), seals=seals)


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_a_forged_controller_and_marks_exempt_no_kind(kind: str) -> None:
    plain = evaluate(workload(kind))
    assert plain.denial is None and plain.patch, f"{kind}: a template without the pool's selector gets it"
    conflicting = with_templates(workload(kind), other_pool)
    assert evaluate(conflicting).denial is not None, kind
    forged = copy.deepcopy(conflicting)
    forged["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "mine", "uid": "1",
                                              "controller": True}]
    refused = evaluate(forged)
    assert refused.denial is not None and refused.patch == [], kind
    assert 'found "shared-premium"' in refused.denial


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_a_seal_copied_onto_other_code_exempts_no_kind(kind: str) -> None:
    key = b"k" * 32
    sealed = with_templates(workload(kind), other_pool)

    def copy_seal(template: dict[str, Any]) -> None:
        value = seal(key, "team-a", {"spec": {"containers": [CONTAINER], "nodeSelector": {"node-pool": "x"}}})
        template["metadata"]["annotations"][SEAL_ANNOTATION] = value

    assert evaluate(with_templates(sealed, copy_seal), Seals(key)).denial is not None, kind
