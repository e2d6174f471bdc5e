"""`createPodGroup: true`: the admission marks the workload, the controller keeps its PodGroup.

Workloads are the captured Job and Deployment creates as Placer mutates them (then stored by the fake API
server, which gives them a uid); PodGroups are written to the fake API server, which answers as
kube-apiserver does (201, 409 AlreadyExists/Conflict, 404 for an object, 404 "could not find the requested
resource" when the CRD is not installed).
"""

import copy
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import Clock, compile_errors, review_for, run, snapshot_of
from tests.kube.fake_apiserver import DEPLOYMENTS, JOBS, PODGROUPS, FakeApiServer, wait_for
from tests.kube.marked_workloads import GANG, captured, marked_job, mutated
from webhook.cluster.client.api import KubeApi
from webhook.cluster.podgroups.pod_groups import PodGroupKeeper
from webhook.workloads import default_workload_table

# -- admission: the mark on the workload ---------------------------------------------------------------------

def test_a_job_is_marked_on_its_own_metadata_and_its_pods_carry_the_group() -> None:
    job, mutation = mutated(captured("job-create-real"))
    assert job["metadata"]["labels"] == {"app": "batch-train", "placer.dev/pod-group": "batch-train"}
    assert "placer.dev/pod-group-min-member" not in job["metadata"]["annotations"]
    assert job["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "batch-train"
    assert "placer.dev/pod-group" not in job["spec"]["template"]["metadata"]["labels"], "not on the pods"
    assert mutation.warnings == [  # the pods keep default-scheduler: said, the gang is not enforced
        "rule training/gang: coscheduling gang on default-scheduler: not enforced, pods start one by one; "
        "set schedulerName in this rule's parameters (e.g. scheduler-plugins-scheduler)"]
    again = run(snapshot_of(GANG % ""), review_for(job))
    assert again.patch == [], "marking is idempotent"


def test_a_fixed_min_available_is_carried_by_an_annotation() -> None:
    deployment, _ = mutated(captured("deployment-create-real"), GANG % ", minAvailable: 2")
    assert deployment["metadata"]["annotations"]["placer.dev/pod-group-min-member"] == "2"
    assert deployment["metadata"]["labels"]["placer.dev/pod-group"] == deployment["metadata"]["name"]
    unfixed, _ = mutated(copy.deepcopy(deployment))  # the rule no longer fixes it: the annotation goes
    assert "placer.dev/pod-group-min-member" not in unfixed["metadata"]["annotations"]


@pytest.mark.parametrize("obj", ["pod-bare-create-real", "daemonset-create-real"])
def test_what_cannot_own_a_pod_group_gets_the_labels_and_a_warning(obj: str) -> None:
    original = captured(obj)
    result, mutation = mutated(original)
    assert result["metadata"].get("labels", {}).get("placer.dev/pod-group") is None
    assert any("cannot own a PodGroup Placer keeps" in warning for warning in mutation.warnings)


def test_create_pod_group_is_for_coscheduling_only() -> None:
    text = GANG.replace("coscheduling", "volcano") % ""
    assert any("createPodGroup: only for scheduler coscheduling" in error for error in compile_errors(text))


# -- the controller's keeper ----------------------------------------------------------------------------------

@pytest.fixture
def keeper(api: KubeApi, apiserver: FakeApiServer) -> Iterator[tuple[PodGroupKeeper, Clock]]:
    clock = Clock()
    keeper = PodGroupKeeper(api, default_workload_table(), monotonic=clock, recheck=60, retry=5)
    stop = threading.Event()
    threads = [threading.Thread(target=r.run, args=(stop,), daemon=True) for r in keeper.reflectors]
    for thread in threads:
        thread.start()
    yield keeper, clock
    stop.set()
    while any(thread.is_alive() for thread in threads):  # no watch left to open a connection after this
        apiserver.drop_watches()
        time.sleep(0.05)


def pod_group(apiserver: FakeApiServer, name: str, namespace: str = "team-a") -> dict[str, Any] | None:
    return apiserver.objects[PODGROUPS].get(f"{namespace}/{name}")


def settle(keeper: PodGroupKeeper, wanted: int) -> None:
    """Wait for the watches to deliver `wanted` workloads waiting, then reconcile once."""
    wait_for(lambda: keeper.waiting == wanted, what=f"{wanted} workloads waiting")
    keeper.reconcile()


def test_a_marked_job_gets_its_pod_group_owned_by_it_and_following_its_size(
        apiserver: FakeApiServer, keeper: tuple[PodGroupKeeper, Clock]) -> None:
    groups, _ = keeper
    stored = apiserver.put(JOBS, marked_job("train", parallelism=4))
    apiserver.put(JOBS, {**captured("job-create-real"), "metadata": {"name": "unmarked", "namespace": "team-a"}})
    settle(groups, 1)
    created = pod_group(apiserver, "train")
    assert created is not None and created["spec"] == {"minMember": 4}
    assert created["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "placer"}
    assert created["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                                      "uid": stored["metadata"]["uid"], "controller": True}]
    assert groups.waiting == 0 and [w[0] for w in apiserver.podgroup_writes] == ["POST"]

    apiserver.put(JOBS, {**stored, "spec": {**stored["spec"], "parallelism": 6, "completions": 12}})
    settle(groups, 1)
    updated = pod_group(apiserver, "train")
    assert updated is not None and updated["spec"] == {"minMember": 6}
    assert updated["metadata"]["ownerReferences"][0]["uid"] == stored["metadata"]["uid"]
    groups.reconcile()
    assert [w[0] for w in apiserver.podgroup_writes] == ["POST", "PUT"], "nothing written when nothing changed"


def test_a_deployment_scaled_updates_min_member_and_a_fixed_size_stays(
        apiserver: FakeApiServer, keeper: tuple[PodGroupKeeper, Clock]) -> None:
    groups, _ = keeper
    deployment, _ = mutated(captured("deployment-create-real"))
    stored = apiserver.put(DEPLOYMENTS, deployment)
    name = stored["metadata"]["name"]
    settle(groups, 1)
    assert pod_group(apiserver, name)["spec"]["minMember"] == stored["spec"]["replicas"]  # type: ignore[index]
    apiserver.put(DEPLOYMENTS, {**stored, "spec": {**stored["spec"], "replicas": 7}})
    settle(groups, 1)
    assert pod_group(apiserver, name)["spec"]["minMember"] == 7  # type: ignore[index]
    fixed, _ = mutated(stored, GANG % ", minAvailable: 2")
    apiserver.put(DEPLOYMENTS, {**fixed, "spec": {**fixed["spec"], "replicas": 7}})
    settle(groups, 1)
    assert pod_group(apiserver, name)["spec"]["minMember"] == 2  # type: ignore[index]


def test_a_conflicting_write_is_tried_again_later(
        apiserver: FakeApiServer, keeper: tuple[PodGroupKeeper, Clock]) -> None:
    groups, clock = keeper
    apiserver.put(JOBS, marked_job("train", parallelism=4))
    apiserver.fail("POST", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/podgroups", 409, "AlreadyExists")
    settle(groups, 1)
    assert pod_group(apiserver, "train") is None and groups.waiting == 1
    groups.reconcile()
    assert pod_group(apiserver, "train") is None, "not retried in a tight loop"
    clock.now += 6
    groups.reconcile()
    assert pod_group(apiserver, "train") is not None and groups.waiting == 0


def test_a_users_own_pod_group_is_left_alone(
        apiserver: FakeApiServer, keeper: tuple[PodGroupKeeper, Clock], caplog: pytest.LogCaptureFixture) -> None:
    groups, _ = keeper
    apiserver.put(PODGROUPS, {"metadata": {"name": "train", "namespace": "team-a"},
                              "spec": {"minMember": 2, "scheduleTimeoutSeconds": 60}})
    apiserver.put(JOBS, marked_job("train", parallelism=4))
    with caplog.at_level(logging.WARNING, logger="webhook.cluster.podgroups.pod_groups"):
        settle(groups, 1)
        groups.reconcile()
    kept = pod_group(apiserver, "train")
    assert kept is not None and kept["spec"] == {"minMember": 2, "scheduleTimeoutSeconds": 60}
    assert apiserver.podgroup_writes == []
    assert caplog.text.count("that Placer did not make for this workload; left alone") == 1


def test_without_the_pod_group_crd_the_controller_says_so_and_creates_them_once_it_is_installed(
        apiserver: FakeApiServer, keeper: tuple[PodGroupKeeper, Clock], caplog: pytest.LogCaptureFixture) -> None:
    groups, clock = keeper
    apiserver.podgroups_served = False
    apiserver.put(JOBS, marked_job("train", parallelism=4))
    apiserver.put(JOBS, marked_job("eval", parallelism=2))
    with caplog.at_level(logging.INFO, logger="webhook.cluster.podgroups.pod_groups"):
        settle(groups, 2)
        for _ in range(5):
            groups.reconcile()  # the controller's loop goes round: one discovery call a minute, not one a round
        discovery = [p for m, p, _ in apiserver.requests if p == "/apis/scheduling.x-k8s.io/v1alpha1"]
        assert len(discovery) == 1
        assert "PodGroups are not served by the API server (scheduling.x-k8s.io/v1alpha1: is the scheduler-plugins " \
               "PodGroup CRD installed?); 2 workloads wait for their PodGroup" in caplog.text
        apiserver.podgroups_served = True
        clock.now += 61
        groups.reconcile()
    assert pod_group(apiserver, "train") is not None and pod_group(apiserver, "eval") is not None
    assert "PodGroups are served now" in caplog.text


def test_a_deleted_workload_is_forgotten(apiserver: FakeApiServer, keeper: tuple[PodGroupKeeper, Clock]) -> None:
    groups, _ = keeper
    apiserver.put(JOBS, marked_job("train", parallelism=4))
    settle(groups, 1)
    assert groups.marked == 1
    apiserver.delete(JOBS, "team-a/train")
    wait_for(lambda: groups.marked == 0, what="the deletion")
    groups.reconcile()
    assert len(apiserver.podgroup_writes) == 1, "the PodGroup goes with its owner (garbage collection)"


def test_a_failed_discovery_is_asked_again_only_after_the_retry_delay(
        apiserver: FakeApiServer, keeper: tuple[PodGroupKeeper, Clock]) -> None:
    groups, clock = keeper
    apiserver.put(JOBS, marked_job("train", parallelism=4))
    apiserver.fail("GET", "/apis/scheduling.x-k8s.io/v1alpha1", 503, "ServiceUnavailable")
    settle(groups, 1)
    for _ in range(3):
        groups.reconcile()
    discovery = [p for m, p, _ in apiserver.requests if p == "/apis/scheduling.x-k8s.io/v1alpha1"]
    assert len(discovery) == 1 and pod_group(apiserver, "train") is None
    clock.now += 6
    groups.reconcile()
    assert pod_group(apiserver, "train") is not None


# -- a workload deleted and created again under its name (issue: the gang waited forever) ---------------------

def owner_uids(group: dict[str, Any] | None) -> list[str]:
    assert group is not None, "no PodGroup"
    return [ref["uid"] for ref in group["metadata"].get("ownerReferences") or []]


def test_a_job_created_again_under_its_name_gets_its_pod_group_made_again_for_the_new_uid(
        apiserver: FakeApiServer, keeper: tuple[PodGroupKeeper, Clock]) -> None:
    """`kubectl delete job train && kubectl create -f job.yaml` before the garbage collector removed the old
    PodGroup: Placer's PodGroup owned by the old uid is stale (not a user's), deleted with preconditions and
    made again for the new Job."""
    groups, _ = keeper
    first = apiserver.put(JOBS, marked_job("train", parallelism=4))
    settle(groups, 1)
    old_group = pod_group(apiserver, "train")
    assert owner_uids(old_group) == [first["metadata"]["uid"]]
    apiserver.delete(JOBS, "team-a/train")  # the fake has no garbage collector: the old PodGroup stays
    second = apiserver.put(JOBS, marked_job("train", parallelism=6))
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    settle(groups, 1)
    made = pod_group(apiserver, "train")
    assert owner_uids(made) == [second["metadata"]["uid"]] and made["spec"] == {"minMember": 6}  # type: ignore[index]
    assert made["metadata"]["uid"] != old_group["metadata"]["uid"], "a new object: no status of the old gang"  # type: ignore[index]
    assert [w[0] for w in apiserver.podgroup_writes] == ["POST", "DELETE", "POST"]
    assert apiserver.podgroup_writes[1][2]["preconditions"] == {
        "uid": old_group["metadata"]["uid"], "resourceVersion": old_group["metadata"]["resourceVersion"]}  # type: ignore[index]
    assert groups.waiting == 0
    wait_for(lambda: apiserver.watch_requests(PODGROUPS), what="the PodGroup watch")
    groups.reconcile()
    assert len(apiserver.podgroup_writes) == 3, "settled: nothing more is written"


def test_a_pod_group_orphaned_by_its_jobs_deletion_is_made_again_for_the_job_created_next(
        apiserver: FakeApiServer, keeper: tuple[PodGroupKeeper, Clock]) -> None:
    """A batch/v1 Job deleted through the API orphans its dependents (pkg/registry/batch/job/strategy.go,
    DefaultGarbageCollectionPolicy): the garbage collector strips the PodGroup's owner reference."""
    groups, _ = keeper
    apiserver.put(PODGROUPS, {"metadata": {"name": "train", "namespace": "team-a",
                                           "labels": {"app.kubernetes.io/managed-by": "placer"}},
                              "spec": {"minMember": 4}, "status": {"phase": "Finished", "succeeded": 4}})
    job = apiserver.put(JOBS, marked_job("train", parallelism=4))
    settle(groups, 1)
    made = pod_group(apiserver, "train")
    assert owner_uids(made) == [job["metadata"]["uid"]] and "status" not in made  # type: ignore[operator]
    assert [w[0] for w in apiserver.podgroup_writes] == ["DELETE", "POST"]


def test_a_pod_group_of_another_workload_or_without_placers_label_is_not_stale(
        apiserver: FakeApiServer, keeper: tuple[PodGroupKeeper, Clock]) -> None:
    groups, _ = keeper
    other = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "9d0c1f4e", "controller": True}
    apiserver.put(PODGROUPS, {"metadata": {"name": "train", "namespace": "team-a", "ownerReferences": [other],
                                           "labels": {"app.kubernetes.io/managed-by": "placer"}},
                              "spec": {"minMember": 2}})
    apiserver.put(PODGROUPS, {"metadata": {"name": "eval", "namespace": "team-a"}, "spec": {"minMember": 2}})
    apiserver.put(JOBS, marked_job("train", parallelism=4))
    apiserver.put(JOBS, marked_job("eval", parallelism=4))
    settle(groups, 2)
    assert apiserver.podgroup_writes == [], "another workload's PodGroup and a user's own are left alone"


def test_a_users_pod_group_deleted_later_is_replaced_by_placers_at_once(
        apiserver: FakeApiServer, keeper: tuple[PodGroupKeeper, Clock]) -> None:
    """What was settled as someone else's is looked at again when its PodGroup is deleted: its DELETED event,
    not a workload event, makes the controller look."""
    groups, _ = keeper
    apiserver.put(PODGROUPS, {"metadata": {"name": "train", "namespace": "team-a"}, "spec": {"minMember": 2}})
    job = apiserver.put(JOBS, marked_job("train", parallelism=4))
    settle(groups, 1)
    assert apiserver.podgroup_writes == [] and groups.waiting == 0
    wait_for(lambda: apiserver.watch_requests(PODGROUPS), what="the PodGroup watch")
    apiserver.put(PODGROUPS, {"metadata": {"name": "train", "namespace": "team-a"}, "spec": {"minMember": 3},
                              "status": {"phase": "Running"}})
    time.sleep(0.3)
    groups.reconcile()
    assert apiserver.podgroup_writes == [], "a change to the user's PodGroup is not a reason to write"
    apiserver.delete(PODGROUPS, "team-a/train")
    made = wait_for(lambda: groups.reconcile() or pod_group(apiserver, "train"), what="Placer's PodGroup")
    assert owner_uids(made) == [job["metadata"]["uid"]] and made["spec"] == {"minMember": 4}


def test_a_stale_pod_group_being_deleted_is_waited_for_and_made_when_its_deletion_event_comes(
        apiserver: FakeApiServer, keeper: tuple[PodGroupKeeper, Clock]) -> None:
    groups, clock = keeper
    first = apiserver.put(JOBS, marked_job("train", parallelism=4))
    settle(groups, 1)
    wait_for(lambda: apiserver.watch_requests(PODGROUPS), what="the PodGroup watch")
    stale = pod_group(apiserver, "train")
    assert stale is not None
    # The garbage collector's foreground deletion (or a finalizer) holds the old PodGroup for a while.
    stale["metadata"].update(finalizers=["foregroundDeletion"], deletionTimestamp="2026-11-25T10:00:00Z")
    apiserver.put(PODGROUPS, stale)
    apiserver.delete(JOBS, "team-a/train")
    second = apiserver.put(JOBS, marked_job("train", parallelism=4))
    settle(groups, 1)
    assert owner_uids(pod_group(apiserver, "train")) == [first["metadata"]["uid"]], "not touched while deleted"
    assert groups.waiting == 1
    started = clock.now
    apiserver.delete(PODGROUPS, "team-a/train")  # the finalizer is done: gone
    made = wait_for(lambda: groups.reconcile() or pod_group(apiserver, "train"), what="the PodGroup made again")
    assert clock.now == started, "made on the DELETED event, not after the retry delay"
    assert made["metadata"]["ownerReferences"][0]["uid"] == second["metadata"]["uid"]
    assert owner_uids(pod_group(apiserver, "train")) == [second["metadata"]["uid"]]
