"""README claims, end to end (`placer serve --kube` over TLS against the fake API server): with
`--opt-in=label-or-annotation`, a namespace opted in by its label alone is served and one Placer cannot find
passes through; subresource requests pass through unchanged.

The requests are the captured Pod create and update (kube-apiserver v1.34), moved to other namespaces.
"""

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fixture_request
from tests.e2e.server import RunningServer, running_server
from tests.helpers import decode_patch
from tests.kube.fake_apiserver import POLICIES, FakeApiServer, wait_for

pytestmark = pytest.mark.e2e

POLICY = {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "pool"},
          "spec": {"rules": [{"name": "pool", "action": "add-node-selector", "parameters": {"pool": "general"}}]}}


def pod_create_in(namespace: str) -> dict[str, Any]:
    body = fixture_request("pod-bare-create-dryrun")
    body["request"]["namespace"] = body["request"]["object"]["metadata"]["namespace"] = namespace
    return body


def answer(server: RunningServer, body: dict[str, Any]) -> dict[str, Any]:
    reply = server.post("/mutate", json=body)
    assert reply.status_code == 200
    response: dict[str, Any] = reply.json()["response"]
    assert response["uid"] == body["request"]["uid"] and response["allowed"] is True
    return response


def selector_of(response: dict[str, Any]) -> Any:
    ops = decode_patch({"response": response}) if "patch" in response else []
    return next((op["value"] for op in ops if op["path"] == "/spec/nodeSelector"), None)


@contextlib.contextmanager
def serving_cluster(apiserver: FakeApiServer, kubeconfig: Path, certificates: Any,
                    workdir: Path) -> Iterator[RunningServer]:
    apiserver.put_namespace("by-label", {"placer.dev/inject": "enabled"})
    apiserver.put_namespace("by-annotation", annotations={"placer.dev/inject": "enabled"})
    apiserver.put_namespace("not-opted-in", {"team": "web"})
    apiserver.put_namespace("opted-out", {"placer.dev/inject": "disabled"})
    apiserver.put_policy(POLICY)
    empty = workdir / "no-policies"
    empty.mkdir()
    with running_server(workdir, certificates, policies=empty, extra=[
            "--kube", "--kubeconfig", str(kubeconfig), "--opt-in", "label-or-annotation"]) as server:
        wait_for(lambda: selector_of(answer(server, pod_create_in("by-label"))) == {"pool": "general"},
                 what="the cluster's policy and namespaces served")
        yield server


@pytest.fixture(scope="module")
def shared_cluster(certificates: Any, tmp_path_factory: pytest.TempPathFactory,
                   ) -> Iterator[tuple[FakeApiServer, RunningServer]]:
    """One API server and one Placer for the tests that only read what is served (or add a namespace of
    their own): starting `placer serve --kube` and its first sync is most of each test's time."""
    workdir = tmp_path_factory.mktemp("opt-in")
    apiserver = FakeApiServer().serve(certificates.cert, certificates.key)
    try:
        kubeconfig = apiserver.kubeconfig(workdir / "kubeconfig", certificates.ca_cert)
        with serving_cluster(apiserver, kubeconfig, certificates, workdir) as server:
            yield apiserver, server
    finally:
        apiserver.shutdown()


@pytest.fixture
def serving(shared_cluster: tuple[FakeApiServer, RunningServer]) -> RunningServer:
    return shared_cluster[1]


@pytest.fixture
def shared_apiserver(shared_cluster: tuple[FakeApiServer, RunningServer]) -> FakeApiServer:
    return shared_cluster[0]


def test_label_or_annotation_mode_serves_a_namespace_opted_in_by_its_label_alone(
        serving: RunningServer) -> None:
    for _ in range(6):  # both workers
        assert selector_of(answer(serving, pod_create_in("by-label"))) == {"pool": "general"}
        assert selector_of(answer(serving, pod_create_in("by-annotation"))) == {"pool": "general"}
        for namespace in ("not-opted-in", "opted-out"):
            response = answer(serving, pod_create_in(namespace))
            assert "patch" not in response and not response.get("warnings"), namespace


def test_label_or_annotation_mode_passes_through_a_namespace_placer_cannot_find(
        shared_apiserver: FakeApiServer, serving: RunningServer) -> None:
    """Not in the watch's state and 404 from the API server: not known to have opted in, so passed through
    (allowed, no patch, no warning). One created just now, not yet delivered by the watch, is read from the
    API server and served by its label."""
    for _ in range(4):
        response = answer(serving, pod_create_in("no-such-namespace"))
        assert "patch" not in response and not response.get("warnings")
    assert any(path == "/api/v1/namespaces/no-such-namespace" for _, path, _ in shared_apiserver.requests), "looked up"
    shared_apiserver.silenced = ("just-created",)
    shared_apiserver.put_namespace("just-created", {"placer.dev/inject": "enabled"})
    assert selector_of(answer(serving, pod_create_in("just-created"))) == {"pool": "general"}


@pytest.mark.parametrize("subresource", ["status", "ephemeralcontainers", "resize", "binding"])
def test_a_subresource_request_passes_through_unchanged(serving: RunningServer, subresource: str) -> None:
    """A webhook registered for `pods/<sub>` gets requests with `subResource` set. The request here is the
    captured Pod create in an opted-in namespace, which is patched, with only `subResource` (and
    `requestSubResource`) added: it passes through, allowed, with no patch and no warning."""
    create = pod_create_in("by-label")
    assert selector_of(answer(serving, create)) == {"pool": "general"}
    sub = copy.deepcopy(create)
    sub["request"]["subResource"] = sub["request"]["requestSubResource"] = subresource
    for _ in range(4):
        response = answer(serving, sub)
        assert "patch" not in response and not response.get("warnings")


def test_the_policy_of_the_cluster_is_what_serves(apiserver: FakeApiServer, kubeconfig: Path, certificates: Any,
                                                  tmp_path: Path) -> None:
    """The server under test serves the cluster's SchedulingPolicy (not a leftover): deleting it stops it.
    (A server of its own: the shared one keeps serving the policy.)"""
    with serving_cluster(apiserver, kubeconfig, certificates, tmp_path) as serving:
        apiserver.delete(POLICIES, "pool")
        wait_for(lambda: all(selector_of(answer(serving, pod_create_in("by-label"))) is None for _ in range(6)),
                 what="the deletion served")
