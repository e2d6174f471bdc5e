"""The controller keeps kube-scheduler's PodGroup of each workload marked by a `scheduler: native` rule.

`NativeApi` answers as kube-apiserver v1.36.2 did (`tests/fixtures/kube-1.36/reactions/`): a created PodGroup
is stored with the finalizer `scheduling.k8s.io/podgroup-protection` and `disruptionMode: Pod`; a second
create of the same name is 409 AlreadyExists; a v1alpha2 `minCount` change is 422 "field is immutable"
(`d3-podgroup-mincount-update-4-to-6.txt`); a version that is not served is 404 "the server could not find the
requested resource" (`b4-podgroup-create-gates-off.txt`). v1beta1 lets `minCount` change (1.37,
`staging/src/k8s.io/api/scheduling/v1beta1/types.go`, `GangSchedulingPolicy.MinCount`).
"""

import copy
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.helpers import Clock
from tests.kube.discovery_captures import serve_discovery
from tests.kube.fake_apiserver import POLICIES, FakeApiServer, wait_for
from tests.kube.marked_workloads import NATIVE_GANG as NATIVE
from tests.kube.marked_workloads import marked_job
from webhook.cluster.client.api import ApiError, KubeApi
from webhook.cluster.client.discovery import ServedApis, discover
from webhook.cluster.client.leader import LeaseElector
from webhook.cluster.controller import LEASE_NAME, ClusterController
from webhook.cluster.podgroups.native_gang import native_version_of
from webhook.cluster.podgroups.pod_groups import PodGroupKeeper
from webhook.commands.cli import main
from webhook.gang.native import NOT_SERVED
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.state.cluster_state import policies_path, read_state
from webhook.workloads import default_workload_table

JOB = default_workload_table().lookup("batch", "Job")
GONE = "the server could not find the requested resource"


