"""What Placer keeps of a Node: what the scheduler's filters read to decide whether a pod can ever land there.

Labels (nodeSelector, node affinity), taints (tolerations), allocatable (the largest pod that fits), and
`spec.unschedulable` (cordoned). Nothing of the status the kubelet keeps reporting (conditions and their
heartbeats, images, addresses, daemon endpoints, node info): an update that changes only those projects to
the same facts, and the controller drops it right after the watch (it costs one JSON decode, nothing after).
"""

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from webhook.policy.state.shards import SHARDS, Entry, Stamp, read_shard, shard_path, stamp_of


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


class NodeFactsReader:
    """A worker's view of the nodes the controller publishes (`nodes/` of the state directory).

    One stat of the directory tells whether any shard was replaced since the last look (a rename into a
    directory changes its mtime); only then are the shards read again, and only those that changed.
    """

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._lock = threading.Lock()
        self._stamp: int | None = None
        self._shards: dict[int, tuple[Stamp, list[tuple[str, Entry]]]] = {}
        self._nodes: list[tuple[str, Entry]] = []
        self.version = 0
        """Grows whenever the nodes changed: a cache of answers about them keys on it."""

    def current(self) -> list[tuple[str, Entry]]:
        """Every node as (name, facts); empty when none is known (no cluster, or not synced yet)."""
        try:
            stamp = os.stat(self._directory).st_mtime_ns
        except FileNotFoundError:
            return []
        with self._lock:
            if stamp != self._stamp:
                self._reload()
                self._stamp = stamp
            return self._nodes

    def _reload(self) -> None:
        shards: dict[int, tuple[Stamp, list[tuple[str, Entry]]]] = {}
        for index in range(SHARDS):
            path = shard_path(self._directory, index)
            try:
                stamp = stamp_of(os.stat(path))
            except FileNotFoundError:
                continue
            known = self._shards.get(index)
            if known is not None and known[0] == stamp:
                shards[index] = known
                continue
            read = read_shard(path, "its nodes are left out")
            if read is not None:
                shards[index] = (read[0], [(str(name), facts) for name, facts in read[1].items()])
        self._shards = shards
        self._nodes = [node for _, nodes in shards.values() for node in nodes]
        self.version += 1
