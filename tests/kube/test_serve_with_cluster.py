"""`placer serve --kube` end to end: real granian over TLS, its controller process, and the fake API server.

Checks the snapshot the webhook actually serves after each step, through /readyz and /mutate.
"""

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import fixture_request
from tests.e2e.server import RunningServer, running_server
from tests.helpers import decode_patch
from tests.kube.fake_apiserver import CLAIMS, NAMESPACES, POLICIES, VOLUMES, FakeApiServer, wait_for
from tests.volumes.data import objects, statefulset_pod

pytestmark = pytest.mark.e2e


def pool_policy(pool: str, *, selector: dict[str, str] | None = None, name: str = "pool") -> dict[str, Any]:
    spec: dict[str, Any] = {"rules": [{"name": "pool", "action": "add-node-selector", "parameters": {"pool": pool}}]}
    if selector:
        spec["namespaceSelector"] = {"matchLabels": selector}
    return {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": name},
            "spec": spec}


def node_selector(server: RunningServer) -> dict[str, str]:
    """What a real captured Pod create in namespace team-a gets, as every worker serves it."""
    review = server.post("/mutate", json=fixture_request("pod-bare-create-dryrun")).json()
    assert review["response"]["allowed"] is True
    for op in decode_patch(review):
        if op["path"] == "/spec/nodeSelector":
            return dict(op["value"])
        if op["path"].startswith("/spec/nodeSelector/"):
            return {op["path"].rsplit("/", 1)[1].replace("~1", "/"): op["value"]}
    return {}


def served_by_all_workers(server: RunningServer, expected: dict[str, str]) -> bool:
    """True once 12 requests in a row (spread over both workers by the kernel) all see `expected`."""
    return all(node_selector(server) == expected for _ in range(12))


@pytest.fixture
def kubeconfig_for(certificates: Any, tmp_path: Path) -> Any:
    def make(apiserver: FakeApiServer) -> Path:
        return apiserver.kubeconfig(tmp_path / "kubeconfig", certificates.ca_cert)
    return make


def test_cluster_policies_take_effect_change_and_disappear_within_seconds(
        apiserver: FakeApiServer, kubeconfig: Path, certificates: Any, tmp_path: Path) -> None:
    apiserver.put_namespace("team-a", {"team": "ml"})
    apiserver.put_policy(pool_policy("ml-pool", selector={"team": "ml"}))
    empty = tmp_path / "no-policies"
    empty.mkdir()
    with running_server(tmp_path, certificates, policies=empty,
                        extra=["--kube", "--kubeconfig", str(kubeconfig)]) as server:
        wait_for(lambda: served_by_all_workers(server, {"pool": "ml-pool"}), timeout=5, what="every worker")
        readiness = server.get("/readyz").text
        assert readiness.startswith("ok: 1 policies, 0 errors")
        # what the controller discovered, and the minor the workers check policies' fields against
        assert "\napi server: " in readiness and "\nfield checks: Kubernetes 1.3" in readiness

        apiserver.put_policy(pool_policy("gpu-pool", selector={"team": "ml"}))
        started = time.monotonic()
        wait_for(lambda: served_by_all_workers(server, {"pool": "gpu-pool"}), timeout=10, what="the update")
        assert time.monotonic() - started < 5

        apiserver.put_namespace("team-a", {"team": "web"})  # namespace labels come from the cluster too
        wait_for(lambda: served_by_all_workers(server, {}), timeout=10, what="the namespace relabel")
        apiserver.put_namespace("team-a", {"team": "ml"})
        wait_for(lambda: served_by_all_workers(server, {"pool": "gpu-pool"}), timeout=10, what="relabel back")

        apiserver.delete(POLICIES, "pool")
        wait_for(lambda: served_by_all_workers(server, {}), timeout=10, what="the deletion")

        # Status was written by this replica's controller, which held the Lease.
        assert apiserver.status_patches and apiserver.leases["placer-status-writer"]["spec"]["holderIdentity"]


def test_not_ready_until_the_first_sync_then_serving_through_an_api_server_outage(
        apiserver: FakeApiServer, kubeconfig: Path, certificates: Any, tmp_path: Path) -> None:
    apiserver.put_namespace("team-a")
    apiserver.put_policy(pool_policy("cluster-pool"))
    apiserver.fail("GET", NAMESPACES + "$", 503, "ServiceUnavailable", times=4)  # the list (not the key's Secret)
    with running_server(tmp_path, certificates, extra=["--kube", "--kubeconfig", str(kubeconfig)],
                        policies=tmp_path, wait=False) as server:
        wait_for(lambda: _status(server, "/healthz") == 200, what="the server")
        assert _status(server, "/readyz") == 503
        assert server.get("/readyz").json() == {"error": "policies not loaded yet"}
        wait_for(lambda: _status(server, "/readyz") == 200, timeout=20, what="ready after the first sync")
        # Each worker picks the first state up within a poll interval (1 s) of the controller writing it.
        wait_for(lambda: served_by_all_workers(server, {"pool": "cluster-pool"}), timeout=5, what="every worker")

        apiserver.shutdown()  # the API server goes away: admissions go on with the last good snapshot
        time.sleep(1.5)
        assert served_by_all_workers(server, {"pool": "cluster-pool"})
        assert _status(server, "/readyz") == 200
        assert "retrying in" in server.log_text()


