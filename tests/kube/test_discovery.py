"""Version-aware: what the controller learns from `/version` and discovery, on the captured kube-apiserver
v1.36.2 answers (gang-scheduling gates on and off), and what follows from it (which DRA version it watches,
and a restart when that changes)."""

import threading
import time
from pathlib import Path

import yaml

from tests.kube.discovery_captures import CAPTURES, serve_discovery
from tests.kube.fake_apiserver import (
    DEVICE_CLASSES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    FakeApiServer,
    wait_for,
)
from webhook.cluster.client.api import KubeApi
from webhook.cluster.client.discovery import DiscoveryRefresh, ServedApis, discover, read_served_apis, write_served_apis
from webhook.cluster.controller import ClusterController
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.state.volume_shards import VolumeShards


def test_gates_on_serves_the_native_gang_api(api: KubeApi, apiserver: FakeApiServer) -> None:
    serve_discovery(apiserver, "gates-on")
    served = discover(api)
    assert (served.major, served.minor, served.git_version) == (1, 36, "v1.36.2")
    assert served.minor_version == "1.36"
    assert served.version_of("scheduling.k8s.io", "PodGroup") == "v1alpha2"
    assert served.version_of("scheduling.k8s.io", "Workload") == "v1alpha2"
    assert served.version_of("scheduling.k8s.io", "PriorityClass") == "v1"
    assert served.preferred_version("scheduling.k8s.io") == "v1"
    assert served.version_of("resource.k8s.io", "ResourceClaimTemplate") == "v1"
    assert served.path_of("resource.k8s.io", "ResourceClaim") == "/apis/resource.k8s.io/v1/resourceclaims"
    assert "admissionregistration.k8s.io" not in served.groups  # not served by this fake
    assert served.summary() == "v1.36.2; resource.k8s.io v1; scheduling.k8s.io v1, v1alpha2"


def test_gates_off_has_no_gang_api(api: KubeApi, apiserver: FakeApiServer) -> None:
    serve_discovery(apiserver, "gates-off")
    served = discover(api)
    assert served.version_of("scheduling.k8s.io", "PodGroup") is None
    assert not served.serves("scheduling.k8s.io", "v1alpha2")
    assert served.version_of("resource.k8s.io", "ResourceClaimTemplate") == "v1"


def test_what_was_discovered_round_trips_through_the_state_directory(
    api: KubeApi, apiserver: FakeApiServer, tmp_path: Path
) -> None:
    serve_discovery(apiserver, "gates-on")
    served = discover(api)
    write_served_apis(tmp_path, served)
    assert read_served_apis(tmp_path) == served
    assert read_served_apis(tmp_path / "missing") == ServedApis()
    assert not ServedApis().known and ServedApis().version_of("resource.k8s.io", "ResourceClaim") is None


def test_the_dra_watches_follow_discovery(api: KubeApi, apiserver: FakeApiServer, tmp_path: Path) -> None:
    serve_discovery(apiserver, "gates-off")
    with_dra = ClusterController(api, tmp_path, compiler=PolicyCompiler(), elector=None, served=discover(api))
    assert {"ResourceClaimTemplate", "ResourceClaim", "DeviceClass"} <= {r.kind for r in with_dra.reflectors}
    del apiserver.other["/apis"]["resource.k8s.io"]
    without = ClusterController(api, tmp_path, compiler=PolicyCompiler(), elector=None, served=discover(api))
    assert not {"ResourceClaimTemplate", "ResourceClaim", "DeviceClass"} & {r.kind for r in without.reflectors}


