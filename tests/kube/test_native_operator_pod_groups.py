"""The controller keeps the kube-scheduler PodGroups of operator resources marked for native gangs.

`NativeApi` (tests/kube/test_native_pod_groups.py) answers as kube-apiserver v1.36.2 did for PodGroups; the
end-to-end tests run the real ClusterController against the fake API server, with discovery as the captured
v1.36.2 answered (gates on or off) and JobSet's CRD served or not.
"""

import copy
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.helpers import Clock, read_yaml, review_for, run, snapshot_of
from tests.kube.discovery_captures import serve_discovery
from tests.kube.fake_apiserver import JOBSETS, NATIVE_PODGROUPS, FakeApiServer, wait_for
from tests.kube.test_native_pod_groups import NativeApi
from webhook.cluster.client.api import KubeApi
from webhook.cluster.client.discovery import discover
from webhook.cluster.controller import ClusterController
from webhook.cluster.podgroups.native_operators import OperatorPodGroups
from webhook.gang.native import NOT_SERVED
from webhook.policy.compiler import PolicyCompiler
from webhook.workloads import default_workload_table

TABLE = default_workload_table()
JOBSET = TABLE.lookup("jobset.x-k8s.io", "JobSet")
RAYCLUSTER = TABLE.lookup("ray.io", "RayCluster")
GOLDEN = Path(__file__).parents[1] / "golden" / "cases"
POLICY = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: native}\nspec:\n  rules:\n"
          "  - {name: gang, action: add-gang-labels, parameters: {scheduler: native}}\n")
JOBSET_DISCOVERY = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "jobset.x-k8s.io/v1alpha2",
                    "resources": [{"name": "jobsets", "singularName": "jobset", "namespaced": True,
                                   "kind": "JobSet", "verbs": ["get", "list", "watch", "create", "update"]}]}
"""What kube-apiserver answers for a CRD's group version once JobSet's CRD is installed."""
LWS_DISCOVERY = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "leaderworkerset.x-k8s.io/v1",
                 "resources": [{"name": "leaderworkersets", "singularName": "leaderworkerset", "namespaced": True,
                                "kind": "LeaderWorkerSet", "verbs": ["get", "list", "watch", "create", "update"]}]}
"""The same for LeaderWorkerSet's CRD."""


def marked_jobset(uid: str = "uid-1", workers: int = 2) -> dict[str, Any]:
    """The JobSet of the golden case, as Placer's patch leaves it and the API server stores it."""
    given = read_yaml(GOLDEN / "gang-native-jobset" / "input.yaml")
    given["spec"]["replicatedJobs"][1]["replicas"] = workers
    mutation = run(snapshot_of(POLICY), review_for(given, namespace="training"))
    marked: dict[str, Any] = jsonpatch.apply_patch(given, mutation.patch)
    marked["metadata"]["uid"] = uid
    return marked


def keeper_for(api: NativeApi, version: str | None = "v1alpha2") -> tuple[OperatorPodGroups, Clock, list[str | None]]:
    clock = Clock()
    served: list[str | None] = [version]
    keeper = OperatorPodGroups(api, TABLE, native_version=lambda: served[0], monotonic=clock,  # type: ignore[arg-type]
                               retry=5)
    return keeper, clock, served


