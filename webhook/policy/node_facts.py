"""What Placer keeps of a Node: what the scheduler's filters read to decide whether a pod can ever land there.

Labels (nodeSelector, node affinity), taints (tolerations), allocatable (the largest pod that fits), and
`spec.unschedulable` (cordoned). Nothing of the status the kubelet keeps reporting (conditions and their
heartbeats, images, addresses, daemon endpoints, node info): an update that changes only those projects to
the same facts, and the controller drops it right after the watch (it costs one JSON decode, nothing after).
"""

from collections.abc import Mapping
from typing import Any

from webhook.policy.shards import Entry


def node_facts(node: Mapping[str, Any]) -> Entry:
    metadata, spec, status = (_map(node.get(part)) for part in ("metadata", "spec", "status"))
    taints = [
        {key: taint[key] for key in ("key", "value", "effect") if isinstance(taint.get(key), str)}
        for taint in spec.get("taints") or []
        if isinstance(taint, dict)
    ]
    allocatable = status.get("allocatable")
    return {
        "labels": _strings(metadata.get("labels")),
        "taints": taints,
        "allocatable": _strings(allocatable),
        "unschedulable": spec.get("unschedulable") is True,
    }


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
