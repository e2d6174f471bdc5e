"""The controller against the fake API server: what it publishes to workers and what status it writes."""

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube.fake_apiserver import (
    CLAIMS,
    LEASES,
    NAMESPACES,
    NODES,
    POLICIES,
    TOKEN,
    VOLUMES,
    FakeApiServer,
    wait_for,
)
from tests.volumes.data import objects
from webhook.cluster.client.api import KubeApi, Timeouts
from webhook.cluster.client.connection import connect
from webhook.cluster.client.leader import LeaseElector
from webhook.cluster.controller import LEASE_NAME, ClusterController
from webhook.placement.claims import ClaimLookup
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.state.cluster_state import (
    ClusterState,
    ClusterStateSource,
    namespaces_directory,
    nodes_directory,
    policies_path,
    read_state,
)
from webhook.policy.state.namespace_shards import NamespaceShards
from webhook.policy.state.shards import shard_of, shard_path
from webhook.policy.state.volume_shards import VolumeShards


def policy(name: str, *, condition: str = "true", pool: str = "general", priority: int = 100) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"priority": priority, "rules": [
        {"name": "pool", "condition": condition, "action": "add-node-selector", "parameters": {"pool": pool}}]}}


class Running:
    def __init__(self, controller: ClusterController, state: Path, stop: threading.Event,
                 thread: threading.Thread) -> None:
        self.controller, self.state, self.stop, self.thread = controller, state, stop, thread

    def end(self, apiserver: FakeApiServer) -> None:
        """Stop it and wait until its watch threads are gone too (a controller process that has exited)."""
        self.stop.set()
        deadline = time.monotonic() + 10
        while self.thread.is_alive() or any(t.is_alive() for t in self.controller.watch_threads):
            assert time.monotonic() < deadline, "the controller did not stop"
            apiserver.drop_watches()  # a watch opened meanwhile notices `stop` when its stream ends
            time.sleep(0.05)

    def read(self) -> ClusterState | None:
        return read_state(self.state) if policies_path(self.state).exists() else None

    def namespaces(self) -> NamespaceShards:
        """What a worker reads of the namespaces (a fresh reader: nothing cached from an earlier look)."""
        return NamespaceShards(namespaces_directory(self.state))

    def serving(self) -> dict[str, Any]:
        state = self.read()
        return {p["metadata"]["name"]: p for p in state.policies} if state else {}


def start(api: KubeApi, apiserver: FakeApiServer, tmp_path: Path, *, identity: str = "replica-a",
          lease_seconds: int = 15, status: bool = True) -> Running:
    elector = (LeaseElector(api, namespace="placer-system", name=LEASE_NAME, identity=identity,
                            lease_seconds=lease_seconds) if status else None)
    state = tmp_path / identity
    controller = ClusterController(api, state, compiler=PolicyCompiler(), elector=elector, election_interval=0.2)
    for reflector in controller.reflectors:
        reflector._backoff = type(reflector._backoff)(initial=0.05, ceiling=0.2)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    return Running(controller, state, stop, thread)


@pytest.fixture
def running(api: KubeApi, apiserver: FakeApiServer, tmp_path: Path) -> Iterator[Running]:
    run = start(api, apiserver, tmp_path)
    yield run
    run.end(apiserver)


def ready_condition(apiserver: FakeApiServer, name: str) -> dict[str, Any] | None:
    status = apiserver.objects[POLICIES].get(name, {}).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), None)


