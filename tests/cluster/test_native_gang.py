"""kube-scheduler's own gang scheduling on a living cluster (`scheduler: native`, policies/gang-native-jobs.yaml).

- With the API served: an Indexed Job of 4 pods that fit one per node (required anti-affinity between them,
  and a node affinity to 4 schedulable untainted nodes), with one of the 4 cordoned, binds none of them; once
  the node is uncordoned all 4 bind. Its pods name one group, and that PodGroup is a gang of 4 owned by the
  Job (controller owner reference, so the garbage collector deletes it with the Job).
- Without the API: the same Job is created with Placer's warning and unchanged, and its pods schedule as
  before (skipped on a cluster that serves it: the two halves need two clusters).

Needs, for the first half, a v1.36 cluster started with the feature gates `GenericWorkload=true` and
`GangScheduling=true` on kube-apiserver and kube-scheduler, `--runtime-config=scheduling.k8s.io/v1alpha2=true`
on kube-apiserver (or a 1.37 cluster serving `scheduling.k8s.io/v1beta1`), and 4 schedulable untainted nodes.
Needs kubectl on PATH (the warning is what kubectl prints). Cordons and uncordons one node; the node is
uncordoned whatever happens.
"""

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster.harness import DOCS, Cluster, wait_until
from tests.conftest import REPO
from webhook.cluster.client.api import ApiError

pytestmark = pytest.mark.cluster

GROUP = "/apis/scheduling.k8s.io"
MEMBERS = 4
HELD_FOR = 30.0
"""How long the 3 pods that could be placed are watched staying unbound while the fourth cannot be."""
BIND_TIMEOUT = 180.0


def native_version(cluster: Cluster) -> str | None:
    """The PodGroup version the cluster serves (v1beta1 first), or None."""
    try:
        versions = [v["version"] for v in cluster.api.get(GROUP).get("versions") or []]
    except ApiError:
        return None
    for version in ("v1beta1", "v1alpha2"):
        if version in versions:
            with contextlib.suppress(ApiError):
                if any(r["name"] == "podgroups" for r in cluster.api.get(f"{GROUP}/{version}")["resources"]):
                    return version
    return None


def kubectl(*args: str, stdin: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is not on PATH: this test checks what kubectl prints")
    environment = {**os.environ, "KUBECONFIG": os.environ["PLACER_E2E_KUBECONFIG"]}
    return subprocess.run([binary, *args], input=json.dumps(stdin) if stdin else None, capture_output=True,
                          text=True, env=environment, timeout=60, check=False)


def warnings_of(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    return [line.removeprefix("Warning: ") for line in result.stderr.splitlines() if line.startswith("Warning: ")]


def four_nodes(cluster: Cluster) -> list[str]:
    nodes = [node["metadata"]["name"] for node in cluster.api.get("/api/v1/nodes")["items"]
             if not node["spec"].get("unschedulable") and not node["spec"].get("taints")
             and any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])]
    if len(nodes) < MEMBERS:
        pytest.fail(f"the cluster tier needs {MEMBERS} schedulable untainted Ready nodes, this cluster has "
                    f"{len(nodes)} (see {DOCS})")
    return sorted(nodes)[:MEMBERS]


def gang_job(name: str, namespace: str, nodes: list[str]) -> dict[str, Any]:
    """An Indexed Job of 4 whose pods fit one per node, on `nodes` only."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace}, "spec": {
        "completionMode": "Indexed", "completions": MEMBERS, "parallelism": MEMBERS, "backoffLimit": 0,
        "template": {"metadata": {"labels": {"app": name}}, "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": name}}, "topologyKey": "kubernetes.io/hostname"}]}},
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "10m"}}}]}}}}


def native_policy(cluster: Cluster, namespace: str) -> str:
    """policies/gang-native-jobs.yaml, selecting only this test's namespace."""
    spec = yaml.safe_load((REPO / "policies/gang-native-jobs.yaml").read_text())["spec"]
    spec["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    cluster.policy("native-gang", spec)
    return "native-gang"


@contextlib.contextmanager
def cordoned(cluster: Cluster, node: str) -> Iterator[None]:
    cluster.api.merge_patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})
    try:
        yield
    finally:
        cluster.api.merge_patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": None}})


