"""The cluster's namespaces in shards (`webhook.policy.shards`): written by what changed, read by the one name
an admission needs.

The controller process watches every Namespace; each worker needs one per admission. A worker stats the
shard of the namespace it is admitting and parses it only when it changed.
"""

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from webhook.policy.shards import SHARDS, Entry, Stamp, read_shard, shard_of, shard_path, stamp_of
from webhook.policy.snapshot import NamespaceInfo

PARSED_SHARDS_KEPT = 64
"""Parsed shards a worker keeps (a quarter of the state at most); a shard not kept costs one parse of ~16 KB."""


def entry_of(info: NamespaceInfo) -> Entry:
    """The JSON form of one namespace: labels, annotations, and `metadata`/`spec`/`status` where known."""
    return {"labels": dict(info.labels), "annotations": dict(info.annotations), **info.rest}


def info_of(name: str, entry: Mapping[str, Any]) -> NamespaceInfo:
    rest = {key: entry[key] for key in ("metadata", "spec", "status") if isinstance(entry.get(key), dict)}
    return NamespaceInfo(name, dict(entry.get("labels") or {}), dict(entry.get("annotations") or {}), rest)


class _ParsedShard:
    __slots__ = ("entries", "infos", "stamp")

    def __init__(self, stamp: Stamp, entries: dict[str, Entry]) -> None:
        self.stamp = stamp
        self.entries = entries
        self.infos: dict[str, NamespaceInfo] = {}


class NamespaceShards(Mapping[str, NamespaceInfo]):
    """A worker's side: `shards[name]` reads the namespace from its shard, re-parsing only a changed shard.

    A lookup costs one stat (about 2 µs) when the shard is unchanged; what a worker keeps is bounded by
    PARSED_SHARDS_KEPT, whatever the number of namespaces. Iterating reads every shard (tools and tests,
    never an admission).
    """

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._parsed: OrderedDict[int, _ParsedShard] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, name: str, default: Any = None) -> Any:  # Mapping.get would look the shard up twice
        try:
            return self[name]
        except KeyError:
            return default

    def __getitem__(self, name: str) -> NamespaceInfo:
        index = shard_of(name)
        shard = self._shard(index)
        if shard is None:
            raise KeyError(name)
        info = shard.infos.get(name)
        if info is None:
            entry = shard.entries.get(name)
            if not isinstance(entry, dict):
                raise KeyError(name)
            info = shard.infos[name] = info_of(name, entry)
        return info

    def __iter__(self) -> Iterator[str]:
        for index in range(SHARDS):
            shard = self._shard(index)
            if shard is not None:
                yield from shard.entries

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def _shard(self, index: int) -> _ParsedShard | None:
        path = shard_path(self._directory, index)
        try:
            stamp = stamp_of(os.stat(path))
        except FileNotFoundError:
            return None
        with self._lock:
            cached = self._parsed.get(index)
            if cached is not None and cached.stamp == stamp:
                self._parsed.move_to_end(index)
                return cached
        read = read_shard(path, "its namespaces are read from the API server")
        if read is None:
            return None
        parsed = _ParsedShard(*read)
        with self._lock:
            self._parsed[index] = parsed
            self._parsed.move_to_end(index)
            while len(self._parsed) > PARSED_SHARDS_KEPT:
                self._parsed.popitem(last=False)
        return parsed