def test_a_jobset_gets_one_pod_group_per_child_job_owned_by_it_and_nothing_is_written_twice() -> None:
    api = NativeApi()
    keeper, _, _ = keeper_for(api)
    keeper.want("JobSet/training/tpu-train", JOBSET, "v1alpha2", marked_jobset())  # type: ignore[arg-type]
    keeper.reconcile()
    assert sorted(api.objects) == ["training/tpu-train-leader-0", "training/tpu-train-workers-0",
                                   "training/tpu-train-workers-1"]
    sizes = {key: group["spec"]["schedulingPolicy"]["gang"]["minCount"] for key, group in api.objects.items()}
    assert sizes == {"training/tpu-train-leader-0": 1, "training/tpu-train-workers-0": 4,
                     "training/tpu-train-workers-1": 4}
    for group in api.objects.values():
        assert group["apiVersion"] == "scheduling.k8s.io/v1alpha2"
        assert group["metadata"]["ownerReferences"] == [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                                         "name": "tpu-train", "uid": "uid-1", "controller": True}]
        assert group["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "placer"}
    requests = api.requests
    for _ in range(3):
        keeper.reconcile()
        keeper.want("JobSet/training/tpu-train", JOBSET, "v1alpha2", marked_jobset())  # type: ignore[arg-type]
    assert api.requests == requests and len(api.writes) == 3, "settled: neither read nor written again"


def test_a_replica_more_costs_the_one_new_pod_group() -> None:
    api = NativeApi()
    keeper, _, _ = keeper_for(api)
    keeper.want("JobSet/training/tpu-train", JOBSET, "v1alpha2", marked_jobset())  # type: ignore[arg-type]
    keeper.reconcile()
    requests = api.requests
    keeper.want("JobSet/training/tpu-train", JOBSET, "v1alpha2", marked_jobset(workers=3))  # type: ignore[arg-type]
    keeper.reconcile()
    assert api.writes[-1] == ("POST", "training/tpu-train-workers-2") and api.requests == requests + 2


def test_nothing_is_asked_while_no_version_is_served_and_the_groups_come_when_one_is() -> None:
    api = NativeApi()
    keeper, _, served = keeper_for(api, NOT_SERVED)
    keeper.want("JobSet/training/tpu-train", JOBSET, "v1alpha2", marked_jobset())  # type: ignore[arg-type]
    for _ in range(3):
        keeper.reconcile()
    assert api.requests == 0 and keeper.wanted == 3
    served[0] = "v1alpha2"
    keeper.reconcile()
    assert len(api.writes) == 3


def test_a_jobset_recreated_under_the_same_name_gets_its_pod_groups_once_the_old_ones_are_gone() -> None:
    api = NativeApi()
    keeper, clock, _ = keeper_for(api)
    keeper.want("JobSet/training/tpu-train", JOBSET, "v1alpha2", marked_jobset(uid="old"))  # type: ignore[arg-type]
    keeper.reconcile()
    keeper.want("JobSet/training/tpu-train", JOBSET, "v1alpha2", marked_jobset(uid="new"))  # type: ignore[arg-type]
    keeper.reconcile()
    assert [write for write in api.writes if write[0] == "DELETE"] == [
        ("DELETE", "training/tpu-train-leader-0"), ("DELETE", "training/tpu-train-workers-0"),
        ("DELETE", "training/tpu-train-workers-1")]
    for key in list(api.objects):
        del api.objects[key]  # the finalizer let them go
    clock.now += 6
    keeper.reconcile()
    assert {group["metadata"]["ownerReferences"][0]["uid"] for group in api.objects.values()} == {"new"}
    assert len(api.objects) == 3


def test_a_deleted_jobset_is_forgotten_and_a_rayjobs_cluster_wants_no_group_of_its_own() -> None:
    api = NativeApi()
    keeper, _, _ = keeper_for(api)
    keeper.want("JobSet/training/tpu-train", JOBSET, "v1alpha2", marked_jobset())  # type: ignore[arg-type]
    keeper.want("JobSet/training/tpu-train", JOBSET, "v1alpha2", None)  # type: ignore[arg-type]
    cluster = read_yaml(GOLDEN / "gang-native-raycluster" / "expected.yaml")
    cluster["metadata"].update(uid="c", ownerReferences=[{"apiVersion": "ray.io/v1", "kind": "RayJob",
                                                          "name": "batch", "uid": "j", "controller": True}])
    keeper.want("RayCluster/ray/raycluster-kuberay", RAYCLUSTER, "v1", cluster)  # type: ignore[arg-type]
    keeper.reconcile()
    assert keeper.wanted == 0 and api.requests == 0


# -- end to end: the controller watches JobSets once their CRD is served -------------------------------------

@pytest.fixture
def controller(apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> Iterator[ClusterController]:
    serve_discovery(apiserver, "gates-on")
    apiserver.put_policy({"metadata": {"name": "native"}, "spec": {"rules": [
        {"name": "gang", "action": "add-gang-labels", "parameters": {"scheduler": "native"}}]}})
    built = ClusterController(api, tmp_path / "state", compiler=PolicyCompiler(), elector=None,
                              served=discover(api))
    for reflector in built.operator_pod_groups.reflectors:
        reflector.recheck = 0.2  # ask discovery often: the test waits for it
    stop = threading.Event()
    thread = threading.Thread(target=built.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield built
    finally:
        stop.set()
        while thread.is_alive() or any(t.is_alive() for t in built.watch_threads):
            apiserver.drop_watches()
            time.sleep(0.05)


def test_the_controller_makes_the_pod_groups_of_a_watched_jobset_once_its_crd_is_served(
        apiserver: FakeApiServer, controller: ClusterController) -> None:
    apiserver.put_namespace("training")
    stored = apiserver.put(JOBSETS, {k: v for k, v in marked_jobset().items() if k != "status"})
    time.sleep(0.5)
    assert apiserver.objects[NATIVE_PODGROUPS] == {}, "JobSets are not served yet: not watched"
    assert not any(path == JOBSETS for _, path, _ in apiserver.requests)
    apiserver.other.setdefault("/apis/jobset.x-k8s.io", {})["v1alpha2"] = JOBSET_DISCOVERY
    groups = wait_for(lambda: len(apiserver.objects[NATIVE_PODGROUPS]) == 3 and apiserver.objects[NATIVE_PODGROUPS],
                      what="the JobSet's PodGroups")
    assert sorted(groups) == ["training/tpu-train-leader-0", "training/tpu-train-workers-0",
                              "training/tpu-train-workers-1"]
    for group in groups.values():
        assert group["metadata"]["ownerReferences"][0]["uid"] == stored["metadata"]["uid"]
    assert all(query.get("labelSelector") == "placer.dev/pod-group"
               for _, path, query in apiserver.requests if path == JOBSETS), "only the marked ones are sent"
    unmarked = copy.deepcopy(stored)
    unmarked["metadata"].update(name="plain", labels={})
    apiserver.put(JOBSETS, unmarked)
    time.sleep(0.5)
    assert len(apiserver.objects[NATIVE_PODGROUPS]) == 3, "an unmarked JobSet wants nothing"


def test_ten_thousand_namespaces_of_jobsets_cost_one_read_and_one_create_per_pod_group_then_nothing() -> None:
    """No write storm: 10,000 JobSets of 3 child Jobs in 10,000 namespaces cost one GET and one POST per
    PodGroup in the first round, and a re-list (a watch reconnect) and further rounds nothing."""
    api = NativeApi()
    keeper, _, _ = keeper_for(api)
    jobset = marked_jobset()
    resources = {f"ns-{index}/tpu-train": {**jobset, "metadata": {**jobset["metadata"], "namespace": f"ns-{index}",
                                                                   "uid": f"uid-{index}"}} for index in range(10_000)}
    keeper.replace(JOBSET, "v1alpha2", resources)  # type: ignore[arg-type]
    keeper.reconcile()
    assert (api.requests, len(api.writes)) == (60_000, 30_000)
    keeper.replace(JOBSET, "v1alpha2", resources)  # type: ignore[arg-type]
    keeper.reconcile()
    keeper.reconcile()
    assert (api.requests, len(api.writes)) == (60_000, 30_000)
