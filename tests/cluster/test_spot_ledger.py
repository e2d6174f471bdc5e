"""The spot share's pod counts against a living API server (issue 35, the controller side).

The controller's pod watch (`Reflector` over `webhook.cluster.spot.spot_ledger.PODS`, what each replica's controller
runs) is started here with the test's credentials and publishes to a state directory of the test's; a
worker's reader (`ShareShards`) reads it, and `kubectl placer shares` lists the same pods. The pods are made
by the test in a namespace that is not opted in (Placer leaves them alone), with the class label and a
controller ownerReference to a ConfigMap: 3 spot and 2 on-demand. Then one spot pod is deleted (terminating,
then gone) and one on-demand pod ends (phase Failed): neither counts.

The pod ends as a kubelet ends a pod past its `activeDeadlineSeconds`: the test writes that status (phase
Failed, reason DeadlineExceeded) through the pod's `status` subresource. The API server never fails a pod
itself (the kubelet's `activeDeadlineHandler`, pkg/kubelet/active_deadline.go, does, on the pod's node), so
the test does not wait for a kubelet: it needs nothing beyond a v1.34+ API server (no feature gate, no node
or kubelet; a kubelet that runs the pods leaves a terminal phase alone).
"""

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import Cluster, wait_until
from tests.conftest import KUBECONFIG_ENV
from webhook.cluster.client.api import ApiError
from webhook.cluster.client.reflector import Reflector
from webhook.cluster.spot.spot_ledger import PODS, PodShareSink
from webhook.commands.cli import kubectl_main
from webhook.pods.capacity_share import CLASS_LABEL, ShareCounts
from webhook.policy.state.shards import ShardWriter
from webhook.policy.state.share_shards import ShareShards, shares_directory

pytestmark = pytest.mark.cluster

FAILED = {"phase": "Failed", "reason": "DeadlineExceeded",
          "message": "Pod was active on the node longer than the specified deadline"}
"""What the kubelet writes of a pod past its activeDeadlineSeconds (pkg/kubelet/active_deadline.go)."""


def labelled_pod(name: str, owner: dict[str, Any], capacity_class: str) -> dict[str, Any]:
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
                 "uid": owner["metadata"]["uid"], "controller": True}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {CLASS_LABEL: capacity_class}, "ownerReferences": [reference]},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}


def test_live_pods_are_counted_by_class_as_the_api_server_has_them(
        cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    namespace = cluster.namespace(opted_in=False)
    owner = cluster.create(f"/api/v1/namespaces/{namespace}/configmaps",
                           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "workload"}})
    pods = f"/api/v1/namespaces/{namespace}/pods"
    for index in range(3):
        cluster.api.create(pods, labelled_pod(f"spot-{index}", owner, "spot"))
    cluster.api.create(pods, labelled_pod("on-demand-0", owner, "on-demand"))
    cluster.api.create(pods, labelled_pod("on-demand-short", owner, "on-demand"))
    sink = PodShareSink(ShardWriter(shares_directory(tmp_path)))
    stop = threading.Event()
    watch = threading.Thread(target=Reflector(cluster.api, PODS, sink).run, args=(stop,), daemon=True)
    watch.start()
    reader = ShareShards(tmp_path)
    uid = owner["metadata"]["uid"]
    try:
        wait_until(lambda: reader.counts(namespace, uid) == ShareCounts(3, 2, True), timeout=60,
                   what="3 spot and 2 on-demand pods counted")
        cluster.api.delete(f"{pods}/spot-0")
        wait_until(lambda: reader.counts(namespace, uid).spot == 2, timeout=60, what="the deleted pod not counted")
        cluster.api.merge_patch(f"{pods}/on-demand-short/status", {"status": FAILED})
        wait_until(lambda: reader.counts(namespace, uid).on_demand == 1, timeout=60,
                   what="the pod that ended (Failed) not counted")
        assert reader.counts(namespace, uid) == ShareCounts(2, 1, True)
        assert kubectl_main(["shares", "-n", namespace, "-o", "json", "--kubeconfig",
                             os.environ[KUBECONFIG_ENV]]) == 0
        listed = json.loads(capsys.readouterr().out)["workloads"]
        assert [(w["kind"], w["name"], w["uid"], w["spot"], w["onDemand"]) for w in listed] == [
            ("ConfigMap", "workload", uid, 2, 1)]
        assert listed[0]["ending"] >= 1, "the Failed pod is there, and not counted"
    finally:
        stop.set()
        for name in ("spot-1", "spot-2", "on-demand-0", "on-demand-short"):
            with contextlib.suppress(ApiError):
                cluster.api.delete(f"{pods}/{name}")