def test_the_controller_publishes_claim_templates_at_the_served_version(
    api: KubeApi, apiserver: FakeApiServer, tmp_path: Path
) -> None:
    serve_discovery(apiserver, "gates-on")
    template = yaml.safe_load((CAPTURES / "manifests" / "resourceclaimtemplate-one-gpu.yaml").read_text())
    apiserver.put(RESOURCE_CLAIM_TEMPLATES, template)
    listed_generated = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "spec": {},
                        "metadata": {"name": "dra-pod-gpu-a1b2c", "namespace": "team-a",
                                     "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"}}}
    apiserver.put(RESOURCE_CLAIMS, listed_generated)
    controller = ClusterController(api, tmp_path, compiler=PolicyCompiler(), elector=None, served=discover(api))
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        shards = VolumeShards(tmp_path)
        wait_for(lambda: shards.claim_template("team-a", "one-gpu"), what="the template published")
        assert shards.claim_template("team-a", "one-gpu") == {"devices": {"gpu.nvidia.com": 1}}
        assert shards.devices_known()
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "shared", "namespace": "team-a"},
                 "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                             "count": 2}}]}}}
        generated = {**claim, "metadata": {"name": "dra-pod-gpu-x7k2p", "namespace": "team-a",
                                           "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"}}}
        apiserver.put(RESOURCE_CLAIMS, generated)  # the resourceclaim controller's, for one pod
        apiserver.put(RESOURCE_CLAIMS, claim)
        wait_for(lambda: shards.resource_claim("team-a", "shared"), what="the claim published")
        assert shards.resource_claim("team-a", "shared") == {"devices": {"gpu.nvidia.com": 2}}
        for own in ("dra-pod-gpu-a1b2c", "dra-pod-gpu-x7k2p"):  # listed, then watched
            assert shards.resource_claim("team-a", own) is None, "a pod's own claim is not kept"
        apiserver.put(DEVICE_CLASSES, {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                       "metadata": {"name": "gpu.amd.com"},
                                       "spec": {"extendedResourceName": "amd.com/gpu"}})
        wait_for(lambda: shards.device_class("gpu.amd.com"), what="the device class published")
        assert shards.device_class("gpu.amd.com") == {"extendedResourceName": "amd.com/gpu"}
        apiserver.delete(RESOURCE_CLAIM_TEMPLATES, "team-a/one-gpu")
        wait_for(lambda: shards.claim_template("team-a", "one-gpu") is None, what="the template gone")
    finally:
        stop.set()
        apiserver.drop_watches()
        thread.join(10)


def test_discovery_that_changes_the_watches_restarts_the_controller(
    api: KubeApi, apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """Started while resource.k8s.io was not served (no DRA watch); once it is, the controller stops with
    `restart` set (its process exits with code 3 and the arbiter starts it again on the new discovery).
    A change that no watch depends on (the gang gates) only rewrites `apis.json`."""
    serve_discovery(apiserver, "gates-off")
    del apiserver.other["/apis"]["resource.k8s.io"]
    refresh = DiscoveryRefresh(api, tmp_path, discover(api), interval=0.0)
    serve_discovery(apiserver, "gates-on")
    del apiserver.other["/apis"]["resource.k8s.io"]
    assert refresh.check(time.monotonic()) is False
    assert read_served_apis(tmp_path).serves("scheduling.k8s.io", "v1alpha2")

    serve_discovery(apiserver, "gates-on")
    controller = ClusterController(api, tmp_path, compiler=PolicyCompiler(), elector=None,
                                   served=refresh.served, discovery=refresh)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    thread.join(15)
    assert not thread.is_alive() and controller.restart
    assert read_served_apis(tmp_path).version_of("resource.k8s.io", "ResourceClaimTemplate") == "v1"
    apiserver.drop_watches()


def test_an_unreachable_discovery_keeps_what_was_known(api: KubeApi, apiserver: FakeApiServer,
                                                       tmp_path: Path) -> None:
    serve_discovery(apiserver, "gates-on")
    known = discover(api)
    refresh = DiscoveryRefresh(api, tmp_path, known, interval=0.0)
    apiserver.fail("GET", "/version", 503, "ServiceUnavailable")
    assert refresh.check(time.monotonic()) is False
    assert refresh.served == known


