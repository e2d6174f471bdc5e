"""GPUs claimed through DRA on a living cluster: a Pod and a Job whose claims name a ResourceClaimTemplate of
device class `gpu.nvidia.com` get the placement the example GPU rule (policies/org-wide-policy.yaml) gives a
Pod asking for `nvidia.com/gpu` (server-side dry-run creates, compared on their tolerations and node
selector). Needs resource.k8s.io/v1 (Kubernetes 1.34 and later: DynamicResourceAllocation is GA and on by
default, no feature gate); skipped, saying so, where it is not served. Creates the DeviceClass
`gpu.nvidia.com` (as the NVIDIA DRA driver installs it) only when the cluster has none, and deletes it after.
No DRA driver or device is needed: nothing is scheduled, Placer reads the template at admission."""

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster.harness import Cluster, wait_until
from tests.conftest import REPO
from webhook.cluster.client.api import ApiError

pytestmark = pytest.mark.cluster

DRA = "/apis/resource.k8s.io/v1"
GPU_CLASS = "gpu.nvidia.com"
GPU_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


def dra_served(cluster: Cluster) -> bool:
    try:
        resources = cluster.api.get(DRA)["resources"]
    except ApiError:
        return False
    return {"resourceclaimtemplates", "deviceclasses"} <= {resource["name"] for resource in resources}


@contextlib.contextmanager
def gpu_device_class(cluster: Cluster) -> Iterator[None]:
    try:
        cluster.api.get(f"{DRA}/deviceclasses/{GPU_CLASS}")
        yield  # a real driver's class: leave it alone
        return
    except ApiError as error:
        if error.code != 404:
            raise
    cluster.api.create(f"{DRA}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": GPU_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{GPU_CLASS}'"}}]}})
    try:
        yield
    finally:
        with contextlib.suppress(ApiError):
            cluster.api.delete(f"{DRA}/deviceclasses/{GPU_CLASS}")


def container(resources: dict[str, Any]) -> dict[str, Any]:
    return {"name": "cuda", "image": "registry.k8s.io/pause:3.10", "resources": resources}


def dra_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        "containers": [container({"claims": [{"name": "gpu"}]})]}}


def classic_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "containers": [container({"limits": {"nvidia.com/gpu": "1"}})]}}


def dra_job(name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", **dra_pod(name)["spec"]}}}}


def placement(spec: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Placer's part of the tolerations (the API server adds the not-ready/unreachable ones) and the selector."""
    tolerations = [t for t in spec.get("tolerations") or [] if not t["key"].startswith("node.kubernetes.io/")]
    return tolerations, spec.get("nodeSelector") or {}


def test_a_dra_gpu_pod_gets_the_placement_of_a_classic_gpu_pod(cluster: Cluster) -> None:
    if not dra_served(cluster):
        pytest.skip("resource.k8s.io/v1 ResourceClaimTemplates are not served (Kubernetes 1.34 or later needed)")
    policy = yaml.safe_load((REPO / "policies/org-wide-policy.yaml").read_text())
    namespace = cluster.namespace({"environment": "production"})
    cluster.policy("dra-gpus", policy["spec"])
    template = yaml.safe_load((REPO / "tests/fixtures/kube-1.36/manifests/resourceclaimtemplate-one-gpu.yaml")
                              .read_text())
    template["metadata"]["namespace"] = namespace
    try:
        with gpu_device_class(cluster):
            cluster.api.create(f"{DRA}/namespaces/{namespace}/resourceclaimtemplates", template)
            pods = f"/api/v1/namespaces/{namespace}/pods"

            def dry_run(path: str, obj: dict[str, Any]) -> dict[str, Any]:
                created = cluster.api.create(path, obj, {"dryRun": "All"})
                spec: dict[str, Any] = created["spec"] if obj["kind"] == "Pod" else created["spec"]["template"]["spec"]
                return spec

            classic = placement(dry_run(pods, classic_pod("classic")))
            assert GPU_TOLERATION in classic[0] and classic[1] == {"environment": "production"}
            # The controller publishes the template within its watch's latency: until then Placer warns.
            wait_until(lambda: placement(dry_run(pods, dra_pod("dra"))) == classic, timeout=30,
                       what="the DRA pod placed as the classic GPU pod")
            job = placement(dry_run(f"/apis/batch/v1/namespaces/{namespace}/jobs", dra_job("train")))
            assert job == classic
    finally:
        cluster.delete_policy("dra-gpus")
