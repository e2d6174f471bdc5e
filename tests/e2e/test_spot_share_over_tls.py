"""`spot-share` through the real server (granian, TLS), on the API server's own captured Pod creates: the
patch applies, the Pod it makes is valid for the API server's schema, and a server with no pod counts says
so in a warning while deciding as for a workload with no pods."""

import json
from collections.abc import Iterator
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest

from tests.conftest import fixture_request
from tests.e2e.server import RunningServer, running_server
from tests.helpers import decode_patch

pytestmark = pytest.mark.e2e

POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: cost}
spec:
  rules:
  - name: share
    action: spot-share
    parameters: {capacity: gke, maxSpotPercentage: 60}
  - name: pools
    action: prefer-node-pools
    parameters: {key: cloud.google.com/gke-nodepool, pools: [spot-pool, default-pool]}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, certificates: Any) -> Iterator[RunningServer]:
    workdir = tmp_path_factory.mktemp("serve")
    policies = workdir / "policies"
    policies.mkdir()
    (policies / "cost.yaml").write_text(POLICY)
    with running_server(workdir, certificates, policies=policies) as running:
        yield running


def admitted(server: RunningServer, fixture: str) -> tuple[dict[str, Any], dict[str, Any]]:
    body = fixture_request(fixture)
    review = server.post("/mutate?timeout=5s", data=json.dumps(body), headers={"Content-Type": "application/json"})
    assert review.status_code == 200
    answer = review.json()["response"]
    mutated = jsonpatch.apply_patch(body["request"]["object"], decode_patch(review.json()))
    kubernetes_validate.validate(mutated, "1.34.0", strict=True)
    return answer, mutated


def test_a_replicaset_pod_without_counts_is_on_demand_with_a_warning(server: RunningServer) -> None:
    answer, pod = admitted(server, "pod-rs-owned-generatename-create-real-as-admin")
    assert pod["metadata"]["labels"]["placer.dev/capacity-class"] == "on-demand"
    assert pod["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"] == "100"
    assert pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"}]}]}
    assert any("not known yet: decided as for a workload with no pods (on-demand)" in warning
               for warning in answer["warnings"])


def test_a_bare_pod_is_a_workload_of_one_with_no_warning(server: RunningServer) -> None:
    answer, pod = admitted(server, "pod-bare-create-real")
    assert pod["metadata"]["labels"]["placer.dev/capacity-class"] == "on-demand"  # 60 % of one pod: none
    assert "warnings" not in answer
    terms = pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [(term["weight"], term["preference"]["matchExpressions"][0]["values"]) for term in terms] == [
        (100, ["spot-pool"]), (50, ["default-pool"])]
