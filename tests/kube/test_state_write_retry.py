"""A state write that fails (ENOSPC on the size-limited emptyDir) is tried again until it lands, without a relist.

The controller's sinks write shards from the watch threads. One failed write used to leave the state stale
until the next relist: the shard writer had already changed its memory (so the same change, seen again,
was "nothing new"), and the reflector had already moved its resourceVersion past the event. Here a write
raises `OSError(ENOSPC)` (what `write(2)` returns on a full tmpfs), and what the workers read ends up right
with the reflector's list count unchanged.
"""

import errno
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.kube.fake_apiserver import CLAIMS, NAMESPACES, NODES, FakeApiServer, wait_for
from webhook.cluster import controller as controller_module
from webhook.cluster.client.api import KubeApi
from webhook.cluster.client.node_events import UnchangedNodeEvents
from webhook.cluster.client.reflector import Backoff, Reflector, Resource
from webhook.cluster.controller import ClusterController, ProjectedSink
from webhook.pods.volumes import claim_entry
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.sources.documents import namespace_info
from webhook.policy.state.cluster_state import ClusterState, policies_path, read_state, write_state
from webhook.policy.state.namespace_shards import NamespaceShards, entry_of
from webhook.policy.state.node_facts import node_facts
from webhook.policy.state.shards import Entry, KeyedShards, ShardWriter, write_atomically


class FullDisk:
    """`write_atomically`, except that the writes `fail_when` picks raise ENOSPC (once each, unless told)."""

    def __init__(self) -> None:
        self.fail_when: Callable[[bytes], bool] = lambda data: False
        self.times = 1
        self.failed = 0

    def __call__(self, path: Path, data: bytes) -> None:
        if self.times > 0 and self.fail_when(data):
            self.times -= 1
            self.failed += 1
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        write_atomically(path, data)


def _namespace_entry(name: str, obj: dict[str, object]) -> Entry:
    return entry_of(namespace_info(name, obj))


@pytest.fixture
def run_reflector(api: KubeApi, apiserver: FakeApiServer) -> Iterator[Callable[[Reflector], None]]:
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(reflector: Reflector) -> None:
        thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
        thread.start()
        threads.append(thread)

    yield start
    stop.set()
    for thread in threads:
        while thread.is_alive():
            apiserver.drop_watches()
            thread.join(0.1)


def test_a_namespace_relabel_whose_shard_write_fails_once_is_published_without_a_relist(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path, run_reflector: Callable[[Reflector], None]) -> None:
    disk = FullDisk()
    sink = ProjectedSink("namespaces", ShardWriter(tmp_path, write=disk), _namespace_entry)
    reflector = Reflector(api, Resource(NAMESPACES, "Namespace"), sink, backoff=Backoff(initial=0.05, ceiling=0.1))
    apiserver.put_namespace("team-a", {"team": "ml"})
    run_reflector(reflector)
    wait_for(lambda: sink.synced and apiserver.watch_requests(NAMESPACES), what="the list and the watch")
    applied_version = reflector.resource_version
    disk.fail_when = lambda data: b'"team":"data"' in data

    apiserver.put_namespace("team-a", {"team": "data"})
    shards = NamespaceShards(tmp_path)
    wait_for(lambda: shards["team-a"].labels.get("team") == "data", what="the relabel, written at the second try")
    assert disk.failed == 1 and reflector.sink_failures == 1
    assert reflector.lists == 1, "retried from the watch, not by listing everything again"
    resumed = apiserver.watch_requests(NAMESPACES)[1]
    assert resumed["resourceVersion"] == applied_version, "watched again from the last event applied"
    assert reflector.resource_version == str(apiserver.revision)

    apiserver.put_namespace("team-a", {"team": "ml"})  # memory agrees with the disk: a change back is a change
    wait_for(lambda: shards["team-a"].labels.get("team") == "ml", what="the change back")


def test_a_node_event_whose_write_failed_is_decoded_again_not_skipped_as_unchanged(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path, run_reflector: Callable[[Reflector], None]) -> None:
    """The byte-level skip learnt the failed event's bytes before the sink saw it: the same event, sent again,
    must not look like a heartbeat of a node already known."""
    disk = FullDisk()
    sink = ProjectedSink("nodes", ShardWriter(tmp_path, write=disk), lambda name, obj: node_facts(obj))
    reflector = Reflector(api, Resource(NODES, "Node"), sink, unchanged=UnchangedNodeEvents(),
                          backoff=Backoff(initial=0.05, ceiling=0.1))
    apiserver.put_node("worker-1", {"node-pool": "general"})
    run_reflector(reflector)
    wait_for(lambda: sink.synced and apiserver.watch_requests(NODES), what="the list and the watch")
    disk.fail_when = lambda data: b'"node-pool":"gpu"' in data

    apiserver.put_node("worker-1", {"node-pool": "gpu"})
    nodes = KeyedShards(tmp_path, "test")

    def pool() -> object:
        entry = nodes.entry("worker-1")
        return entry and entry["labels"].get("node-pool")

    wait_for(lambda: pool() == "gpu", what="the relabel, written at the second try")
    assert disk.failed == 1 and reflector.lists == 1