def test_the_controller_process_is_restarted_and_file_policies_combine_with_cluster_ones(
        apiserver: FakeApiServer, kubeconfig: Path, certificates: Any, tmp_path: Path) -> None:
    apiserver.put_namespace("team-a")
    apiserver.put_policy(pool_policy("from-cluster"))
    files = tmp_path / "policies"
    files.mkdir()
    (files / "zone.yaml").write_text(
        "apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: zone}\nspec:\n"
        "  rules:\n  - {name: zone, action: add-node-selector, parameters: {zone: a}}\n"
        "---\napiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: pool}\nspec:\n"
        "  rules:\n  - {name: pool, action: add-node-selector, parameters: {pool: from-file}}\n")
    with running_server(tmp_path, certificates, policies=files,
                        extra=["--kube", "--kubeconfig", str(kubeconfig)]) as server:
        # The cluster's `pool` wins over the file's; the file's `zone` applies as well.
        wait_for(lambda: served_by_all_workers(server, {"pool": "from-cluster", "zone": "a"}), timeout=5,
                 what="every worker")
        readyz = server.get("/readyz").text
        assert readyz.startswith("ok: 2 policies, 1 errors")

        controller = _controller_pid(server)
        os.kill(controller, signal.SIGKILL)
        wait_for(lambda: _controller_pid(server, not_pid=controller), timeout=15, what="a new controller")
        apiserver.put_policy(pool_policy("after-restart"))
        wait_for(lambda: served_by_all_workers(server, {"pool": "after-restart", "zone": "a"}), timeout=15,
                 what="the restarted controller's state")


def _status(server: RunningServer, path: str) -> int | None:
    try:
        return server.get(path).status_code
    except requests.RequestException:
        return None


