"""Cluster-aware placement on a living cluster: PodGroups that exist when the gang arrives, and a
StatefulSet's pod that comes back to the node holding its local data.

The PodGroup test installs scheduler-plugins' PodGroup CRD when the cluster has none (and removes it at the
end); the volume test makes its own hostPath PersistentVolume tied to one node, so it needs no provisioner.
"""

import time
import uuid
from typing import Any

import pytest

from tests.cluster.harness import CRDS, DOCS, Cluster, wait_until
from webhook.cluster.client.api import ApiError

pytestmark = pytest.mark.cluster

PODGROUP_CRD = "podgroups.scheduling.x-k8s.io"
PODGROUP_API = "/apis/scheduling.x-k8s.io/v1alpha1"


def _podgroup_crd() -> dict[str, Any]:
    """The shape of scheduler-plugins' PodGroup CRD (config/crd/bases/scheduling.x-k8s.io_podgroups.yaml),
    with the fields Placer writes and reads spelled out."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": PODGROUP_CRD},
        "spec": {"group": "scheduling.x-k8s.io", "scope": "Namespaced",
                 "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups",
                           "singular": "podgroup", "shortNames": ["pg", "pgs"]},
                 "versions": [{"name": "v1alpha1", "served": True, "storage": True, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "properties": {
                                       "minMember": {"type": "integer", "format": "int32", "minimum": 1},
                                       "minResources": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                       "scheduleTimeoutSeconds": {"type": "integer", "format": "int32"}}},
                                   "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]},
    }


def _ensure_podgroup_crd(cluster: Cluster) -> None:
    try:
        cluster.api.get(f"{CRDS}/{PODGROUP_CRD}")
    except ApiError as error:
        if error.code != 404:
            raise
        cluster.create(CRDS, _podgroup_crd())

    def served() -> bool:
        try:
            cluster.api.get(PODGROUP_API)
        except ApiError:
            return False
        return True

    wait_until(served, timeout=60, what="the PodGroup API to be served")


def test_a_coscheduling_job_gets_its_pod_group_owned_by_it_and_following_its_size(cluster: Cluster) -> None:
    _ensure_podgroup_crd(cluster)
    namespace = cluster.namespace({"placer-e2e-gang": "yes"})
    policy = f"gang-{namespace[-6:]}"
    cluster.policy(policy, {"namespaceSelector": {"matchLabels": {"placer-e2e-gang": "yes"}}, "rules": [
        {"name": "gang", "action": "add-gang-labels",
         "parameters": {"scheduler": "coscheduling", "createPodGroup": True}}]})
    time.sleep(3)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}, "spec": {
        "suspend": True, "parallelism": 3, "completions": 6, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    created = cluster.api.create(jobs, job)
    assert created["metadata"]["labels"]["placer.dev/pod-group"] == "train"
    assert created["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "train"
    groups = f"{PODGROUP_API}/namespaces/{namespace}/podgroups"

    def pod_group() -> dict[str, Any] | None:
        try:
            return cluster.api.get(f"{groups}/train")
        except ApiError:
            return None

    # The controller checks once a minute whether PodGroups are served: a CRD installed just now may wait that.
    group = wait_until(pod_group, timeout=90, what="the PodGroup")
    assert group["spec"]["minMember"] == 3
    assert [(ref["kind"], ref["uid"]) for ref in group["metadata"]["ownerReferences"]] == [
        ("Job", created["metadata"]["uid"])]
    cluster.api.merge_patch(f"{jobs}/train", {"spec": {"parallelism": 5}})
    wait_until(lambda: (pod_group() or {}).get("spec", {}).get("minMember") == 5, timeout=30,
               what="minMember to follow the Job's parallelism")

    mine = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "own"},
            "spec": {"minMember": 2}}
    cluster.api.create(groups, mine)
    cluster.api.create(jobs, {**job, "metadata": {"name": "own"}})
    time.sleep(5)
    assert cluster.api.get(f"{groups}/own")["spec"]["minMember"] == 2, "the user's own PodGroup is left alone"

    cluster.api.delete(f"{jobs}/train", {"propagationPolicy": "Background"})  # a Job orphans by default
    wait_until(lambda: pod_group() is None, timeout=120, what="the PodGroup to be garbage-collected with its Job")
    cluster.delete_policy(policy)


def _schedulable_node(cluster: Cluster) -> dict[str, Any]:
    nodes = [node for node in cluster.api.get("/api/v1/nodes")["items"]
             if not node["spec"].get("unschedulable") and not node["spec"].get("taints")]
    if not nodes:
        pytest.fail(f"the cluster tier needs an untainted schedulable node (see {DOCS})")
    return dict(nodes[-1])


def test_a_statefulset_pod_deleted_comes_back_to_the_node_holding_its_local_volume(cluster: Cluster) -> None:
    node = _schedulable_node(cluster)
    hostname = node["metadata"]["labels"]["kubernetes.io/hostname"]
    namespace = cluster.namespace({"placer-e2e-local": "yes"})
    suffix = uuid.uuid4().hex[:6]
    storage_class = f"placer-e2e-local-{suffix}"
    policy = f"local-{namespace[-6:]}"
    cluster.policy(policy, {"namespaceSelector": {"matchLabels": {"placer-e2e-local": "yes"}}, "rules": [
        {"name": "follow-data", "action": "pin-to-volume-node",
         "parameters": {"storageClassNames": [storage_class], "strict": True}}]})
    # A static local volume on one node, pre-bound to the claim the StatefulSet will make for db-0.
    cluster.create("/api/v1/persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"placer-e2e-{suffix}"},
        "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": storage_class,
                 "hostPath": {"path": f"/tmp/placer-e2e-{suffix}", "type": "DirectoryOrCreate"},
                 "claimRef": {"namespace": namespace, "name": "data-db-0"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": [hostname]}]}]}}}})
    time.sleep(3)
    statefulset = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"}, "spec": {
        "replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
        "template": {"metadata": {"labels": {"app": "db"}}, "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
            "resources": {"requests": {"storage": "1Mi"}}}}]}}
    cluster.api.create(f"/apis/apps/v1/namespaces/{namespace}/statefulsets", statefulset)
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def running_pod() -> dict[str, Any] | None:
        try:
            pod = cluster.api.get(f"{pods}/db-0")
        except ApiError:
            return None
        if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") != "Running":
            return None
        return dict(pod)

    first = wait_until(running_pod, timeout=180, what="db-0 running")
    assert first["spec"]["nodeName"] == node["metadata"]["name"]
    cluster.api.delete(f"{pods}/db-0")
    wait_until(lambda: (running_pod() or {}).get("metadata", {}).get("uid") not in (None, first["metadata"]["uid"]),
               timeout=180, what="db-0 to come back")
    again = running_pod()
    assert again is not None and again["spec"]["nodeName"] == node["metadata"]["name"]
    terms = again["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert {"key": "kubernetes.io/hostname", "operator": "In", "values": [hostname]} in terms[0]["matchExpressions"]
    assert "/follow-data" in again["metadata"]["annotations"]["placer.dev/applied"]
    cluster.delete_policy(policy)