def test_a_deleted_claim_whose_write_fails_is_removed_at_the_next_try(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path, run_reflector: Callable[[Reflector], None]) -> None:
    disk = FullDisk()
    sink = ProjectedSink("claims", ShardWriter(tmp_path, write=disk), lambda name, obj: claim_entry(obj))
    reflector = Reflector(api, Resource(CLAIMS, "PersistentVolumeClaim", namespaced=True), sink,
                          backoff=Backoff(initial=0.05, ceiling=0.1))
    for name in ("data-0", "data-253"):  # one shard: the deletion rewrites it (an emptied shard is unlinked)
        apiserver.put(CLAIMS, {"metadata": {"name": name, "namespace": "team-a"},
                               "spec": {"volumeName": f"pv-{name}", "accessModes": ["ReadWriteOnce"]},
                               "status": {"phase": "Bound"}})
    run_reflector(reflector)
    claims = KeyedShards(tmp_path, "test")
    wait_for(lambda: sink.synced and apiserver.watch_requests(CLAIMS), what="the list and the watch")
    assert claims.entry("team-a/data-0") is not None
    disk.fail_when = lambda data: True  # the next write of any shard
    apiserver.delete(CLAIMS, "team-a/data-0")
    wait_for(lambda: claims.entry("team-a/data-0") is None, what="the deletion, written at the second try")
    assert disk.failed == 1 and reflector.lists == 1
    assert claims.entry("team-a/data-253") is not None


def test_a_list_whose_shards_fail_to_write_is_applied_again(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path, run_reflector: Callable[[Reflector], None]) -> None:
    disk = FullDisk()
    disk.fail_when, disk.times = (lambda data: b"team-b" in data), 2
    sink = ProjectedSink("namespaces", ShardWriter(tmp_path, write=disk), _namespace_entry)
    reflector = Reflector(api, Resource(NAMESPACES, "Namespace"), sink, backoff=Backoff(initial=0.05, ceiling=0.1))
    for name in ("team-a", "team-b", "team-c"):
        apiserver.put_namespace(name)
    run_reflector(reflector)
    wait_for(lambda: sink.synced, what="a list applied whole")
    assert set(NamespaceShards(tmp_path)) == {"team-a", "team-b", "team-c"}
    assert disk.failed == 2 and reflector.lists == 1, "a list that was not applied is not counted as made"
    assert len(apiserver.list_requests(NAMESPACES)) == 3, "listed again after each list not applied"


def test_a_writer_remembers_what_its_files_hold_not_what_it_was_asked(tmp_path: Path) -> None:
    disk = FullDisk()
    writer = ShardWriter(tmp_path, write=disk)
    writer.replace({"a": {"v": 1}})
    disk.fail_when = lambda data: True
    with pytest.raises(OSError) as failure:
        writer.put("a", {"v": 2})
    assert failure.value.errno == errno.ENOSPC
    assert KeyedShards(tmp_path, "test").entry("a") == {"v": 1}, "the old shard stays whole"
    assert writer.put("a", {"v": 2}), "still a change: written now"
    assert KeyedShards(tmp_path, "test").entry("a") == {"v": 2}
    disk.fail_when, disk.times = (lambda data: True), 1
    with pytest.raises(OSError):
        writer.replace({"a": {"v": 3}, "b": {"v": 1}})
    assert writer.replace({"a": {"v": 3}, "b": {"v": 1}}) == 1, "only the shard that failed is written again"
    assert KeyedShards(tmp_path, "test").entry("a") == {"v": 3}
    assert KeyedShards(tmp_path, "test").entry("b") == {"v": 1}


def test_a_policies_state_write_that_fails_is_made_again_at_the_next_round(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`policies.json` is written from the controller's loop: a failed write leaves the inputs unpublished,
    so the next round (at most a second later) writes them again."""
    failed: list[Path] = []

    def write_once_failing(directory: Path, state: ClusterState) -> None:
        if not failed:
            failed.append(directory)
            raise OSError(errno.ENOSPC, "No space left on device", str(directory))
        write_state(directory, state)

    monkeypatch.setattr(controller_module, "write_state", write_once_failing)
    apiserver.put_namespace("team-a")
    apiserver.put_policy({"metadata": {"name": "p1"}, "spec": {"rules": [
        {"name": "pool", "action": "add-node-selector", "parameters": {"pool": "general"}}]}})
    controller = ClusterController(api, tmp_path, compiler=PolicyCompiler(), elector=None)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        state = wait_for(lambda: policies_path(tmp_path).exists() and read_state(tmp_path), what="the state")
        assert failed and [p["metadata"]["name"] for p in state.policies] == ["p1"]
    finally:
        stop.set()
        while thread.is_alive() or any(t.is_alive() for t in controller.watch_threads):
            apiserver.drop_watches()
            thread.join(0.1)
