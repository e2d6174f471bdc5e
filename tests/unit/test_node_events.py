"""Node events that change nothing Placer reads are recognised from their bytes; every real change is decoded."""

import copy
import json
from typing import Any

import pytest

from webhook.kube.node_events import UnchangedNodeEvents


def node(heartbeat: str = "2026-11-22T10:00:00Z", version: int = 100, **changes: Any) -> dict[str, Any]:
    """A Node in kube-apiserver's field order, managed fields and all (their `f:` keys must not confuse)."""
    obj: dict[str, Any] = {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {
            "name": "worker-1", "uid": "6c1d", "resourceVersion": str(version),
            "creationTimestamp": "2026-11-01T10:00:00Z",
            "labels": {"kubernetes.io/hostname": "worker-1", "node-pool": "general"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "note": "\"spec\":{ in a value"},
            "managedFields": [{"manager": "kubelet", "operation": "Update", "time": heartbeat,
                               "fieldsType": "FieldsV1", "subresource": "status",
                               "fieldsV1": {"f:metadata": {"f:labels": {"f:node-pool": {}}},
                                            "f:spec": {"f:taints": {}}, "f:status": {"f:conditions": {}}}}],
        },
        "spec": {"podCIDR": "10.244.1.0/24", "providerID": "kind://docker/kind/worker-1"},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi"},
            "allocatable": {"cpu": "7800m", "memory": "31Gi"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}],
            "images": [{"names": ["registry.example/app:v1"], "sizeBytes": 1000}],
        },
    }
    for path, value in changes.items():
        target = obj
        *parents, leaf = path.split("__")
        for parent in parents:
            target = target[parent]
        target[leaf] = value
    return obj


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode()


def test_a_status_heartbeat_is_skipped_with_its_resource_version() -> None:
    events = UnchangedNodeEvents()
    assert events.check(line("MODIFIED", node())) is None, "the first event of a node is decoded"
    assert events.check(line("MODIFIED", node(heartbeat="2026-11-22T10:00:10Z", version=101))) == "101"
    assert events.skipped == 1


@pytest.mark.parametrize("change", [
    {"metadata__labels": {"kubernetes.io/hostname": "worker-1", "node-pool": "gpu"}},
    {"spec__taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
    {"spec__unschedulable": True},
    {"status__allocatable": {"cpu": "7", "memory": "31Gi"}},
])
def test_every_change_to_what_placer_reads_is_decoded(change: dict[str, Any]) -> None:
    events = UnchangedNodeEvents()
    events.check(line("MODIFIED", node()))
    assert events.check(line("MODIFIED", node(heartbeat="2026-11-22T10:00:10Z", version=101, **change))) is None
    assert events.check(line("MODIFIED", node(heartbeat="2026-11-22T10:00:20Z", version=102, **change))) == "102"


def test_added_counts_as_seen_deleted_and_a_relist_forget() -> None:
    events = UnchangedNodeEvents()
    assert events.check(line("ADDED", node())) is None
    assert events.check(line("MODIFIED", node(version=101))) == "101"
    assert events.check(line("DELETED", node(version=102))) is None
    assert events.check(line("MODIFIED", node(version=103))) is None, "after a deletion: decoded"
    events.reset()
    assert events.check(line("MODIFIED", node(version=104))) is None, "after a list: decoded"


def test_an_unexpected_layout_is_decoded_never_skipped() -> None:
    events = UnchangedNodeEvents()
    spaced = json.dumps({"type": "MODIFIED", "object": node()}).encode()
    assert events.check(spaced) is None and events.check(spaced) is None
    odd = node()
    odd["metadata"]["annotations"]["x"] = "y"
    odd["metadata"]["labels"] = {}
    twice = copy.deepcopy(odd)
    twice["metadata"]["ownerReferences"] = [{"spec": {"labels": {}}}]  # a second "spec":{ before the spec
    assert events.check(line("MODIFIED", twice)) is None and events.check(line("MODIFIED", twice)) is None
    bookmark = b'{"type":"BOOKMARK","object":{"kind":"Node","apiVersion":"v1","metadata":{"resourceVersion":"9"}}}'
    assert events.check(bookmark) is None