def test_nothing_is_published_before_both_lists_succeed(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    apiserver.put_policy(policy("p1"))
    apiserver.fail("GET", "/api/v1/namespaces", 503, "ServiceUnavailable", times=5)
    run = start(api, apiserver, tmp_path, status=False)
    try:
        wait_for(lambda: len(apiserver.list_requests("/api/v1/namespaces")) >= 3, what="namespace retries")
        assert run.read() is None, "workers must stay not ready until the first sync"
        state = wait_for(run.read, what="the first published state")
        assert state.synced and [p["metadata"]["name"] for p in state.policies] == ["p1"]
    finally:
        run.end(apiserver)


def test_policies_and_namespace_labels_are_published_as_they_change(
        apiserver: FakeApiServer, running: Running) -> None:
    apiserver.put_namespace("team-a", {"team": "ml"}, {"placer.dev/inject": "enabled",
                                                      "kubectl.kubernetes.io/last-applied-configuration": "{...}"})
    apiserver.put_policy(policy("p1"))
    wait_for(lambda: "p1" in running.serving(), what="p1 published")
    wait_for(lambda: "team-a" in running.namespaces(), what="team-a published")
    team_a = running.namespaces()["team-a"]
    assert team_a.labels == {"kubernetes.io/metadata.name": "team-a", "team": "ml"}
    assert team_a.annotations == {"placer.dev/inject": "enabled"}, "the bulky last-applied annotation is dropped"
    assert "managedFields" not in running.serving()["p1"]["metadata"]
    assert "status" not in running.serving()["p1"]

    apiserver.put_policy(policy("p1", pool="gpu"))
    wait_for(lambda: running.serving()["p1"]["spec"]["rules"][0]["parameters"] == {"pool": "gpu"}, what="update")
    apiserver.delete(POLICIES, "p1")
    wait_for(lambda: "p1" not in running.serving(), what="deletion")


def test_a_broken_update_keeps_the_last_good_version_serving_and_says_so_in_status(
        apiserver: FakeApiServer, running: Running) -> None:
    apiserver.put_policy(policy("p1", pool="v1"))
    wait_for(lambda: (c := ready_condition(apiserver, "p1")) and c["status"] == "True", what="Ready=True")
    good = ready_condition(apiserver, "p1")
    assert good["reason"] == "Compiled" and good["observedGeneration"] == 1
    assert apiserver.objects[POLICIES]["p1"]["status"]["rules"] == 1

    apiserver.put_policy(policy("p1", pool="v2", condition="object.spec.replica > 1 &&"))
    condition = wait_for(lambda: (c := ready_condition(apiserver, "p1")) and c["status"] == "False" and c,
                         what="Ready=False")
    assert condition["reason"] == "CompileError"
    assert condition["observedGeneration"] == 2
    assert apiserver.objects[POLICIES]["p1"]["status"]["observedGeneration"] == 2
    message = condition["message"]
    assert message.startswith("1 error(s), generation 1 keeps serving: policy p1, rule pool, condition: <input>:1:")
    assert "cluster:" not in message
    assert running.serving()["p1"]["spec"]["rules"][0]["parameters"] == {"pool": "v1"}
    state = running.read()
    assert state is not None and [e.policy for e in state.errors] == ["p1"]

    apiserver.put_policy(policy("p1", pool="v3"))
    wait_for(lambda: running.serving()["p1"]["spec"]["rules"][0]["parameters"] == {"pool": "v3"}, what="fixed")
    wait_for(lambda: (c := ready_condition(apiserver, "p1")) and c["status"] == "True", what="Ready again")


def test_a_policy_that_never_compiled_does_not_serve(apiserver: FakeApiServer, running: Running) -> None:
    apiserver.put_policy(policy("broken", condition="1 + 1"))
    apiserver.put_policy(policy("fine"))
    condition = wait_for(lambda: ready_condition(apiserver, "broken"), what="status of broken")
    assert condition["status"] == "False"
    assert "this policy does not serve" in condition["message"] and "must return bool" in condition["message"]
    assert set(running.serving()) == {"fine"}, "a broken policy never takes down the others"


def test_status_is_not_rewritten_when_nothing_changed(apiserver: FakeApiServer, running: Running) -> None:
    apiserver.put_policy(policy("p1"))
    wait_for(lambda: ready_condition(apiserver, "p1"), what="status")
    first = ready_condition(apiserver, "p1")
    writes = len(apiserver.status_patches)
    apiserver.put_namespace("unrelated")  # unrelated traffic, and time passing
    wait_for(lambda: "unrelated" in running.namespaces(), what="namespace")
    time.sleep(1.0)
    assert len(apiserver.status_patches) == writes
    assert ready_condition(apiserver, "p1") == first


def test_only_the_lease_holder_writes_status_and_another_replica_takes_over_when_it_stops(
        apiserver: FakeApiServer, api: KubeApi, certificates: Any, tmp_path: Path) -> None:
    a = start(api, apiserver, tmp_path, identity="replica-a", lease_seconds=2)
    wait_for(lambda: LEASE_NAME in apiserver.leases, what="the Lease")
    config_b = apiserver.kubeconfig(tmp_path / "kubeconfig-b", certificates.ca_cert, token=TOKEN + "-b")
    api_b = KubeApi(connect(config_b), timeouts=Timeouts(connect=2, read=5, watch_idle=10))
    b = start(api_b, apiserver, tmp_path, identity="replica-b", lease_seconds=2)
    try:
        apiserver.put_policy(policy("p1"))
        wait_for(lambda: ready_condition(apiserver, "p1"), what="status")
        wait_for(lambda: b.read() and "p1" in b.serving(), what="replica b publishes too")
        assert apiserver.leases[LEASE_NAME]["spec"]["holderIdentity"] == "replica-a"
        time.sleep(0.5)
        assert {token for _, _, token in apiserver.status_patches} == {TOKEN}, "only replica a writes status"

        a.stop.set()  # replica a shuts down and releases the Lease
        apiserver.drop_watches()
        wait_for(lambda: apiserver.leases[LEASE_NAME]["spec"]["holderIdentity"] == "replica-b", what="takeover")
        apiserver.put_policy(policy("p1", condition="1 + 1"))
        wait_for(lambda: (c := ready_condition(apiserver, "p1")) and c["status"] == "False", what="b writes status")
        assert apiserver.status_patches[-1][2] == TOKEN + "-b"
        transitions = apiserver.leases[LEASE_NAME]["spec"]["leaseTransitions"]
        assert transitions == 1
    finally:
        a.end(apiserver)
        b.end(apiserver)


def test_a_lease_held_by_a_live_replica_is_not_taken(apiserver: FakeApiServer, api: KubeApi) -> None:
    elector_a = LeaseElector(api, namespace="placer-system", name="l", identity="a", lease_seconds=30)
    elector_b = LeaseElector(api, namespace="placer-system", name="l", identity="b", lease_seconds=30)
    assert elector_a.try_acquire_or_renew()
    assert not elector_b.try_acquire_or_renew()
    assert elector_a.try_acquire_or_renew(), "the holder renews"
    assert not elector_b.try_acquire_or_renew()
    assert apiserver.leases["l"]["spec"]["holderIdentity"] == "a"
    assert [m for m, p, _ in apiserver.requests if p.startswith(LEASES)].count("PUT") == 1


def test_an_expired_lease_is_taken_over_by_a_candidate_that_saw_it_unchanged(apiserver: FakeApiServer,
                                                                            api: KubeApi) -> None:
    clock = [0.0]
    elector_a = LeaseElector(api, namespace="placer-system", name="l", identity="a", lease_seconds=10,
                             monotonic=lambda: clock[0])
    elector_b = LeaseElector(api, namespace="placer-system", name="l", identity="b", lease_seconds=10,
                             monotonic=lambda: clock[0])
    assert elector_a.try_acquire_or_renew()
    assert not elector_b.try_acquire_or_renew()
    clock[0] = 7.0
    assert not elector_a.is_leader, "the holder stops acting before the lease can expire"
    clock[0] = 9.0
    assert not elector_b.try_acquire_or_renew(), "not yet a whole lease duration since b first saw this record"
    clock[0] = 10.5
    assert elector_b.try_acquire_or_renew()
    assert apiserver.leases["l"]["spec"]["holderIdentity"] == "b"
    assert apiserver.leases["l"]["spec"]["leaseTransitions"] == 1
    assert not elector_a.try_acquire_or_renew(), "a sees b's fresh record and stands down"


def test_a_conflicting_write_loses_the_election(apiserver: FakeApiServer, api: KubeApi) -> None:
    elector = LeaseElector(api, namespace="placer-system", name="l", identity="a")
    assert elector.try_acquire_or_renew()
    apiserver.fail("PUT", LEASES, 409, "Conflict")
    assert not elector.try_acquire_or_renew()


def test_workers_compile_the_published_state(apiserver: FakeApiServer, running: Running) -> None:
    apiserver.put_policy(policy("b-second", priority=200))
    apiserver.put_policy(policy("a-first", priority=10))
    wait_for(lambda: len(running.serving()) == 2, what="both policies")
    source = ClusterStateSource(running.state, compiler=PolicyCompiler())
    assert source.refresh()
    content = source.content()
    assert content.ready and sorted(content.policies) == ["a-first", "b-second"]
    assert all(p.source == "cluster" for p in content.policies.values())
    assert not source.refresh(), "an unchanged file is not recompiled"



def shard_name(namespace: str) -> str:
    return shard_path(Path(), shard_of(namespace)).name


def shard_stamps(running: Running) -> dict[str, int]:
    return {path.name: path.stat().st_ino for path in namespaces_directory(running.state).glob("*.json")}


def test_a_namespace_change_rewrites_its_shard_only_and_leaves_the_policies_alone(
        apiserver: FakeApiServer, running: Running) -> None:
    for index in range(40):
        apiserver.put_namespace(f"team-{index}", {"team": "a"})
    apiserver.put_policy(policy("p1"))
    wait_for(lambda: "p1" in running.serving() and "team-39" in running.namespaces(), what="first state")
    before, policies_before = shard_stamps(running), policies_path(running.state).stat().st_ino
    assert len(before) > 10, "40 namespaces are spread over many shards"

    apiserver.put_namespace("team-7", {"team": "b"})
    wait_for(lambda: running.namespaces()["team-7"].labels.get("team") == "b", what="the relabel")
    after = shard_stamps(running)
    assert [name for name in before if before[name] != after.get(name)] == [shard_name("team-7")]
    assert policies_path(running.state).stat().st_ino == policies_before, "policies.json is not rewritten"

    published = running.controller.namespaces.published
    namespace = dict(apiserver.objects[NAMESPACES]["team-7"])
    namespace["metadata"] = {**namespace["metadata"], "managedFields": [{"manager": "kubectl"}],
                             "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"}}
    apiserver.put(NAMESPACES, namespace)  # changes nothing namespaceObject shows
    apiserver.put_namespace("marker")
    wait_for(lambda: "marker" in running.namespaces(), what="the marker after it")
    assert running.controller.namespaces.published == published + 1, "only the marker was written"
    assert shard_stamps(running)[shard_name("team-7")] == after[
        shard_name("team-7")]

    apiserver.delete(NAMESPACES, "team-7")
    wait_for(lambda: "team-7" not in running.namespaces(), what="the deletion")


