"""The reflector against the fake API server: list, watch, resume, 410 Gone, drops, errors."""

import itertools
import random
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tests.kube.fake_apiserver import NAMESPACES, NODES, POLICIES, FakeApiServer, wait_for
from webhook.cluster.client.api import KubeApi
from webhook.cluster.client.node_events import UnchangedNodeEvents
from webhook.cluster.client.reflector import Backoff, Reflector, Resource


class Recorder:
    def __init__(self) -> None:
        self.stores: list[Mapping[str, Any]] = []

    def __call__(self, store: Mapping[str, Any]) -> None:
        self.stores.append(store)

    @property
    def names(self) -> set[str]:
        return set(self.stores[-1]) if self.stores else set()


@pytest.fixture
def namespaces(api: KubeApi, apiserver: FakeApiServer) -> Iterator[tuple[Reflector, Recorder]]:
    recorder = Recorder()
    reflector = Reflector(api, Resource(NAMESPACES, "Namespace"), recorder,
                          backoff=Backoff(initial=0.05, ceiling=0.2), page_size=2)
    stop = threading.Event()
    thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
    thread.start()
    yield reflector, recorder
    stop.set()
    deadline = time.monotonic() + 10
    while thread.is_alive() and time.monotonic() < deadline:
        # A watch blocked in a read notices `stop` on its next event or disconnect; one opened while we
        # were dropping the others is dropped on the next round.
        apiserver.drop_watches()
        thread.join(0.2)
    assert not thread.is_alive(), "the reflector must stop when asked"


def test_pages_through_the_initial_list_and_watches_from_its_resource_version(
        apiserver: FakeApiServer, api: KubeApi) -> None:
    for name in ("a", "b", "c", "d", "e"):
        apiserver.put_namespace(name)
    list_version = str(apiserver.revision)
    recorder = Recorder()
    reflector = Reflector(api, Resource(NAMESPACES, "Namespace"), recorder, page_size=2)
    stop = threading.Event()
    thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: apiserver.watch_requests(NAMESPACES), what="the watch")
        assert recorder.names == {"a", "b", "c", "d", "e"}
        assert len(recorder.stores) == 1, "one notification for the whole paged list"
        lists = apiserver.list_requests(NAMESPACES)
        assert len(lists) == 3 and lists[0].get("continue") is None and all(q.get("continue") for q in lists[1:])
        assert all(q["limit"] == "2" for q in lists)
        watch = apiserver.watch_requests(NAMESPACES)[0]
        assert watch["resourceVersion"] == list_version
        assert watch["allowWatchBookmarks"] == "true"
        assert 0 < int(watch["timeoutSeconds"]) < 600
    finally:
        stop.set()
        apiserver.drop_watches()
        thread.join(10)


def test_added_modified_deleted_events_update_the_store(
        apiserver: FakeApiServer, namespaces: tuple[Reflector, Recorder]) -> None:
    reflector, recorder = namespaces
    wait_for(lambda: apiserver.watch_requests(NAMESPACES), what="the watch")
    apiserver.put_namespace("team-a", {"team": "ml"})
    wait_for(lambda: "team-a" in recorder.names, what="ADDED")
    apiserver.put_namespace("team-a", {"team": "data"})
    wait_for(lambda: recorder.stores[-1]["team-a"]["metadata"]["labels"].get("team") == "data", what="MODIFIED")
    apiserver.delete(NAMESPACES, "team-a")
    wait_for(lambda: "team-a" not in recorder.names, what="DELETED")
    assert reflector.resource_version == str(apiserver.revision)
    assert reflector.lists == 1


def test_a_bookmark_moves_the_resume_point_without_notifying(
        apiserver: FakeApiServer, namespaces: tuple[Reflector, Recorder]) -> None:
    reflector, recorder = namespaces
    wait_for(lambda: apiserver.watch_requests(NAMESPACES), what="the watch")
    notified = len(recorder.stores)
    apiserver.bookmark(NAMESPACES)
    wait_for(lambda: reflector.resource_version == str(apiserver.revision), what="the bookmark")
    assert len(recorder.stores) == notified
    apiserver.drop_watches()
    wait_for(lambda: len(apiserver.watch_requests(NAMESPACES)) == 2, what="the second watch")
    assert apiserver.watch_requests(NAMESPACES)[1]["resourceVersion"] == reflector.resource_version


def test_a_dropped_connection_resumes_from_the_last_event_without_listing_again(
        apiserver: FakeApiServer, namespaces: tuple[Reflector, Recorder]) -> None:
    reflector, recorder = namespaces
    wait_for(lambda: apiserver.watch_requests(NAMESPACES), what="the watch")
    apiserver.put_namespace("one")
    wait_for(lambda: "one" in recorder.names, what="ADDED one")
    seen = reflector.resource_version
    apiserver.drop_watches()
    wait_for(lambda: len(apiserver.watch_requests(NAMESPACES)) >= 2, what="a new watch")
    assert apiserver.watch_requests(NAMESPACES)[-1]["resourceVersion"] == seen
    apiserver.put_namespace("two")
    wait_for(lambda: {"one", "two"} <= recorder.names, what="events after the drop")
    assert reflector.lists == 1, "a drop must not cost a full list"


