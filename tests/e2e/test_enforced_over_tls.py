"""An Enforced policy's refusal as the API server receives it: over TLS from the real server, a 403 with the
message kubectl prints, and a compliant object of the same namespace placed."""

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import REPO
from tests.e2e.server import RunningServer, running_server
from tests.helpers import decode_patch, review_for

pytestmark = pytest.mark.e2e

NAMESPACE = """apiVersion: v1
kind: Namespace
metadata:
  name: team-a
  labels: {tenant: team-a, placer.dev/enforce: "true"}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, certificates: Any) -> Iterator[RunningServer]:
    workdir = tmp_path_factory.mktemp("enforced")
    policies = workdir / "policies"
    policies.mkdir()
    shutil.copy(REPO / "policies" / "enforced-team-pool.yaml", policies)
    (policies / "namespaces.yaml").write_text(NAMESPACE)
    with running_server(workdir, certificates, policies=policies) as running:
        yield running


def deployment(template_spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team-a", **({"labels": labels} if labels else {})},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}], **template_spec}}}}


def test_a_conflicting_workload_is_refused_with_403_and_the_message(server: RunningServer) -> None:
    body = review_for(deployment({"nodeSelector": {"node-pool": "shared-premium"}},
                                 labels={"placer.dev/inject": "disabled"}))
    reply = server.post("/mutate?timeout=5s", json=body)
    assert reply.status_code == 200
    response = reply.json()["response"]
    assert response["uid"] == body["request"]["uid"] and response["allowed"] is False
    assert "patch" not in response
    assert response["status"] == {
        "code": 403, "reason": "Forbidden", "status": "Failure", "metadata": {},
        "message": 'deployments "web" is forbidden: policy enforced-team-pool, rule general-pool: '
                   'spec.template.spec.nodeSelector[node-pool]: wanted "general", found "shared-premium" '
                   "(enforcement: Enforced)"}


def test_a_compliant_workload_in_the_same_namespace_is_placed(server: RunningServer) -> None:
    body = review_for(deployment({"tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}))
    response = server.post("/mutate?timeout=5s", json=body).json()["response"]
    assert response["allowed"] is True
    assert {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"node-pool": "general"}} in (
        decode_patch({"response": response}))


def test_the_denial_is_counted(server: RunningServer) -> None:
    server.post("/mutate?timeout=5s", json=review_for(deployment({"nodeSelector": {"node-pool": "x"}})))
    metrics = server.get("/metrics").text
    denied = [line for line in metrics.splitlines() if line.startswith("placer_rule_evaluations_total")
              and 'outcome="denied"' in line and 'rule="general-pool"' in line]
    assert denied and float(denied[0].split()[-1]) >= 1, [line for line in metrics.splitlines()
                                                         if "rule_evaluations" in line][:10]


def test_the_fail_closed_entry_refuses_what_no_loaded_policy_decides(server: RunningServer) -> None:
    """`/enforce` serves namespaces labelled placer.dev/enforce=true: one no loaded Enforced policy selects (a
    policy not loaded yet, or just removed) is refused with the reason, where `/mutate` would admit."""
    body = review_for(deployment({}))
    body["request"]["namespace"] = body["request"]["object"]["metadata"]["namespace"] = "team-b"
    refused = server.post("/enforce?timeout=5s", json=body).json()["response"]
    assert refused["allowed"] is False and refused["status"]["code"] == 403
    assert "namespace team-b is labelled placer.dev/enforce=true but no Enforced policy Placer has loaded selects" \
        in refused["status"]["message"]
    assert server.post("/mutate?timeout=5s", json=body).json()["response"]["allowed"] is True
    placed = server.post("/enforce?timeout=5s", json=review_for(deployment({}))).json()
    assert placed["response"]["allowed"] is True and decode_patch(placed)


def test_a_workload_naming_a_controller_of_its_own_is_refused_over_tls(server: RunningServer) -> None:
    forged = deployment({"nodeSelector": {"node-pool": "shared-premium"}, "tolerations": [{"operator": "Exists"}]})
    forged["kind"] = "ReplicaSet"
    forged["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "mine", "uid": "1",
                                              "controller": True}]
    response = server.post("/enforce?timeout=5s", json=review_for(forged)).json()["response"]
    assert response["allowed"] is False
    assert response["status"]["message"].startswith('replicasets "web" is forbidden: policy enforced-team-pool')