def test_namespaces_deleted_while_the_watch_was_gone_disappear_after_the_relist(
        apiserver: FakeApiServer, running: Running) -> None:
    apiserver.put_namespace("stays")
    apiserver.put_namespace("goes")
    wait_for(lambda: "goes" in running.namespaces(), what="both namespaces")
    with apiserver.condition:  # deleted with no event a watch could see, then history compacted: 410 Gone
        del apiserver.objects[NAMESPACES]["goes"]
    apiserver.expire_watches()
    wait_for(lambda: "goes" not in running.namespaces(), what="the relist")
    assert "stays" in running.namespaces()


def test_a_restarted_controller_clears_what_its_predecessor_left(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    apiserver.put_namespace("old")
    first = start(api, apiserver, tmp_path, status=False)
    wait_for(lambda: "old" in first.namespaces(), what="the first controller's state")
    first.end(apiserver)
    apiserver.delete(NAMESPACES, "old")
    apiserver.put_namespace("new")
    second = start(api, apiserver, tmp_path, status=False)
    try:
        wait_for(lambda: second.controller.namespaces.synced, what="the second controller's first list written")
        assert "new" in second.namespaces() and "old" not in second.namespaces()
    finally:
        second.end(apiserver)


def test_workers_recompile_only_the_policies_that_changed(apiserver: FakeApiServer, running: Running) -> None:
    apiserver.put_policy(policy("steady"))
    apiserver.put_policy(policy("moving", pool="v1"))
    wait_for(lambda: len(running.serving()) == 2, what="both policies")
    source = ClusterStateSource(running.state, compiler=PolicyCompiler())
    assert source.refresh()
    steady, moving = source.content().policies["steady"], source.content().policies["moving"]
    apiserver.put_policy(policy("moving", pool="v2"))
    wait_for(lambda: running.serving()["moving"]["spec"]["rules"][0]["parameters"] == {"pool": "v2"}, what="v2")
    assert source.refresh()
    assert source.content().policies["steady"] is steady, "an unchanged document is not compiled again"
    assert source.content().policies["moving"] is not moving


def published_nodes(running: Running) -> dict[str, Any]:
    nodes: dict[str, Any] = {}
    for path in nodes_directory(running.state).glob("*.json"):
        try:
            nodes.update(json.loads(path.read_text()))
        except FileNotFoundError:
            continue  # a shard the controller removed (it holds no node now) between the listing and the read
    return nodes


def test_nodes_are_published_as_the_scheduler_sees_them_and_a_heartbeat_writes_nothing(
        apiserver: FakeApiServer, running: Running) -> None:
    apiserver.put_node("gpu-1", {"node-pool": "gpu"},
                       taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    apiserver.put_node("cpu-1", {"node-pool": "general"})
    wait_for(lambda: len(published_nodes(running)) == 2, what="both nodes")
    assert published_nodes(running)["gpu-1"] == {
        "labels": {"kubernetes.io/hostname": "gpu-1", "kubernetes.io/os": "linux", "node-pool": "gpu"},
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        "allocatable": {"cpu": "7800m", "ephemeral-storage": "95Gi", "memory": "31Gi", "pods": "110"},
        "unschedulable": False,
    }
    stamps = {path.name: path.stat().st_ino for path in nodes_directory(running.state).glob("*.json")}

    for beat in range(5):  # what kubelets send all day: only heartbeat times change
        apiserver.put_node("cpu-1", {"node-pool": "general"}, heartbeat=f"2026-11-22T10:00:{beat + 1:02d}Z")
    apiserver.put_node("cpu-1", {"node-pool": "general"}, unschedulable=True)  # kubectl cordon
    wait_for(lambda: published_nodes(running)["cpu-1"]["unschedulable"], what="the cordon")
    sink = running.controller.nodes
    # Each heartbeat is not even decoded (the first one may be, when the node came with the list), and none
    # writes anything: the cordon rewrote one shard.
    assert running.controller.node_events.skipped >= 4 and sink.events + running.controller.node_events.skipped == 6
    assert sink.published == 1
    after = {path.name: path.stat().st_ino for path in nodes_directory(running.state).glob("*.json")}
    assert [name for name in stamps if stamps[name] != after[name]] == [shard_name("cpu-1")]

    apiserver.delete(NODES, "gpu-1")
    wait_for(lambda: "gpu-1" not in published_nodes(running), what="the node's removal")


def test_claims_and_volumes_are_published_for_pin_to_volume_node(
        apiserver: FakeApiServer, running: Running) -> None:
    """The claims (across namespaces) and volumes of tests/volumes/objects.yaml, listed and watched: a worker
    resolves a pod's claims from what was published, and a deleted volume reads as missing."""
    for obj in objects():
        apiserver.put(CLAIMS if obj["kind"] == "PersistentVolumeClaim" else VOLUMES, obj)
    apiserver.put(CLAIMS, {**objects()[0], "metadata": {**objects()[0]["metadata"],
                                                               "namespace": "team-b"}})
    volumes = VolumeShards(running.state)
    wait_for(lambda: volumes.known() and volumes.claim("team-b", "data-db-0") is not None
             and volumes.volume("nfs-shared") is not None, what="claims and volumes published")
    lookup = ClaimLookup(volumes)
    pod = {"metadata": {"name": "db-0"}, "spec": {"volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
        {"name": "logs", "persistentVolumeClaim": {"claimName": "logs-db-0"}}]}}
    placements = lookup.placements("team-a", pod)
    assert placements is not None and placements["data-db-0"].pin is not None
    assert placements["data-db-0"].pin.value == "kind-worker" and placements["logs-db-0"].state == "volume-missing"
    assert volumes.claim("team-b", "data-db-0") is not None, "claims are keyed by namespace"

    apiserver.delete(VOLUMES, "pvc-5b0c7a52-3d41-4f0e-9a57-0c3e1f6d2a10")
    wait_for(lambda: (lookup.placements("team-a", pod) or {})["data-db-0"].state == "volume-missing",
             what="the deleted volume")
