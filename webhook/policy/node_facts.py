"""What Placer keeps of a Node: what the scheduler's filters read to decide whether a pod can ever land there.

Labels (nodeSelector, node affinity), taints (tolerations), allocatable (the largest pod that fits), and
`spec.unschedulable` (cordoned). Nothing of the status the kubelet keeps reporting (conditions and their
heartbeats, images, addresses, daemon endpoints, node info): an update that changes only those projects to
the same facts, and the controller drops it right after the watch (it costs one JSON decode, nothing after).
"""

import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from webhook.policy.shards import SHARDS, Entry, shard_path

log = logging.getLogger(__name__)


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
        self._shards: dict[int, tuple[tuple[int, int, int], list[tuple[str, Entry]]]] = {}
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
        shards: dict[int, tuple[tuple[int, int, int], list[tuple[str, Entry]]]] = {}
        for index in range(SHARDS):
            path = shard_path(self._directory, index)
            try:
                with open(path, "rb") as shard_file:
                    stat = os.fstat(shard_file.fileno())
                    stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
                    known = self._shards.get(index)
                    if known is not None and known[0] == stamp:
                        shards[index] = known
                        continue
                    entries = orjson.loads(shard_file.read())
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as error:
                log.error("node shard %s unreadable (%s); its nodes are left out", path, error)
                continue
            if isinstance(entries, dict):
                shards[index] = (stamp, [(str(name), facts) for name, facts in entries.items()])
        self._shards = shards
        self._nodes = [node for _, nodes in shards.values() for node in nodes]
        self.version += 1
