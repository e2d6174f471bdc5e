"""The spot share's pod counts: the controller against the fake API server, and a worker's reader of them."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docs_text import DOCS, shown_output
from tests.kube.fake_apiserver import PODS, FakeApiServer, wait_for
from tests.kube.test_controller import Running, start
from webhook.cluster.client.api import KubeApi
from webhook.cluster.spot.spot_ledger import PodShareSink
from webhook.commands.cli import kubectl_main
from webhook.pods.capacity_share import CLASS_LABEL, ShareCounts
from webhook.policy.state.shards import ShardWriter, write_atomically
from webhook.policy.state.share_shards import ShareShards, shares_directory

RS = "0b5e2c1a-7a0e-4c55-9a3c-5d2b6a1f0001"
OTHER_RS = "0b5e2c1a-7a0e-4c55-9a3c-5d2b6a1f0002"


def pod(name: str, *, namespace: str = "team-a", owner: str | None = RS, capacity_class: str | None = "spot",
        phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    """A ReplicaSet's pod as the API server stores it, with the class Placer gave it."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "generateName": "web-7d4b9c-",
                                "labels": {"app": "web", "pod-template-hash": "7d4b9c"}}
    if capacity_class is not None:
        metadata["labels"][CLASS_LABEL] = capacity_class
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c",
                                        "uid": owner, "controller": True, "blockOwnerDeletion": True}]
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-25T10:00:00Z"
        metadata["deletionGracePeriodSeconds"] = 30
    return {"metadata": metadata,
            "spec": {"containers": [{"name": "web", "image": "registry.example/web:1"}], "nodeName": "node-1"},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.fixture
def running(api: KubeApi, apiserver: FakeApiServer, tmp_path: Path) -> Iterator[Running]:
    run = start(api, apiserver, tmp_path, status=False)
    yield run
    run.end(apiserver)


def counts(running: Running, namespace: str = "team-a", owner: str = RS) -> ShareCounts:
    """What another worker of the replica sees (a fresh reader: nothing cached, nothing admitted itself)."""
    return ShareShards(running.state).counts(namespace, owner)


def test_live_pods_are_counted_per_workload_and_class(apiserver: FakeApiServer, running: Running) -> None:
    for index in range(3):
        apiserver.put(PODS, pod(f"web-spot-{index}"))
    for index in range(2):
        apiserver.put(PODS, pod(f"web-od-{index}", capacity_class="on-demand"))
    apiserver.put(PODS, pod("other-0", owner=OTHER_RS))
    apiserver.put(PODS, pod("web-0", namespace="team-b"))  # the same uid in another namespace: another entry
    apiserver.put(PODS, pod("bare", owner=None))  # no controller: a workload of one, counted nowhere
    apiserver.put(PODS, pod("odd", capacity_class="preemptible"))  # not a class Placer gives
    apiserver.put(PODS, pod("unlabelled", capacity_class=None))
    wait_for(lambda: counts(running) == ShareCounts(3, 2, True), what="the ReplicaSet's counts")
    assert counts(running, owner=OTHER_RS) == ShareCounts(1, 0, True)
    assert counts(running, "team-b") == ShareCounts(1, 0, True)
    assert counts(running, owner="no-such-uid") == ShareCounts(0, 0, True)
    # The API server filtered: pods without the label were never sent (list and watch both selected).
    assert all(query.get("labelSelector") == CLASS_LABEL
               for query in apiserver.list_requests(PODS) + apiserver.watch_requests(PODS))
    assert running.controller.pod_shares.size() == (7, 3)


def test_terminating_and_finished_pods_are_not_live(apiserver: FakeApiServer, running: Running) -> None:
    for index in range(4):
        apiserver.put(PODS, pod(f"web-{index}"))
    wait_for(lambda: counts(running).spot == 4, what="four spot pods")
    sink = running.controller.pod_shares
    published = sink.published
    for _ in range(3):  # status updates (a condition flips): no count changes, nothing is written
        apiserver.put(PODS, {**pod("web-0"), "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": str(_ % 2 == 0)}]}})
    apiserver.put(PODS, pod("web-1", deleting=True))  # scale-down: terminating, still there for 30 s
    apiserver.put(PODS, pod("web-2", phase="Succeeded"))
    apiserver.put(PODS, pod("web-3", phase="Failed"))
    wait_for(lambda: counts(running).spot == 1, what="only web-0 live")
    assert sink.published == published + 3, "the three status updates wrote nothing"
    for index in range(4):
        apiserver.delete(PODS, f"team-a/web-{index}")
    wait_for(lambda: sink.size() == (0, 0), what="every pod gone")
    assert not list(shares_directory(running.state).glob("*.json")), "a workload without pods has no entry"
    assert counts(running) == ShareCounts(0, 0, True)


def test_counts_are_incomplete_until_the_first_list(apiserver: FakeApiServer, api: KubeApi,
                                                    tmp_path: Path) -> None:
    """Without the RBAC to list pods (403) nothing is known, and the rest of the state is published anyway;
    once the list succeeds the counts are complete."""
    apiserver.put(PODS, pod("web-0"))
    apiserver.fail("GET", PODS, 403, "Forbidden", times=4)
    run = start(api, apiserver, tmp_path, status=False)
    try:
        wait_for(run.read, what="the policies' state")
        assert counts(run) == ShareCounts(0, 0, False)
        wait_for(lambda: counts(run) == ShareCounts(1, 0, True), what="the counts after the list succeeds")
        assert len(apiserver.list_requests(PODS)) == 5
    finally:
        run.end(apiserver)


