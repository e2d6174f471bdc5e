"""The fake API server answers as kube-apiserver does where Placer's tests rely on it.

Each test names the behaviour of kube-apiserver it pins (the source is cited in `fake_apiserver` and
`apiserver_semantics`); a looser fake would let the reflector's and the status writer's bugs through.
"""

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kube.apiserver_semantics import CONTINUE_EXPIRED
from tests.kube.fake_apiserver import NAMESPACES, POLICIES, FakeApiServer
from webhook.cluster.client.api import ApiError, KubeApi


def _watch(api: KubeApi, resource_version: str, *, until: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for line in api.watch_lines(NAMESPACES, {"watch": "1", "resourceVersion": resource_version}):
        events.append(json.loads(line))
        if len(events) == until:
            break
    return events


@pytest.fixture
def five(apiserver: FakeApiServer) -> Iterator[None]:
    for name in ("a", "b", "c", "d", "e"):
        apiserver.put_namespace(name)
    yield


def test_every_page_of_a_list_is_pinned_to_the_first_pages_resource_version(
        apiserver: FakeApiServer, api: KubeApi, five: None) -> None:
    first = api.get(NAMESPACES, {"limit": "2"})
    version = first["metadata"]["resourceVersion"]
    apiserver.put_namespace("c", {"team": "changed-meanwhile"})
    apiserver.put_namespace("bb")
    apiserver.delete(NAMESPACES, "d")
    second = api.get(NAMESPACES, {"limit": "2", "continue": first["metadata"]["continue"]})
    third = api.get(NAMESPACES, {"limit": "2", "continue": second["metadata"]["continue"]})
    assert second["metadata"]["resourceVersion"] == third["metadata"]["resourceVersion"] == version
    names = [item["metadata"]["name"] for page in (first, second, third) for item in page["items"]]
    assert names == ["a", "b", "c", "d", "e"], "the collection as it was at the first page"
    assert "team" not in second["items"][0]["metadata"]["labels"]
    assert "continue" not in third["metadata"]


def test_a_continue_token_whose_version_was_compacted_is_410_expired(
        apiserver: FakeApiServer, api: KubeApi, five: None) -> None:
    first = api.get(NAMESPACES, {"limit": "2"})
    apiserver.compact()
    with pytest.raises(ApiError) as gone:
        api.get(NAMESPACES, {"limit": "2", "continue": first["metadata"]["continue"]})
    assert (gone.value.code, gone.value.reason, gone.value.message) == (410, "Expired", CONTINUE_EXPIRED)


def test_a_watch_from_version_0_or_unset_starts_with_added_for_what_exists_and_no_history(
        apiserver: FakeApiServer, api: KubeApi, five: None) -> None:
    apiserver.delete(NAMESPACES, "e")
    apiserver.put_namespace("a", {"team": "ml"})
    for version in ("0", ""):
        events = _watch(api, version, until=4)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c"), ("ADDED", "d")]
        assert events[0]["object"]["metadata"]["labels"]["team"] == "ml", "the object as it is now"

    def later() -> None:
        apiserver.put_namespace("f")

    threading.Timer(0.3, later).start()
    assert [e["type"] for e in _watch(api, "0", until=5)][-1] == "ADDED"


def test_a_watch_from_a_version_replays_what_happened_after_it(
        apiserver: FakeApiServer, api: KubeApi, five: None) -> None:
    version = str(apiserver.revision)
    apiserver.delete(NAMESPACES, "e")
    apiserver.put_namespace("a", {"team": "ml"})
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in _watch(api, version, until=2)] == [
        ("DELETED", "e"), ("MODIFIED", "a")]


def test_an_update_that_changes_nothing_keeps_the_resource_version_and_sends_no_event(
        apiserver: FakeApiServer) -> None:
    stored = apiserver.put_namespace("a", {"team": "ml"})
    events = len(apiserver.events)
    again = apiserver.put_namespace("a", {"team": "ml"})
    assert again["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert len(apiserver.events) == events
    changed = apiserver.put_namespace("a", {"team": "data"})
    assert int(changed["metadata"]["resourceVersion"]) > int(stored["metadata"]["resourceVersion"])
    assert apiserver.events[-1].type == "MODIFIED"


def test_a_status_patch_is_a_merge_patch_of_status_only_pruned_by_the_crds_schema(
        apiserver: FakeApiServer, api: KubeApi) -> None:
    apiserver.put_policy({"metadata": {"name": "p"}, "spec": {"rules": []}, "status": {"rules": 1}})
    condition = {"type": "Ready", "status": "True", "reason": "Compiled", "message": "ok",
                 "lastTransitionTime": "2026-11-25T10:00:00Z", "severity": "not in the schema"}
    patched = api.merge_patch(f"{POLICIES}/p/status", {
        "spec": {"rules": [{"name": "ignored"}]}, "metadata": {"labels": {"ignored": "yes"}},
        "status": {"conditions": [condition], "unknownField": 1}})
    assert patched["status"] == {"rules": 1, "conditions": [
        {key: value for key, value in condition.items() if key != "severity"}]}
    assert patched["spec"] == {"rules": []} and "ignored" not in (patched["metadata"].get("labels") or {})
    unchanged = api.merge_patch(f"{POLICIES}/p/status", {"status": {"conditions": [condition]}})
    assert unchanged["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"], "a no-op write"
    removed = api.merge_patch(f"{POLICIES}/p/status", {"status": {"rules": None}})
    assert "rules" not in removed["status"]