def pods_of(cluster: Cluster, namespace: str, job: str) -> list[dict[str, Any]]:
    selector = f"batch.kubernetes.io/job-name={job}"
    return cluster.api.get(f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": selector})["items"]


def bound(pods: list[dict[str, Any]]) -> int:
    return sum(1 for pod in pods if pod["spec"].get("nodeName"))


def test_an_indexed_job_of_four_binds_none_while_a_node_is_cordoned_then_all_four(cluster: Cluster) -> None:
    version = native_version(cluster)
    if version is None:
        pytest.skip("scheduling.k8s.io PodGroups are not served: start the cluster with the gates GenericWorkload "
                    "and GangScheduling and --runtime-config=scheduling.k8s.io/v1alpha2=true")
    nodes = four_nodes(cluster)
    namespace = cluster.namespace()
    policy = native_policy(cluster, namespace)
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    try:
        def served() -> bool:  # the workers serve the policy and know the API is there
            created = cluster.api.create(jobs, gang_job("probe", namespace, nodes), {"dryRun": "All"})
            return bool(created["spec"]["template"]["spec"].get("schedulingGroup"))

        wait_until(served, timeout=60, what="the webhook serving the native gang policy")
        with cordoned(cluster, nodes[-1]):
            job = cluster.api.create(jobs, gang_job("allreduce", namespace, nodes))
            assert job["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "allreduce"}
            group_path = f"{GROUP}/{version}/namespaces/{namespace}/podgroups/allreduce"
            group = wait_until(lambda: cluster.get_or_none(group_path), timeout=60,
                               what="the PodGroup the controller keeps")
            assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == MEMBERS
            assert group["metadata"]["ownerReferences"] == [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "allreduce", "uid": job["metadata"]["uid"],
                "controller": True}]
            pods = wait_until(lambda: (p := pods_of(cluster, namespace, "allreduce")) and len(p) == MEMBERS and p,
                              timeout=60, what=f"{MEMBERS} pods created")
            assert {pod["spec"]["schedulingGroup"]["podGroupName"] for pod in pods} == {"allreduce"}
            deadline = time.monotonic() + HELD_FOR
            while time.monotonic() < deadline:  # 3 could be placed, the gang of 4 cannot: none is bound
                assert bound(pods_of(cluster, namespace, "allreduce")) == 0
                time.sleep(2)
        wait_until(lambda: bound(pods_of(cluster, namespace, "allreduce")) == MEMBERS, timeout=BIND_TIMEOUT,
                   what=f"all {MEMBERS} pods bound once the node is back")
        assert len({pod["spec"]["nodeName"] for pod in pods_of(cluster, namespace, "allreduce")}) == MEMBERS
    finally:
        cluster.delete_policy(policy)


def test_without_the_api_the_job_gets_a_warning_and_schedules_as_before(cluster: Cluster) -> None:
    if native_version(cluster) is not None:
        pytest.skip("this cluster serves scheduling.k8s.io PodGroups: this half needs one started without the "
                    "gates GenericWorkload and GangScheduling")
    nodes = four_nodes(cluster)
    namespace = cluster.namespace()
    policy = native_policy(cluster, namespace)
    try:
        probe = gang_job("probe", namespace, nodes)

        def warned() -> list[str]:
            said = warnings_of(kubectl("create", "--dry-run=server", "-o", "name", "-f", "-", stdin=probe))
            return [w for w in said if "serves no PodGroup API" in w]

        wait_until(warned, timeout=60, what="the webhook serving the native gang policy")
        result = kubectl("create", "-o", "json", "-f", "-", stdin=gang_job("allreduce", namespace, nodes))
        assert any("native gang: the API server serves no PodGroup API" in w for w in warnings_of(result))
        created = json.loads(result.stdout)
        assert "schedulingGroup" not in created["spec"]["template"]["spec"]
        assert "placer.dev/pod-group" not in (created["metadata"].get("labels") or {})
        wait_until(lambda: bound(pods_of(cluster, namespace, "allreduce")) == MEMBERS, timeout=BIND_TIMEOUT,
                   what=f"all {MEMBERS} pods bound as before")
    finally:
        cluster.delete_policy(policy)


