"""A Job deleted and created again under the same name gets its PodGroup made again, on a living cluster.

`kubectl delete job train && kubectl create -f job.yaml` (background propagation: the garbage collector
deletes the old PodGroup some time later), and the same through the API with no options (a batch/v1 Job's
default is to orphan its dependents, pkg/registry/batch/job/strategy.go `DefaultGarbageCollectionPolicy`: the
old PodGroup stays, its owner reference removed). Either way the new Job must end with a PodGroup owned by
its own uid, which stays (the garbage collector has nothing against it), and its pods must get scheduled.

Needs: the PodGroup CRD of scheduler-plugins (installed by the test when missing, as in test_cluster_aware);
no feature gate. Whether the cluster's scheduler runs the coscheduling plugin or not, the pods of a gang whose
PodGroup exists are scheduled; with coscheduling, a gang without one would stay Pending.
"""

import time
from typing import Any

import pytest

from tests.cluster.harness import Cluster, wait_until
from tests.cluster.test_cluster_aware import PODGROUP_API, _ensure_podgroup_crd
from webhook.cluster.client.api import ApiError

pytestmark = pytest.mark.cluster

BACKGROUND = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
"""What `kubectl delete` sends (its --cascade=background default)."""


def _job(suspend: bool) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}, "spec": {
        "suspend": suspend, "parallelism": 2, "completions": 2, "template": {"spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "1m", "memory": "4Mi"}}}]}}}}


@pytest.mark.parametrize("options", [BACKGROUND, None], ids=["kubectl-delete", "api-delete-orphans"])
def test_a_job_created_again_under_its_name_gets_a_pod_group_owned_by_the_new_job(
        cluster: Cluster, options: dict[str, Any] | None) -> None:
    _ensure_podgroup_crd(cluster)
    namespace = cluster.namespace({"placer-e2e-regang": "yes"})
    policy = f"regang-{namespace[-6:]}"
    cluster.policy(policy, {"namespaceSelector": {"matchLabels": {"placer-e2e-regang": "yes"}}, "rules": [
        {"name": "gang", "action": "add-gang-labels",
         "parameters": {"scheduler": "coscheduling", "createPodGroup": True}}]})
    time.sleep(3)
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    groups = f"{PODGROUP_API}/namespaces/{namespace}/podgroups"

    def owners() -> list[str] | None:
        try:
            group = cluster.api.get(f"{groups}/train")
        except ApiError:
            return None
        if group["metadata"].get("deletionTimestamp"):
            return None
        return [ref["uid"] for ref in group["metadata"].get("ownerReferences") or []]

    first = cluster.api.create(jobs, _job(suspend=True))
    assert first["metadata"]["labels"]["placer.dev/pod-group"] == "train"
    # The controller asks once a minute whether PodGroups are served: a CRD installed just now may wait that.
    wait_until(lambda: owners() == [first["metadata"]["uid"]], timeout=90, what="the first Job's PodGroup")

    cluster.api.delete(f"{jobs}/train", options)

    def job_gone() -> bool:
        """Background: gone at once. Orphan: once the garbage collector has orphaned the PodGroup (the
        `orphan` finalizer holds the Job until then)."""
        try:
            cluster.api.get(f"{jobs}/train")
        except ApiError as error:
            return error.code == 404
        return False

    wait_until(job_gone, timeout=60, what="the old Job to be gone")
    second = cluster.api.create(jobs, _job(suspend=False))  # at once: the old PodGroup may well be there still
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    wait_until(lambda: owners() == [second["metadata"]["uid"]], timeout=60,
               what="a PodGroup owned by the Job created again")
    time.sleep(10)  # the garbage collector has looked at the old Job's dependents by now
    assert owners() == [second["metadata"]["uid"]], "the new PodGroup stays"
    assert cluster.api.get(f"{groups}/train")["spec"]["minMember"] == 2

    pods = f"/api/v1/namespaces/{namespace}/pods"

    def scheduled() -> bool:
        found = [pod for pod in cluster.api.get(pods, {"labelSelector": "job-name=train"})["items"]
                 if pod["metadata"].get("ownerReferences", [{}])[0].get("uid") == second["metadata"]["uid"]]
        return len(found) == 2 and all(pod["spec"].get("nodeName") for pod in found)

    wait_until(scheduled, timeout=120, what="the gang's two pods to be scheduled")
    cluster.api.delete(f"{jobs}/train", BACKGROUND)
    cluster.delete_policy(policy)