class NativeApi:
    """kube-scheduler's PodGroups as kube-apiserver stores them, for the served versions."""

    def __init__(self, served: tuple[str, ...] = ("v1alpha2",)) -> None:
        self.served = served
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []
        self.requests = 0
        self.conflict_next_create = False

    def _parse(self, path: str) -> tuple[str, str, str]:
        parts = path.split("/")  # '', apis, scheduling.k8s.io, VERSION, namespaces, NS, podgroups[, NAME]
        if parts[3] not in self.served:
            raise ApiError(404, "NotFound", GONE)
        return parts[3], parts[5], parts[7] if len(parts) > 7 else ""

    def get(self, path: str, query: Any = None, *, timeout: float | None = None) -> dict[str, Any]:
        self.requests += 1
        _, namespace, name = self._parse(path)
        found = self.objects.get(f"{namespace}/{name}")
        if found is None:
            raise ApiError(404, "NotFound", f'podgroups.scheduling.k8s.io "{name}" not found')
        return copy.deepcopy(found)

    def create(self, path: str, body: dict[str, Any], query: Any = None) -> dict[str, Any]:
        self.requests += 1
        version, namespace, _ = self._parse(path)
        name = body["metadata"]["name"]
        if self.conflict_next_create or f"{namespace}/{name}" in self.objects:
            self.conflict_next_create = False
            raise ApiError(409, "AlreadyExists", f'podgroups.scheduling.k8s.io "{name}" already exists')
        assert body["apiVersion"] == f"scheduling.k8s.io/{version}"
        stored = copy.deepcopy(body)
        stored["metadata"].update(uid=str(uuid.uuid4()), finalizers=["scheduling.k8s.io/podgroup-protection"])
        stored["spec"].update(disruptionMode="Pod", podGroupTemplateRef=None)
        self.objects[f"{namespace}/{name}"] = stored
        self.writes.append(("POST", f"{namespace}/{name}"))
        return copy.deepcopy(stored)

    def delete(self, path: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """With the finalizer the API server adds, a delete only marks the PodGroup (deletionTimestamp)."""
        self.requests += 1
        _, namespace, name = self._parse(path)
        key = f"{namespace}/{name}"
        stored = self.objects[key]
        wanted = (options or {}).get("preconditions") or {}
        if any(stored["metadata"].get(field) != value for field, value in wanted.items()):
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on podgroups "{name}": precondition')
        stored["metadata"]["deletionTimestamp"] = "2026-11-25T14:00:00Z"
        self.writes.append(("DELETE", key))
        return copy.deepcopy(stored)

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        version, namespace, name = self._parse(path)
        key = f"{namespace}/{name}"
        if version == "v1alpha2" and body["spec"]["schedulingPolicy"] != self.objects[key]["spec"]["schedulingPolicy"]:
            raise ApiError(422, "Invalid", f'PodGroup.scheduling.k8s.io "{name}" is invalid: spec.schedulingPolicy: '
                                           "Invalid value: null: field is immutable")
        if body["metadata"].get("resourceVersion") != self.objects[key]["metadata"].get("resourceVersion"):
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on podgroups "{name}": modified')
        self.writes.append(("PUT", key))
        if body["metadata"].get("deletionTimestamp") and not body["metadata"].get("finalizers"):
            del self.objects[key]  # the last finalizer lifted from a deleted object: it is gone
            return copy.deepcopy(body)
        self.objects[key] = copy.deepcopy(body)
        return copy.deepcopy(body)


def keeper_for(api: NativeApi, version: str | None = "v1alpha2") -> tuple[PodGroupKeeper, Clock, list[str | None]]:
    clock = Clock()
    served: list[str | None] = [version]
    keeper = PodGroupKeeper(api, default_workload_table(), monotonic=clock, retry=5,  # type: ignore[arg-type]
                            native_version=lambda: served[0])
    return keeper, clock, served


def stored_job(name: str = "train", parallelism: int = 4, uid: str = "uid-1") -> dict[str, Any]:
    job = marked_job(name, parallelism=parallelism, policy=NATIVE)
    job["metadata"]["uid"] = uid
    return job


def test_a_marked_job_gets_one_pod_group_owned_by_it_and_nothing_is_written_twice() -> None:
    api = NativeApi()
    keeper, _, _ = keeper_for(api)
    job = stored_job()
    assert job["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "train"}
    keeper.want("Job/team-a/train", JOB, job)  # type: ignore[arg-type]
    keeper.reconcile()
    group = api.objects["team-a/train"]
    assert group["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert group["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "uid-1", "controller": True}]
    assert group["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "placer"}
    requests = api.requests
    for _ in range(3):
        keeper.reconcile()
    assert api.writes == [("POST", "team-a/train")] and api.requests == requests, "settled: not asked again"


def test_on_v1alpha2_a_larger_gang_keeps_its_min_count_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    """Growing needs no change: the new pods join a group already placed (`Permit` counts the placed ones)."""
    api = NativeApi()
    keeper, _, _ = keeper_for(api)
    keeper.want("Job/team-a/train", JOB, stored_job())  # type: ignore[arg-type]
    keeper.reconcile()
    with caplog.at_level(logging.INFO, logger="webhook.cluster.podgroups.native_gang"):
        keeper.want("Job/team-a/train", JOB, stored_job(parallelism=6))  # type: ignore[arg-type]
        keeper.reconcile()
        keeper.reconcile()
    assert api.objects["team-a/train"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert api.writes == [("POST", "team-a/train")]
    assert caplog.text.count("the gang is 6 now; minCount stays 4 (immutable in v1alpha2)") == 1
    assert keeper.waiting == 0, "settled: no write storm against an immutable field"


def test_on_v1alpha2_a_job_with_finished_pods_gets_its_pod_group_made_again_smaller() -> None:
    """7 of 8 completions done: kube-scheduler no longer counts those pods, so the last one (or a replacement
    of it) could never see 4 members. The immutable PodGroup is deleted, its protection finalizer lifted, and made again
    with minCount 1 (KubeRay's v1alpha2 integration does the same)."""
    api = NativeApi()
    keeper, clock, _ = keeper_for(api)
    keeper.want("Job/team-a/train", JOB, stored_job())  # type: ignore[arg-type]
    keeper.reconcile()
    first_uid = api.objects["team-a/train"]["metadata"]["uid"]
    finished = stored_job()
    assert finished["spec"]["completions"] == 8 and finished["spec"]["parallelism"] == 4
    finished["status"] = {"succeeded": 7, "active": 1, "failed": 1}
    keeper.want("Job/team-a/train", JOB, finished)  # type: ignore[arg-type]
    keeper.reconcile()
    assert api.writes == [("POST", "team-a/train"), ("DELETE", "team-a/train"), ("PUT", "team-a/train")]
    assert "team-a/train" not in api.objects, "the finalizer lifted: gone"
    clock.now += 6
    keeper.reconcile()
    group = api.objects["team-a/train"]
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 1}}
    assert group["metadata"]["uid"] != first_uid
    assert keeper.waiting == 0


def test_on_v1beta1_a_job_with_finished_pods_lowers_min_count_in_place() -> None:
    api = NativeApi(served=("v1beta1",))
    keeper, _, _ = keeper_for(api, "v1beta1")
    keeper.want("Job/team-a/train", JOB, stored_job())  # type: ignore[arg-type]
    keeper.reconcile()
    finished = stored_job()
    finished["status"] = {"succeeded": 6, "active": 2}
    keeper.want("Job/team-a/train", JOB, finished)  # type: ignore[arg-type]
    keeper.reconcile()
    assert api.objects["team-a/train"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert api.writes == [("POST", "team-a/train"), ("PUT", "team-a/train")]


def test_on_v1beta1_a_scaled_job_moves_its_min_count() -> None:
    api = NativeApi(served=("v1beta1", "v1alpha2"))
    keeper, _, _ = keeper_for(api, "v1beta1")
    keeper.want("Job/team-a/train", JOB, stored_job())  # type: ignore[arg-type]
    keeper.reconcile()
    keeper.want("Job/team-a/train", JOB, stored_job(parallelism=6))  # type: ignore[arg-type]
    keeper.reconcile()
    group = api.objects["team-a/train"]
    assert group["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 6}}
    assert group["metadata"]["finalizers"] == ["scheduling.k8s.io/podgroup-protection"], "the rest kept"
    assert api.writes == [("POST", "team-a/train"), ("PUT", "team-a/train")]


def test_two_replicas_make_one_pod_group_and_a_409_is_taken_calmly() -> None:
    api = NativeApi()
    first, _, _ = keeper_for(api)
    second, clock, _ = keeper_for(api)
    for keeper in (first, second):
        keeper.want("Job/team-a/train", JOB, stored_job())  # type: ignore[arg-type]
    api.conflict_next_create = True  # the other replica created it between this one's GET and POST
    second.reconcile()
    first.reconcile()
    assert api.writes == [("POST", "team-a/train")] and second.waiting == 1
    clock.now += 6
    second.reconcile()
    assert api.writes == [("POST", "team-a/train")] and second.waiting == 0


@pytest.mark.parametrize("orphaned", [False, True])
def test_a_job_recreated_under_the_same_name_gets_its_pod_group_once_the_old_one_is_gone(orphaned: bool) -> None:
    """The old Job's PodGroup (owned by the old uid, or by nothing: a Job deleted through the API orphans its
    dependents) is deleted, waited for while its finalizer holds it, then made again for the new Job."""
    api = NativeApi()
    keeper, clock, _ = keeper_for(api)
    keeper.want("Job/team-a/train", JOB, stored_job(uid="old"))  # type: ignore[arg-type]
    keeper.reconcile()
    if orphaned:
        api.objects["team-a/train"]["metadata"]["ownerReferences"] = []
    keeper.want("Job/team-a/train", JOB, stored_job(uid="new"))  # type: ignore[arg-type]
    keeper.reconcile()
    old = api.objects["team-a/train"]
    assert old["metadata"].get("deletionTimestamp") and api.writes[-1] == ("DELETE", "team-a/train")
    clock.now += 6
    keeper.reconcile()
    assert api.objects["team-a/train"] is old and api.writes[-1] == ("DELETE", "team-a/train"), "waited for"
    del api.objects["team-a/train"]  # the finalizer let it go: gone
    keeper.reconcile()
    assert "team-a/train" not in api.objects, "tried again only after the retry delay"
    clock.now += 6
    keeper.reconcile()
    assert api.objects["team-a/train"]["metadata"]["ownerReferences"][0]["uid"] == "new"


def test_a_users_pod_group_of_that_name_is_left_alone() -> None:
    api = NativeApi()
    api.objects["team-a/train"] = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                                   "metadata": {"name": "train", "namespace": "team-a"},
                                   "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    keeper, _, _ = keeper_for(api)
    keeper.want("Job/team-a/train", JOB, stored_job())  # type: ignore[arg-type]
    keeper.reconcile()
    assert api.writes == [] and api.objects["team-a/train"]["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2


def test_nothing_is_asked_while_no_version_is_served_and_the_group_comes_when_one_is() -> None:
    api = NativeApi()
    keeper, _, served = keeper_for(api, NOT_SERVED)
    keeper.want("Job/team-a/train", JOB, stored_job())  # type: ignore[arg-type]
    for _ in range(3):
        keeper.reconcile()
    assert api.requests == 0 and keeper.waiting == 1
    served[0] = "v1alpha2"
    keeper.reconcile()
    assert api.writes == [("POST", "team-a/train")]


@pytest.mark.parametrize("gates, version", [("gates-on", "v1alpha2"), ("gates-off", NOT_SERVED)])
def test_the_version_written_is_what_discovery_of_the_captured_api_server_says(
        apiserver: FakeApiServer, api: KubeApi, gates: str, version: str) -> None:
    serve_discovery(apiserver, gates)
    assert native_version_of(discover(api)) == version
    assert native_version_of(ServedApis()) is None, "discovery not read: nothing known, nothing said"


# -- the controller: the policy's status and what the workers learn -----------------------------------------

@pytest.mark.parametrize("gates", ["gates-off", "gates-on"])
def test_no_pod_group_api_is_a_condition_of_the_policy_and_reaches_the_workers(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path, gates: str) -> None:
    serve_discovery(apiserver, gates)
    state = tmp_path / "state"
    elector = LeaseElector(api, namespace="placer-system", name=LEASE_NAME, identity="placer-a", lease_seconds=3)
    controller = ClusterController(api, state, compiler=PolicyCompiler(), elector=elector, election_interval=0.1,
                                   served=discover(api))
    apiserver.put_policy({"metadata": {"name": "native"}, "spec": {"rules": [
        {"name": "gang", "action": "add-gang-labels", "parameters": {"scheduler": "native"}}]}})
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: policies_path(state).exists() and read_state(state).policies, what="the state")
        assert read_state(state).native_gang_version == ("" if gates == "gates-off" else "v1alpha2")
        conditions = wait_for(lambda: (apiserver.objects[POLICIES]["native"].get("status") or {}).get("conditions"),
                              what="the status")
        healthy = next(c for c in conditions if c["type"] == "Healthy")
        if gates == "gates-off":
            assert (healthy["status"], healthy["reason"]) == ("False", "PodGroupAPINotServed")
            assert healthy["message"].startswith(
                "rule native/gang: native gang: the API server serves no PodGroup API (no version of scheduling.k8s.io "
                "serves PodGroup), so pods are admitted unchanged")
        else:
            assert healthy["reason"] != "PodGroupAPINotServed"
    finally:
        stop.set()
        while thread.is_alive() or any(t.is_alive() for t in controller.watch_threads):
            apiserver.drop_watches()
            time.sleep(0.05)


@pytest.mark.parametrize("gates, says", [
    ("gates-off", "indexed-job-gang: matched, nothing to change (native gang: the API server serves no PodGroup API"),
    ("gates-on", "indexed-job-gang: matched, changed the object"),
])
def test_placer_apply_kube_explains_with_what_the_cluster_serves(
        apiserver: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str], gates: str, says: str) -> None:
    serve_discovery(apiserver, gates)
    apiserver.put_namespace("training", {"gang-scheduler": "native"})
    apiserver.put_policy(yaml.safe_load((REPO / "policies" / "gang-native-jobs.yaml").read_text()))
    code = main(["apply", "--kube", "--kubeconfig", str(kubeconfig), "-f",
                 str(REPO / "docs" / "examples" / "native-gang" / "indexed-job.yaml"), "-o", "explain"])
    output = capsys.readouterr().out
    assert code == 0, output
    assert says in output
    assert {method for method, _, _ in apiserver.requests} == {"GET"}, "read, never written"


def test_ten_thousand_namespaces_cost_one_read_and_one_create_each_then_nothing() -> None:
    """No write storm: after the first round, a re-list (a watch reconnect) and further rounds read and write
    nothing for workloads that did not change."""
    api = NativeApi()
    keeper, _, _ = keeper_for(api)
    job = stored_job()
    workloads = {f"ns-{index}/train": {**job, "metadata": {**job["metadata"], "namespace": f"ns-{index}",
                                                           "uid": f"uid-{index}"}} for index in range(10_000)}
    keeper.replace(JOB, workloads)  # type: ignore[arg-type]
    keeper.reconcile()
    assert (api.requests, len(api.writes)) == (20_000, 10_000)
    keeper.replace(JOB, workloads)  # type: ignore[arg-type]
    keeper.reconcile()
    keeper.reconcile()
    assert (api.requests, len(api.writes)) == (20_000, 10_000)
