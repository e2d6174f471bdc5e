"""The controller keeps `placer.dev/enforce=true` on exactly the namespaces an Enforced policy selects
(what the fail-closed webhook entry selects), against the fake API server."""

from pathlib import Path
from typing import Any

from tests.kube.fake_apiserver import NAMESPACES, POLICIES, FakeApiServer, wait_for
from tests.kube.test_controller import start
from webhook.cluster.client.api import KubeApi
from webhook.cluster.client.reflector import SnapshotSink
from webhook.cluster.enforce_labels import EnforceLabels, changes, enforced_selectors, moved
from webhook.support.selectors import LabelSelector

ENFORCE = "placer.dev/enforce"


def enforced(name: str, tenant: str, *, enforcement: str = "Enforced") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {
        "enforcement": enforcement, "namespaceSelector": {"matchLabels": {"tenant": tenant}},
        "rules": [{"name": "pool", "action": "add-node-selector", "parameters": {"node-pool": "general"}}]}}


def labels(apiserver: FakeApiServer, name: str) -> dict[str, str]:
    return dict(apiserver.objects[NAMESPACES][name]["metadata"].get("labels") or {})


def test_the_leader_labels_selected_namespaces_and_unlabels_them_when_no_enforced_policy_selects_them(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    apiserver.put_namespace("team-a", {"tenant": "team-a"})
    apiserver.put_namespace("team-b", {"tenant": "team-b"})
    apiserver.put_namespace("kube-system", {"tenant": "team-a"})
    apiserver.put_policy(enforced("boundary", "team-a"))
    apiserver.put_policy(enforced("advice", "team-b", enforcement="Advisory"))
    run = start(api, apiserver, tmp_path)
    try:
        wait_for(lambda: labels(apiserver, "team-a").get(ENFORCE) == "true", what="team-a labelled")
        assert ENFORCE not in labels(apiserver, "team-b"), "an Advisory policy does not fail closed"
        assert ENFORCE not in labels(apiserver, "kube-system"), "kube-system must always be able to restart"

        apiserver.put_namespace("team-a", {"tenant": "someone-else", ENFORCE: "true"})
        wait_for(lambda: ENFORCE not in labels(apiserver, "team-a"), what="team-a unlabelled")

        apiserver.put_policy(enforced("advice", "team-b"))
        wait_for(lambda: labels(apiserver, "team-b").get(ENFORCE) == "true", what="team-b labelled")
        apiserver.delete(POLICIES, "advice")
        wait_for(lambda: ENFORCE not in labels(apiserver, "team-b"), what="team-b unlabelled")
    finally:
        run.end(apiserver)


def test_a_replica_that_does_not_lead_writes_no_label(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    apiserver.put_namespace("team-a", {"tenant": "team-a"})
    apiserver.put_policy(enforced("boundary", "team-a"))
    run = start(api, apiserver, tmp_path, status=False)  # no election: never the leader
    try:
        wait_for(lambda: run.read() is not None, what="the first published state")
        assert not [r for r in apiserver.requests if r[0] == "PATCH" and r[1].startswith(NAMESPACES)]
    finally:
        run.end(apiserver)


def test_a_selector_on_the_label_itself_cannot_hold_the_label_up() -> None:
    selectors = enforced_selectors([{"spec": {"enforcement": "Enforced",
                                              "namespaceSelector": {"matchLabels": {ENFORCE: "true"}}}}])
    assert changes({"team-a": {ENFORCE: "true"}}, selectors) == {"team-a": False}
    everywhere = enforced_selectors([{"spec": {"enforcement": "Enforced", "namespaceSelector": {}}}])
    assert changes({"team-a": {}, "kube-public": {}, "kube-node-lease": {}}, everywhere) == {"team-a": True}
    assert enforced_selectors([{"spec": {"enforcement": "Enforced"}}]) == [], "one that holds no namespace labels none"


class RecordingApi:
    """What `EnforceLabels` calls: label patches, recorded and applied to the labels it knows, as the
    namespace watch would deliver them."""

    def __init__(self) -> None:
        self.patched: list[str] = []
        self.labels: dict[str, dict[str, str]] = {}
        self.sink: Any = None

    def merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        name = path.rsplit("/", 1)[-1]
        self.patched.append(name)
        labels = {**self.labels[name], **body["metadata"]["labels"]}
        self.labels[name] = {key: value for key, value in labels.items() if value is not None}
        self.sink.upsert(name, namespace(name, **self.labels[name]))
        return {}


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def listed(count: int) -> tuple[EnforceLabels, RecordingApi, Any]:
    api = RecordingApi()
    keeper = EnforceLabels(api)  # type: ignore[arg-type]
    sink = keeper.sink(SnapshotSink(lambda store: None))
    api.sink = sink
    store = {}
    for index in range(count):
        name = f"ns-{index:05d}"
        api.labels[name] = {"team": f"team-{index % 100}"}
        store[name] = sink.keep(name, namespace(name, **api.labels[name]))
    sink.replace(store)
    return keeper, api, sink


def test_a_namespace_event_looks_at_that_namespace_only() -> None:
    """Among 10,000 namespaces, a relabel costs one namespace's work (it cost every namespace times every
    Enforced selector on each event: 16 ms of CPU per change at 10,000 namespaces and 51 policies)."""
    keeper, api, sink = listed(10_000)
    selectors = [LabelSelector.from_object({"matchLabels": {"team": "team-7"}}),
                 LabelSelector.from_object({"matchLabels": {"team": "team-8"}})]
    keeper.reconcile(selectors)
    assert keeper.looked_at == 10_000 and len(api.patched) == 200
    keeper.reconcile(selectors)  # the labels written came back through the watch: nothing more to write
    assert keeper.looked_at == 10_200 and len(api.patched) == 200
    assert not keeper.pending()
    api.labels["ns-00042"] = {"team": "team-7"}
    sink.upsert("ns-00042", namespace("ns-00042", team="team-7"))
    assert keeper.pending()
    assert keeper.reconcile(selectors) == 1 and api.patched[-1] == "ns-00042"
    assert keeper.looked_at == 10_201
    sink.upsert("ns-00043", namespace("ns-00043", team="team-43"))  # the same labels: nothing to look at
    keeper.reconcile(selectors)  # (ns-00042's label, back from the watch)
    assert not keeper.pending()
    assert keeper.reconcile(selectors) == 0 and keeper.looked_at == 10_202


def test_a_selector_change_looks_at_the_namespaces_the_selectors_that_came_or_went_select() -> None:
    keeper, api, _ = listed(10_000)
    seven = LabelSelector.from_object({"matchLabels": {"team": "team-7"}})
    eight = LabelSelector.from_object({"matchLabels": {"team": "team-8"}})
    nine = LabelSelector.from_object({"matchLabels": {"team": "team-9"}})
    keeper.reconcile([seven, eight])
    keeper.reconcile([seven, eight])
    looked, patched = keeper.looked_at, len(api.patched)
    keeper.reconcile([seven, nine])  # team-8's policy now selects team-9
    assert keeper.looked_at - looked == 200, "team-8's and team-9's namespaces, not every one"
    assert len(api.patched) - patched == 200  # 100 unlabelled (team-8), 100 labelled (team-9)
    keeper.reconcile([seven, nine])
    keeper.forget()  # leadership lost and won again: every namespace
    looked = keeper.looked_at
    keeper.reconcile([seven, nine])
    assert keeper.looked_at - looked == 10_000


def test_moved_counts_selectors_as_a_multiset() -> None:
    seven = LabelSelector.from_object({"matchLabels": {"team": "team-7"}})
    assert moved([seven, seven], [seven]) == [seven]
    assert moved([seven, None], [None, seven]) == []
