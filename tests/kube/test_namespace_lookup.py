"""A namespace the watched state does not have yet is read from the API server, and never silently guessed.

Against the recorded-API fake server: found, cached, and every way the read can fail (403, 404, 5xx, an API
server slower than the admission's deadline), each ending in the policy's failurePolicy. The controller's
PriorityClass watch is here too: the cluster's globalDefault class reaches the workers' snapshot.
"""

import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fixture_request
from tests.helpers import snapshot_of
from tests.kube.fake_apiserver import NAMESPACES, FakeApiServer, wait_for
from tests.kube.test_controller import Running, start
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.cluster.client.api import KubeApi, TransportError
from webhook.cluster.client.namespace_lookup import NamespaceLookup
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.snapshot import NamespaceInfo, UnknownNamespace
from webhook.policy.state.cluster_state import ClusterStateSource
from webhook.workloads import default_workload_table

SELECTING = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: ml-pool}
spec:
  failurePolicy: FAILURE
  namespaceSelector: {matchLabels: {team: ml}}
  rules:
  - {name: pool, action: add-node-selector, parameters: {pool: ml}}
"""
READING = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: ml-pool}
spec:
  failurePolicy: FAILURE
  rules:
  - name: pool
    condition: "namespaceObject.metadata.?labels.?team.orValue('') == 'ml'"
    action: add-node-selector
    parameters: {pool: ml}
"""
EVERYWHERE = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: everywhere}
spec:
  rules:
  - {name: zone, action: add-node-affinity, parameters: {key: zone, values: a}}
"""


def lookups(apiserver: FakeApiServer) -> list[str]:
    return [path for method, path, _ in apiserver.requests if method == "GET" and path.startswith(NAMESPACES + "/")]


def test_a_namespace_missing_from_the_state_is_read_once_and_cached(apiserver: FakeApiServer, api: KubeApi) -> None:
    apiserver.put_namespace("brand-new", {"team": "ml"})
    seen: list[str] = []
    lookup = NamespaceLookup(api, observe=seen.append)
    snapshot = snapshot_of(SELECTING.replace("FAILURE", "Ignore"))
    info = lookup.resolve(snapshot, "brand-new", time.monotonic() + 5)
    assert isinstance(info, NamespaceInfo) and info.labels["team"] == "ml"
    assert info.as_cel()["status"] == {"phase": "Active"} and info.as_cel()["metadata"]["uid"]
    assert lookup.resolve(snapshot, "brand-new", time.monotonic() + 5) == info
    assert lookups(apiserver) == ["/api/v1/namespaces/brand-new"] and seen == ["read"]
    known = snapshot_of(SELECTING.replace("FAILURE", "Ignore"), namespaces=[NamespaceInfo("team-a")])
    assert lookup.resolve(known, "team-a", None) == NamespaceInfo("team-a") and len(lookups(apiserver)) == 1


@pytest.mark.parametrize(("code", "reason"), [(403, "Forbidden"), (404, "NotFound"), (503, "ServiceUnavailable")])
def test_a_refused_read_makes_the_namespace_unknown(apiserver: FakeApiServer, api: KubeApi, code: int,
                                                    reason: str) -> None:
    apiserver.put_namespace("brand-new", {"team": "ml"})
    apiserver.fail("GET", "/api/v1/namespaces/brand-new", code, reason)
    info = NamespaceLookup(api).resolve(snapshot_of(EVERYWHERE), "brand-new", None)
    assert info == UnknownNamespace("brand-new", f"{code} {reason}")


def test_an_api_server_slower_than_the_deadline_makes_the_namespace_unknown_in_time(
        apiserver: FakeApiServer, api: KubeApi) -> None:
    apiserver.put_namespace("brand-new", {"team": "ml"})
    apiserver.delays["/api/v1/namespaces/brand-new"] = 3.0
    started = time.monotonic()
    info = NamespaceLookup(api).resolve(snapshot_of(EVERYWHERE), "brand-new", started + 0.5)
    assert isinstance(info, UnknownNamespace) and time.monotonic() - started < 1.5


@pytest.mark.parametrize("dependent", [SELECTING, READING], ids=["namespaceSelector", "namespaceObject"])
@pytest.mark.parametrize("failure_policy", ["Ignore", "Fail"])
def test_policies_that_depend_on_an_unknown_namespace_follow_their_failure_policy(
        apiserver: FakeApiServer, api: KubeApi, failure_policy: str, dependent: str) -> None:
    apiserver.fail("GET", "/api/v1/namespaces/team-a", 403, "Forbidden")
    snapshot = snapshot_of(dependent.replace("FAILURE", failure_policy), EVERYWHERE)
    request = parse_review(fixture_request("pod-bare-create-dryrun"))
    admission = admit(request, snapshot, default_workload_table(), resolve_namespace=NamespaceLookup(api).resolve)
    if failure_policy == "Fail":
        assert admission.result == "denied"
        assert admission.response["response"]["status"]["message"] == (
            "policy ml-pool: namespace team-a could not be read (403 Forbidden); failurePolicy Fail")
    else:
        assert admission.result == "patched"
        assert admission.mutation.applied == ["everywhere/zone"]  # a policy that does not read the namespace
        assert admission.response["response"]["warnings"] == [
            "placer: ml-pool: skipped: namespace team-a could not be read (403 Forbidden)"]


def test_the_controller_publishes_the_global_default_priority_class(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    apiserver.put_priority_class("high", 1000)
    apiserver.put_priority_class("cluster-default", 100, global_default=True)
    running: Running = start(api, apiserver, tmp_path, status=False)
    try:
        state: Any = wait_for(running.read, what="a published state")
        assert state.default_priority_class == "cluster-default"  # published with the first state
        source = ClusterStateSource(running.state, compiler=PolicyCompiler())
        source.refresh()
        assert source.content().default_priority_class == "cluster-default"
        apiserver.put_priority_class("cluster-default", 100, global_default=False)
        wait_for(lambda: running.read().default_priority_class is None, what="the default removed")  # type: ignore[union-attr]
    finally:
        running.stop.set()
        apiserver.drop_watches()


def test_priority_classes_are_optional_for_the_controller(apiserver: FakeApiServer, api: KubeApi,
                                                          tmp_path: Path) -> None:
    """An older ClusterRole without PriorityClasses must not keep the webhook from becoming ready."""
    apiserver.fail("GET", "/apis/scheduling.k8s.io/v1/priorityclasses", 403, "Forbidden", times=1000)
    running = start(api, apiserver, tmp_path, status=False)
    try:
        state: Any = wait_for(running.read, what="a published state")
        assert state.synced and state.default_priority_class is None
    finally:
        running.stop.set()
        apiserver.drop_watches()


def test_a_closed_client_opens_no_new_connection(apiserver: FakeApiServer, api: KubeApi) -> None:
    """A thread finishing its last call after close() (a controller releasing its Lease) must not leave a
    connection behind that nobody closes."""
    api.close()
    with pytest.raises(TransportError, match="the client is closed"):
        api.get(NAMESPACES)
    assert apiserver.requests == []
