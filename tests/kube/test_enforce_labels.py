"""The controller keeps `placer.dev/enforce=true` on exactly the namespaces an Enforced policy selects
(what the fail-closed webhook entry selects), against the fake API server."""

from pathlib import Path
from typing import Any

from tests.kube.fake_apiserver import NAMESPACES, POLICIES, FakeApiServer, wait_for
from tests.kube.test_controller import start
from webhook.cluster.client.api import KubeApi
from webhook.cluster.enforce_labels import changes, enforced_selectors

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