def test_410_gone_in_the_stream_relists_and_forgets_objects_deleted_meanwhile(
        apiserver: FakeApiServer, namespaces: tuple[Reflector, Recorder]) -> None:
    reflector, recorder = namespaces
    apiserver.put_namespace("kept")
    apiserver.put_namespace("deleted-in-the-gap")
    wait_for(lambda: {"kept", "deleted-in-the-gap"} <= recorder.names, what="both namespaces")
    # The deletion happens while the watch is cut off, and history is compacted before it reconnects.
    with apiserver.condition:
        apiserver.objects[NAMESPACES].pop("deleted-in-the-gap")
        apiserver.revision += 1
    apiserver.expire_watches()
    wait_for(lambda: reflector.lists == 2, what="a second list")
    wait_for(lambda: recorder.names == {"kept"}, what="the relisted store")
    wait_for(lambda: len(apiserver.watch_requests(NAMESPACES)) >= 2, what="a watch after the relist")
    assert int(apiserver.watch_requests(NAMESPACES)[-1]["resourceVersion"]) >= apiserver.compacted


def test_a_resume_point_that_was_compacted_while_disconnected_gets_410_and_relists(
        apiserver: FakeApiServer, namespaces: tuple[Reflector, Recorder]) -> None:
    reflector, _ = namespaces
    wait_for(lambda: apiserver.watch_requests(NAMESPACES), what="the watch")
    apiserver.compact()
    apiserver.drop_watches()
    wait_for(lambda: reflector.lists == 2, what="the relist after 410")


def test_server_errors_back_off_and_recover(apiserver: FakeApiServer, api: KubeApi) -> None:
    apiserver.put_policy(_policy("p1"))
    apiserver.fail("GET", POLICIES, 503, "ServiceUnavailable", times=3)
    recorder = Recorder()
    backoff = Backoff(initial=0.05, ceiling=0.1)
    reflector = Reflector(api, Resource(POLICIES, "SchedulingPolicy"), recorder, backoff=backoff)
    stop = threading.Event()
    thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: recorder.names == {"p1"}, what="the list after three 503s")
        assert len(apiserver.list_requests(POLICIES)) == 4
    finally:
        stop.set()
        apiserver.drop_watches()
        thread.join(10)


def test_backoff_grows_exponentially_with_jitter_up_to_its_ceiling() -> None:
    backoff = Backoff(initial=0.5, ceiling=30, rng=random.Random(7))
    delays = [backoff.delay() for _ in range(10)]
    assert 0.4 <= delays[0] <= 0.6
    assert all(later >= earlier * 1.3 for earlier, later in itertools.pairwise(delays[:6]))
    assert max(delays) <= 36 and delays[-1] >= 24
    backoff.reset()
    assert backoff.delay() <= 0.6


def _policy(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"rules": [
        {"name": "pool", "action": "add-node-selector", "parameters": {"pool": "general"}}]}}


def test_a_paced_watch_loses_no_event(apiserver: FakeApiServer, api: KubeApi) -> None:
    recorder = Recorder()
    reflector = Reflector(api, Resource(NAMESPACES, "Namespace"), recorder, pace=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: recorder.stores, what="the list")
        for index in range(200):
            apiserver.put_namespace(f"ns-{index}", {"round": "1"})
        for index in range(200):
            apiserver.put_namespace(f"ns-{index}", {"round": "2"})
        wait_for(lambda: len(recorder.names) == 200 and all(
            obj["metadata"]["labels"]["round"] == "2" for obj in recorder.stores[-1].values()), what="every event")
        assert reflector.lists == 1, "no event was lost or skipped: no relist was needed"
    finally:
        stop.set()
        apiserver.drop_watches()
        thread.join(5)


