"""A workload's spot share on a living cluster (issue 35): a 10-replica Deployment at 60 % spot keeps 6 of
its pods spot through a scale to 20, a rolling update and a scale back to 4; with the spot nodes cordoned
and `fallbackToOnDemand: true`, every pod runs.

Capacity classes are the test's own: up to six schedulable, untainted nodes get the label
`placer-e2e.dev/capacity` (the first half `spot`, the rest `on-demand`; removed at the end), and the policy
uses the `custom` preset on that label, so no node label the cluster uses is touched. One node is enough
for the share (spot pods fall back to on-demand nodes); the cordon test needs two.

What it needs of Placer: `placer serve --kube` (the harness starts it so, or deploys it), whose controller
counts each workload's live pods by their `placer.dev/capacity-class` label and publishes the counts to
the workers (`webhook.pods.capacity_share.ShareLedger`). Kubernetes features, on by default in every supported
version (1.34-1.37): PodDeletionCost (beta since 1.22; the ReplicaSet controller deletes the pods of lowest
`controller.kubernetes.io/pod-deletion-cost` first, pkg/controller/controller_utils.go
ActivePodsWithRanks.Less).

Bounds: `floor(0.6 * replicas)` spot pods per ReplicaSet. The served Placer runs two workers, and a
ReplicaSet creates its pods in batches: the two workers can each give the last spot slot of a batch
before the controller publishes it, one pod over the bound at worst (docs/cost-aware-placement.md,
measured in tests/unit/test_spot_share.py), hence the `OVERSHOOT` allowance.
"""

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.harness import Cluster, wait_until
from tests.cluster.test_living_cluster import deployment, deployments, roll, rolled_out
from webhook.cluster.client.api import ApiError

pytestmark = pytest.mark.cluster

CAPACITY_KEY = "placer-e2e.dev/capacity"
CLASS_LABEL = "placer.dev/capacity-class"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
MAX_PERCENT = 60
OVERSHOOT = 1
"""Two workers, one burst: at most one spot pod over the bound (see the module docstring)."""
TIMEOUT = 300.0


@contextlib.contextmanager
def capacity_labels(cluster: Cluster) -> Iterator[dict[str, str]]:
    """Node name -> class for the labelled nodes; labels removed (and cordons lifted) on the way out."""
    nodes = [node["metadata"]["name"] for node in cluster.schedulable_nodes(2, purpose="spot and on-demand")[:6]]
    spot_nodes = len(nodes) // 2
    classes = {name: "spot" if index < spot_nodes else "on-demand" for index, name in enumerate(nodes)}
    try:
        for name, capacity_class in classes.items():
            cluster.api.merge_patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {CAPACITY_KEY: capacity_class}}})
        yield classes
    finally:
        for name in classes:
            with contextlib.suppress(ApiError):
                cluster.api.merge_patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {CAPACITY_KEY: None}},
                                                                  "spec": {"unschedulable": None}})


def share_policy(namespace: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}, "rules": [
        {"name": "share", "action": "spot-share", "parameters": {
            "capacity": "custom", "capacityLabel": CAPACITY_KEY, "spotValues": ["spot"],
            "onDemandValues": ["on-demand"], "maxSpotPercentage": MAX_PERCENT, "fallbackToOnDemand": True}}]}


def live_pods(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    """The Deployment's pods that are not terminating, of its current ReplicaSet."""
    current = cluster.api.get(f"{deployments(namespace)}/{name}")
    revision = (current["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision")
    replicasets = cluster.api.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets")["items"]
    uids = {rs["metadata"]["uid"] for rs in replicasets
            if (rs["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision") == revision
            and any(ref.get("name") == name for ref in rs["metadata"].get("ownerReferences") or [])}
    pods = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    return [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")
            and any(ref.get("uid") in uids for ref in pod["metadata"].get("ownerReferences") or [])]


def classes(pods: list[dict[str, Any]]) -> Counter[str]:
    return Counter((pod["metadata"].get("labels") or {}).get(CLASS_LABEL, "none") for pod in pods)


def settled(cluster: Cluster, namespace: str, name: str, replicas: int) -> Counter[str]:
    """Once the Deployment has `replicas` available pods of its current revision: their classes."""
    wait_until(lambda: rolled_out(cluster, namespace, name) and len(live_pods(cluster, namespace, name)) == replicas,
               timeout=TIMEOUT, what=f"{name} at {replicas} replicas")
    return classes(live_pods(cluster, namespace, name))


def scale(cluster: Cluster, namespace: str, name: str, replicas: int) -> None:
    cluster.api.merge_patch(f"{deployments(namespace)}/{name}", {"spec": {"replicas": replicas}})


def assert_within_bound(counted: Counter[str], replicas: int, *, at_least: int | None = None) -> None:
    bound = MAX_PERCENT * replicas // 100
    assert counted["none"] == 0, f"every pod gets a class: {dict(counted)}"
    assert counted["spot"] + counted["on-demand"] == replicas, dict(counted)
    assert counted["spot"] <= bound + OVERSHOOT, f"spot share over {MAX_PERCENT}% of {replicas}: {dict(counted)}"
    if at_least is not None:
        assert counted["spot"] >= at_least, f"spot share too low for {replicas}: {dict(counted)}"


def test_a_deployment_keeps_its_spot_share_through_scale_rollout_and_scale_down(cluster: Cluster) -> None:
    namespace = cluster.namespace()
    cluster.policy("spot-share", share_policy(namespace))
    try:
        with capacity_labels(cluster):
            cluster.create(deployments(namespace), deployment("web", replicas=10))
            assert_within_bound(settled(cluster, namespace, "web", 10), 10, at_least=5)
            pods = live_pods(cluster, namespace, "web")
            costs = {(pod["metadata"]["labels"][CLASS_LABEL], pod["metadata"]["annotations"][DELETION_COST])
                     for pod in pods}
            assert costs <= {("spot", "-100"), ("on-demand", "100")}, costs

            scale(cluster, namespace, "web", 20)
            assert_within_bound(settled(cluster, namespace, "web", 20), 20, at_least=11)

            roll(cluster, namespace, "web", "2")  # one new pod at a time (maxSurge 1): decided with exact counts
            assert_within_bound(settled(cluster, namespace, "web", 20), 20, at_least=11)

            scale(cluster, namespace, "web", 4)  # spot pods are cheaper to delete: the 4 left are within bound
            counted = settled(cluster, namespace, "web", 4)
            assert_within_bound(counted, 4)
            assert counted["spot"] <= MAX_PERCENT * 4 // 100, dict(counted)
    finally:
        cluster.delete_policy("spot-share")


def test_with_spot_nodes_cordoned_every_pod_runs_when_spot_pods_may_fall_back(cluster: Cluster) -> None:
    namespace = cluster.namespace()
    cluster.policy("spot-fallback", share_policy(namespace))
    try:
        with capacity_labels(cluster) as labelled:
            spot_nodes = [name for name, capacity_class in labelled.items() if capacity_class == "spot"]
            assert spot_nodes, labelled
            for name in spot_nodes:
                cluster.api.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}})
            cluster.create(deployments(namespace), deployment("batch", replicas=10))
            counted = settled(cluster, namespace, "batch", 10)  # available: every pod scheduled and running
            assert counted["spot"] >= 5, f"spot pods were made and fell back to on-demand nodes: {dict(counted)}"
            nodes = {pod["spec"].get("nodeName") for pod in live_pods(cluster, namespace, "batch")}
            assert not nodes & set(spot_nodes), nodes
    finally:
        cluster.delete_policy("spot-fallback")
