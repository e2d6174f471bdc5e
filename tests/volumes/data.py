"""The claims and volumes of objects.yaml as the controller publishes them, and the pod a StatefulSet makes."""

from pathlib import Path
from typing import Any

import yaml

from tests.conftest import fixture_request
from webhook.placement.claims import ClaimLookup
from webhook.pods.volumes import claim_entry, volume_entry
from webhook.policy.state.node_facts import NodeFactsReader, node_facts
from webhook.policy.state.shards import ShardWriter
from webhook.policy.state.volume_shards import VolumeShards

OBJECTS = Path(__file__).parent / "objects.yaml"
ZONAL = Path(__file__).parent / "zonal.yaml"
"""Network volumes of WaitForFirstConsumer classes (EBS, Azure Disk, NFS) whose claims name a selected node."""
TEMPLATES = ("data", "cache", "fast", "scratch", "logs", "shared")
APPLIED = "placer.dev/applied"


def objects(path: Path = OBJECTS) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def publish(state: Path, nodes: tuple[str, ...] = ("kind-worker", "kind-worker2", "kind-worker3"),
            path: Path = OBJECTS) -> ClaimLookup:
    """Claims, volumes and nodes written as the controller writes them; the lookup a worker makes of them."""
    docs = objects(path)
    ShardWriter(state / "claims").replace({
        f"{d['metadata']['namespace']}/{d['metadata']['name']}": claim_entry(d)
        for d in docs if d["kind"] == "PersistentVolumeClaim"})
    ShardWriter(state / "volumes").replace(
        {d["metadata"]["name"]: volume_entry(d) for d in docs if d["kind"] == "PersistentVolume"})
    ShardWriter(state / "nodes").replace({
        name: node_facts({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                                "topology.topolvm.io/node": name}},
                          "status": {"allocatable": {"cpu": "4"}}})
        for name in nodes})
    return ClaimLookup(VolumeShards(state), NodeFactsReader(state / "nodes"))


def statefulset_pod(*templates: str, applied: str | None = None) -> dict[str, Any]:
    """The captured create of a controller's pod, carrying pod db-0 as the StatefulSet controller makes it."""
    body = fixture_request("pod-rs-owned-generatename-create-real")
    request = body["request"]
    pod = request["object"]
    metadata = pod["metadata"]
    metadata.pop("generateName")
    metadata["name"] = request["name"] = "db-0"
    metadata["labels"] = {"app": "db", "apps.kubernetes.io/pod-index": "0",
                          "controller-revision-hash": "db-6c9f7b8d5", "statefulset.kubernetes.io/pod-name": "db-0"}
    metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
                                    "uid": "0b8f8c43-52cf-4f4e-a1a4-5d3c2b1a0f9e", "controller": True,
                                    "blockOwnerDeletion": True}]
    if applied is not None:
        metadata["annotations"] = {APPLIED: applied}
    request["userInfo"]["username"] = "system:serviceaccount:kube-system:statefulset-controller"
    pod["spec"]["hostname"], pod["spec"]["subdomain"] = "db-0", "db"
    pod["spec"]["volumes"] = [{"name": t, "persistentVolumeClaim": {"claimName": f"{t}-db-0"}} for t in templates]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": t, "mountPath": f"/{t}"} for t in templates]
    return body