def test_a_list_after_410_gone_counts_what_happened_meanwhile(apiserver: FakeApiServer, running: Running) -> None:
    for index in range(3):
        apiserver.put(PODS, pod(f"web-{index}"))
    wait_for(lambda: counts(running).spot == 3, what="three spot pods")
    reader = ShareShards(running.state)
    reader.admitted("team-a", RS, "on-demand")  # its pod is created while the watch is away
    reflector = next(r for r in running.controller.reflectors if r.kind == "Pod")
    apiserver.silenced = ("web-",)  # the watch misses what happens next...
    apiserver.delete(PODS, "team-a/web-0")
    apiserver.put(PODS, pod("web-1", phase="Failed"))
    apiserver.put(PODS, pod("web-3", capacity_class="on-demand"))
    apiserver.expire_watches()  # ...and is told its version is gone: a list
    apiserver.silenced = ()
    wait_for(lambda: reflector.lists == 2, what="the list again")
    wait_for(lambda: ShareShards(running.state).counts("team-a", RS) == ShareCounts(1, 1, True),
             what="the counts after the list")
    assert reader.counts("team-a", RS) == ShareCounts(1, 1, True), "the admitted pod is counted once"
    assert reader.pending() == 0


def test_an_admission_counts_until_its_pod_is_published(apiserver: FakeApiServer, running: Running) -> None:
    apiserver.put(PODS, pod("web-0"))
    wait_for(lambda: counts(running).spot == 1, what="one spot pod")
    reader = ShareShards(running.state)
    reader.admitted("team-a", RS, "spot")
    reader.admitted("team-a", RS, "on-demand")
    assert reader.counts("team-a", RS) == ShareCounts(2, 1, True), "this worker's admissions count at once"
    assert counts(running) == ShareCounts(2, 1, True), "the replica's other workers see them too"
    other_replica = ShareShards(running.state.parent / "elsewhere")
    assert other_replica.counts("team-a", RS) == ShareCounts(0, 0, False), "another replica's state does not"
    apiserver.put(PODS, pod("web-1"))
    wait_for(lambda: reader.pending() == 1, what="the spot pod published")
    assert reader.counts("team-a", RS) == ShareCounts(2, 1, True)
    apiserver.put(PODS, pod("web-2", capacity_class="on-demand"))
    wait_for(lambda: reader.pending() == 0, what="the on-demand pod published")
    assert reader.counts("team-a", RS) == ShareCounts(2, 1, True)
    apiserver.put(PODS, pod("web-1", deleting=True))  # a pod going does not bring an admission back
    wait_for(lambda: reader.counts("team-a", RS) == ShareCounts(1, 1, True), what="web-1 terminating")


def test_kubectl_placer_shares_lists_each_workloads_live_share(
        apiserver: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for index in range(3):
        apiserver.put(PODS, pod(f"web-7d4b9c-s{index}"))
    for index in range(2):
        apiserver.put(PODS, pod(f"web-7d4b9c-d{index}", capacity_class="on-demand"))
    apiserver.put(PODS, pod("web-7d4b9c-old", deleting=True))
    apiserver.put(PODS, pod("web-7d4b9c-x", namespace="team-b", owner=OTHER_RS, capacity_class="on-demand"))
    assert kubectl_main(["shares", "-n", "team-a", "--kubeconfig", str(kubeconfig)]) == 0
    assert capsys.readouterr().out == shown_output(DOCS / "spot-share-ledger.md", "kubectl placer shares -n team-a")
    assert apiserver.list_requests("/api/v1/namespaces/team-a/pods")[0]["labelSelector"] == CLASS_LABEL
    assert kubectl_main(["shares", "-A", "-o", "json", "--kubeconfig", str(kubeconfig)]) == 0
    listed = json.loads(capsys.readouterr().out)["workloads"]
    assert [(w["namespace"], w["spot"], w["onDemand"], w["spotPercent"]) for w in listed] == [
        ("team-a", 3, 2, 60.0), ("team-b", 0, 1, 0.0)]


def test_an_event_whose_shard_write_failed_is_applied_once_when_sent_again(tmp_path: Path) -> None:
    """ENOSPC on the state directory: the event raises (the reflector sends it again); applied again, it
    counts the pod once and writes the entry then. A pod deleted before its creation reached the disk leaves
    no entry behind."""
    failing = {"on": False}

    def write(path: Path, data: bytes) -> None:
        if failing["on"]:
            raise OSError(28, "No space left on device")
        write_atomically(path, data)

    sink = PodShareSink(ShardWriter(shares_directory(tmp_path), write=write))
    sink.replace({})
    stored = {**pod("web-0"), "metadata": {**pod("web-0")["metadata"], "uid": "u-0"}}
    failing["on"] = True
    with pytest.raises(OSError):
        sink.upsert("team-a/web-0", stored)
    assert ShareShards(tmp_path).counts("team-a", RS) == ShareCounts(0, 0, True), "nothing on disk yet"
    failing["on"] = False
    sink.upsert("team-a/web-0", stored)  # the same event, sent again
    assert ShareShards(tmp_path).counts("team-a", RS) == ShareCounts(1, 0, True)
    assert sink.counts("team-a", RS) == (1, 0)
    other = {**pod("web-1", owner=OTHER_RS), "metadata": {**pod("web-1", owner=OTHER_RS)["metadata"], "uid": "u-1"}}
    failing["on"] = True
    with pytest.raises(OSError):
        sink.upsert("team-a/web-1", other)
    sink.remove("team-a/web-1")  # its creation never reached the disk: nothing to write, nothing fails
    failing["on"] = False
    assert ShareShards(tmp_path).counts("team-a", OTHER_RS) == ShareCounts(0, 0, True)
    assert sink.size() == (1, 1)