def _controller_pid(server: RunningServer, not_pid: int | None = None) -> int | None:
    """The pid of `python -m webhook.cluster.process` among the server's process group."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            group = os.getpgid(int(entry.name))
        except OSError:
            continue
        if b"webhook.cluster.process" in command and group == server.process.pid and int(entry.name) != not_pid:
            return int(entry.name)
    return None


def test_a_workload_created_right_after_its_namespace_gets_the_namespaces_policies(
        apiserver: FakeApiServer, kubeconfig: Path, certificates: Any, tmp_path: Path) -> None:
    """`kubectl apply -f ns.yaml -f app.yaml`: the Pod arrives before the watch has delivered its namespace.

    Measures the window in which the watched state alone does not know a new namespace (the read is refused
    for `blind-*` namespaces, so only the watch can tell the workers), and shows that admissions inside that
    window get the namespace's policies: the watch never delivers `fresh-*` namespaces (the window held
    open), so only the worker's read of the namespace can.
    """
    apiserver.put_namespace("team-a", {"team": "web"})
    apiserver.put_policy(pool_policy("ml-pool", selector={"team": "ml"}))
    apiserver.fail("GET", "/api/v1/namespaces/blind-", 403, "Forbidden", times=10_000)
    apiserver.silenced = ("fresh-",)
    empty = tmp_path / "no-policies"
    empty.mkdir()
    with running_server(tmp_path, certificates, policies=empty,
                        extra=["--kube", "--kubeconfig", str(kubeconfig)]) as server:
        windows = []
        for attempt in range(3):
            for prefix in ("fresh", "blind"):
                name = f"{prefix}-{attempt}"
                created = time.monotonic()
                apiserver.put_namespace(name, {"team": "ml"})
                if prefix == "fresh":
                    assert _node_selector_in(server, name) == {"pool": "ml-pool"}  # at once
                else:
                    wait_for(lambda name=name: all(  # type: ignore[misc]
                        _node_selector_in(server, name) == {"pool": "ml-pool"} for _ in range(6)), timeout=10)
                    windows.append(time.monotonic() - created)
        reads = [p for m, p, _ in apiserver.requests if m == "GET" and p.startswith("/api/v1/namespaces/fresh-")]
        assert len(reads) >= 3
    print(f"\nwithout the read, a new namespace reached every worker after {min(windows) * 1000:.0f}-"
          f"{max(windows) * 1000:.0f} ms; with it, the first admission had its labels ({len(reads)} reads)")


def _node_selector_in(server: RunningServer, namespace: str) -> dict[str, str]:
    body = fixture_request("pod-bare-create-dryrun")
    body["request"]["namespace"] = body["request"]["object"]["metadata"]["namespace"] = namespace
    for op in decode_patch(server.post("/mutate", json=body).json()):
        if op["path"] == "/spec/nodeSelector":
            return dict(op["value"])
    return {}


def test_a_placement_no_node_can_take_is_admitted_with_a_warning_until_a_node_can(
        apiserver: FakeApiServer, kubeconfig: Path, certificates: Any, tmp_path: Path) -> None:
    apiserver.put_namespace("team-a", {"team": "ml"})
    apiserver.put_node("cpu-1", {"pool": "general"})
    apiserver.put_node("gpu-1", {"pool": "gpu"}, taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    apiserver.put_policy(pool_policy("ml", selector={"team": "ml"}))
    empty = tmp_path / "no-policies"
    empty.mkdir()
    with running_server(tmp_path, certificates, policies=empty,
                        extra=["--kube", "--kubeconfig", str(kubeconfig)]) as server:
        wait_for(lambda: served_by_all_workers(server, {"pool": "ml"}), timeout=10, what="every worker")

        def warnings() -> list[str]:
            review = server.post("/mutate", json=fixture_request("pod-bare-create-dryrun")).json()["response"]
            assert review["allowed"] is True
            return list(review.get("warnings") or [])

        # gpu-1 is tainted and lacks the label: kube-scheduler's TaintToleration filter runs before NodeAffinity
        # and rejects it first, so its FailedScheduling event names the taint (webhook/placement/node_fit.py).
        expected = ("placer: rule pool/pool: no node can host the pods (1 with untolerated taint "
                    "nvidia.com/gpu:NoSchedule, 1 without label pool=ml; 0 of 2 nodes)")
        wait_for(lambda: all(expected in warnings() for _ in range(6)), timeout=10, what="the warning")
        assert 'placer_unplaceable_templates_total{kind="Pod"}' in server.get("/metrics").text

        apiserver.put_node("ml-1", {"pool": "ml"})  # a node of the pool arrives: the pods can land
        wait_for(lambda: all(not warnings() for _ in range(6)), timeout=10, what="the warning to go")


def test_a_statefulset_pod_is_pinned_to_its_volume_node_from_the_watched_claims(
        apiserver: FakeApiServer, kubeconfig: Path, certificates: Any, tmp_path: Path) -> None:
    """Claims, volumes and nodes watched by the controller, published, read by every worker at admission."""
    for obj in objects():
        apiserver.put(CLAIMS if obj["kind"] == "PersistentVolumeClaim" else VOLUMES, obj)
    for name in ("kind-worker", "kind-worker2"):
        apiserver.put_node(name)
    apiserver.put_policy({"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy",
                          "metadata": {"name": "local-data"}, "spec": {"rules": [
                              {"name": "follow-data", "action": "pin-to-volume-node",
                               "parameters": {"strict": "true"}}]}})
    empty = tmp_path / "no-policies"
    empty.mkdir()
    review = statefulset_pod("data", "cache", "fast")
    hostname = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["kind-worker"]}

    def pinned_everywhere() -> bool:
        for _ in range(8):  # both workers
            answer = server.post("/mutate", json=review).json()["response"]
            if not any(op["path"] == "/spec/affinity" for op in decode_patch({"response": answer})):
                return False
        return True

    with running_server(tmp_path, certificates, policies=empty,
                        extra=["--kube", "--kubeconfig", str(kubeconfig)]) as server:
        wait_for(pinned_everywhere, timeout=10, what="every worker pinning the pod")
        answer = server.post("/mutate", json=review).json()["response"]
        (op,) = [op for op in decode_patch({"response": answer}) if op["path"] == "/spec/affinity"]
        term = op["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
        assert term["matchExpressions"] == [hostname, {"key": "topology.topolvm.io/node", "operator": "In",
                                                       "values": ["kind-worker3"]}]
        assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["kind-worker2"]}]
        # kind-worker3 is not a node of this cluster: TopoLVM's node is gone, strict pins it anyway and says so.
        assert any("fast-db-0: its topology.topolvm.io/node=kind-worker3 is gone" in w for w in answer["warnings"])
        metrics = server.get("/metrics").text
        assert 'placer_volume_pins_total{outcome="pinned"}' in metrics
        assert 'placer_volume_pins_total{outcome="pinned-node-gone"}' in metrics
