"""`placer serve --kube` end to end for `spot-share`: the replica's controller counts the live pods of a
workload by the class Placer gave them, its workers decide each new Pod from those counts (over TLS, as the
API server asks), and a Pod one worker admitted counts for the next admission on either worker before the
controller has seen it."""

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.server import RunningServer, running_server
from tests.helpers import decode_patch
from tests.kube.fake_apiserver import PODS, FakeApiServer, wait_for
from tests.kube.test_spot_ledger import pod
from webhook.pods.capacity_share import CLASS_LABEL

pytestmark = pytest.mark.e2e

POLICY = {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "cost"},
          "spec": {"rules": [{"name": "half-spot", "action": "spot-share",
                              "parameters": {"capacity": "karpenter", "maxSpotPercentage": 50}}]}}


def review(name: str, *, dry_run: bool = False) -> dict[str, Any]:
    """The API server's review of a new pod of the ReplicaSet `RS` in team-a."""
    obj = pod(name, capacity_class=None)
    obj.pop("status")
    obj["spec"].pop("nodeName")
    obj.update(apiVersion="v1", kind="Pod")
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": f"uid-{name}", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "team-a", "name": name,
        "operation": "CREATE", "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
        "object": obj, "oldObject": None, "dryRun": dry_run, "options": {"kind": "CreateOptions",
                                                                          "apiVersion": "meta.k8s.io/v1"}}}


def capacity_class(server: RunningServer, name: str, *, dry_run: bool = False) -> str | None:
    response = server.post("/mutate", json=review(name, dry_run=dry_run)).json()
    for op in decode_patch(response):
        if op["path"] == "/metadata/labels":
            return str(op["value"].get(CLASS_LABEL))
        if op["path"] == f"/metadata/labels/{CLASS_LABEL.replace('/', '~1')}":
            return str(op["value"])
    return None


def test_served_workers_decide_each_pod_from_the_live_counts_and_each_others_admissions(
        apiserver: FakeApiServer, kubeconfig: Path, certificates: Any, tmp_path: Path) -> None:
    apiserver.put_namespace("team-a")
    apiserver.put_policy(POLICY)
    apiserver.put(PODS, pod("web-od-0", capacity_class="on-demand"))  # one on-demand pod runs already
    empty = tmp_path / "no-policies"
    empty.mkdir()
    with running_server(tmp_path, certificates, policies=empty, extra=["--kube", "--kubeconfig", str(kubeconfig)],
                        env={"POD_NAME": "placer-e2e-0"}) as server:
        # With its one on-demand pod counted, the workload has room for a spot pod (1 of 2 is 50 %);
        # before the controller has published, a pod is decided as its workload's first: on-demand.
        wait_for(lambda: capacity_class(server, "probe", dry_run=True) == "spot", timeout=20,
                 what="the published count of the on-demand pod")
        assert capacity_class(server, "web-1") == "spot"
        # Not yet seen by the controller (never created here), but admitted: the next pods, whichever worker
        # answers them, count it: 1 spot of 3 is the most 50 % allows, and so on.
        classes = [capacity_class(server, f"web-{index}") for index in range(2, 6)]
        assert classes == ["on-demand", "spot", "on-demand", "spot"]
        assert "Traceback" not in server.log_text()