def test_dropped_heartbeats_move_the_resume_point_and_a_stop_is_noticed_between_them(
        apiserver: FakeApiServer, api: KubeApi) -> None:
    """Heartbeats of a listed node are dropped undecoded from the first one on (the list seeds the
    comparison); a watch that breaks after them resumes after the newest, so nothing is replayed."""
    apiserver.put_node("worker-1", {"node-pool": "general"})
    recorder = Recorder()
    unchanged = UnchangedNodeEvents()
    reflector = Reflector(api, Resource(NODES, "Node"), recorder, pace=0.01, unchanged=unchanged,
                          backoff=Backoff(initial=0.05, ceiling=0.2))
    stop = threading.Event()
    thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: apiserver.watch_requests(NODES), what="the watch")
        for beat in range(3):
            apiserver.put_node("worker-1", {"node-pool": "general"}, heartbeat=f"2026-11-22T10:00:{beat + 1:02d}Z")
        wait_for(lambda: unchanged.skipped == 3, what="three dropped heartbeats")
        assert len(recorder.stores) == 1, "nothing but the list reached the store"
        last = str(apiserver.revision)
        apiserver.drop_watches()
        wait_for(lambda: len(apiserver.watch_requests(NODES)) >= 2, what="the resumed watch")
        assert apiserver.watch_requests(NODES)[-1]["resourceVersion"] == last
        assert reflector.lists == 1
        apiserver.put_node("worker-1", {"node-pool": "gpu"})
        wait_for(lambda: recorder.stores[-1]["worker-1"]["metadata"]["labels"]["node-pool"] == "gpu", what="relabel")
        stop.set()
        apiserver.put_node("worker-1", {"node-pool": "gpu"}, heartbeat="2026-11-22T11:00:00Z")
        thread.join(5)
        assert not thread.is_alive(), "a dropped event is a chance to stop"
    finally:
        stop.set()
        apiserver.drop_watches()
        thread.join(5)


def test_a_continue_token_expired_between_pages_falls_back_to_one_full_list(
        apiserver: FakeApiServer, api: KubeApi) -> None:
    """410 Gone (Expired) on a list's second page: history was compacted while paging. The reflector lists
    everything in one request, as client-go's pager does, and the store is the collection of that list."""
    for name in ("a", "b", "c", "d", "e"):
        apiserver.put_namespace(name)

    def compact_before_the_second_page(path: str, query: dict[str, str]) -> None:
        if path == NAMESPACES and query.get("continue") and not apiserver.compacted:
            apiserver.put_namespace("f")
            apiserver.delete(NAMESPACES, "a")
            apiserver.compact()

    apiserver.before_list = compact_before_the_second_page
    recorder = Recorder()
    reflector = Reflector(api, Resource(NAMESPACES, "Namespace"), recorder, page_size=2)
    stop = threading.Event()
    thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: apiserver.watch_requests(NAMESPACES), what="the watch")
        lists = apiserver.list_requests(NAMESPACES)
        assert [("continue" in q, q.get("limit")) for q in lists] == [(False, "2"), (True, "2"), (False, None)]
        assert recorder.names == {"b", "c", "d", "e", "f"} and len(recorder.stores) == 1
        assert reflector.lists == 1
        assert apiserver.watch_requests(NAMESPACES)[0]["resourceVersion"] == str(apiserver.revision)
    finally:
        stop.set()
        apiserver.drop_watches()
        thread.join(10)


def test_410_gone_as_the_watch_requests_answer_relists(
        apiserver: FakeApiServer, namespaces: tuple[Reflector, Recorder]) -> None:
    """A watch refused with 410 Gone before its stream starts (not as an ERROR event in it): list again."""
    reflector, recorder = namespaces
    apiserver.put_namespace("kept")
    wait_for(lambda: "kept" in recorder.names, what="the namespace")
    apiserver.fail("GET", NAMESPACES, 410, "Expired")
    with apiserver.condition:
        apiserver.objects[NAMESPACES].pop("kept")  # deleted while the watch is away: only a list shows it
        apiserver.revision += 1
    apiserver.drop_watches()
    wait_for(lambda: reflector.lists == 2, what="the relist after the 410")
    wait_for(lambda: "kept" not in recorder.names, what="the relisted store")


def test_a_stopped_reflector_whose_stream_is_cut_ends_without_a_word(
        apiserver: FakeApiServer, api: KubeApi, caplog: pytest.LogCaptureFixture) -> None:
    """Stopping a process or a test closes the watches under their threads: a failure once `stop` is set ends
    the thread quietly, so nothing is logged after the stop, when the log's stream may be closed already (the
    suite printed `--- Logging error ---` tracebacks of such late warnings)."""
    apiserver.put_namespace("a")
    reflector = Reflector(api, Resource(NAMESPACES, "Namespace"), Recorder(),
                          backoff=Backoff(initial=0.05, ceiling=0.2))
    stop = threading.Event()
    thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
    thread.start()
    wait_for(lambda: apiserver.watch_requests(NAMESPACES), what="the watch")
    apiserver.drop_watches()  # a cut before the stop is said, and watched again
    wait_for(lambda: len(apiserver.watch_requests(NAMESPACES)) >= 2, what="the watch again")
    assert any("retrying" in record.message for record in caplog.records)
    caplog.clear()
    stop.set()
    api.close()  # the process goes: later requests fail at once
    deadline = time.monotonic() + 10
    while thread.is_alive():
        assert time.monotonic() < deadline, "the reflector must stop when asked"
        apiserver.drop_watches()
        thread.join(0.2)
    assert [record.message for record in caplog.records if record.name.startswith("webhook")] == []
