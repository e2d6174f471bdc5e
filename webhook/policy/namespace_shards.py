"""The cluster's namespaces as 256 small files: written by what changed, read by the one name an admission needs.

The controller process watches every Namespace; each worker needs one per admission. Publishing all of them
as one file made every label change cost a full rewrite in the controller and a full re-parse in every
worker (a quarter of a core at 3,000 namespaces and 3 changes a second). Here a namespace lives in shard
`crc32(name) % 256`: a change rewrites that one shard (about 40 namespaces at 10,000), and a worker stats
the shard of the namespace it is admitting and parses it only when it changed. Why shards and not one file
per namespace: the state lives on a memory-backed emptyDir with a size limit, where every file costs a
whole page (10,000 files would take 40 MiB for 4 MiB of data).

Each shard is replaced by rename, so a reader sees the old shard or the new one, never a part.
"""

import logging
import os
import tempfile
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from webhook.json_bytes import encode_json
from webhook.policy.snapshot import NamespaceInfo

SHARDS = 256
PARSED_SHARDS_KEPT = 64
"""Parsed shards a worker keeps (a quarter of the state at most); a shard not kept costs one parse of ~16 KB."""

Entry = dict[str, Any]

log = logging.getLogger(__name__)


def shard_of(name: str) -> int:
    return zlib.crc32(name.encode()) % SHARDS


def shard_path(directory: Path, index: int) -> Path:
    return directory / f"{index:03d}.json"


def entry_of(info: NamespaceInfo) -> Entry:
    """The JSON form of one namespace: labels, annotations, and `metadata`/`spec`/`status` where known."""
    return {"labels": dict(info.labels), "annotations": dict(info.annotations), **info.rest}


def info_of(name: str, entry: Mapping[str, Any]) -> NamespaceInfo:
    rest = {key: entry[key] for key in ("metadata", "spec", "status") if isinstance(entry.get(key), dict)}
    return NamespaceInfo(name, dict(entry.get("labels") or {}), dict(entry.get("annotations") or {}), rest)


class NamespaceShardWriter:
    """The controller's side: keeps every namespace's entry and rewrites a shard only when one of its entries
    changed (a watch event that changes nothing `namespaceObject` shows writes nothing)."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._shards: list[dict[str, Entry]] = [{} for _ in range(SHARDS)]
        self._on_disk_known = False
        """False until the first `replace`: shard files a previous controller left are unknown until then."""
        self.shard_writes = 0

    def __len__(self) -> int:
        return sum(len(shard) for shard in self._shards)

    def replace(self, infos: Mapping[str, NamespaceInfo]) -> int:
        """Make the shards hold exactly `infos` (a list, or a list again after 410 Gone); returns shards written."""
        self._directory.mkdir(parents=True, exist_ok=True)
        fresh: list[dict[str, Entry]] = [{} for _ in range(SHARDS)]
        for name, info in infos.items():
            fresh[shard_of(name)][name] = entry_of(info)
        written = 0
        for index, shard in enumerate(fresh):
            if self._on_disk_known and shard == self._shards[index]:
                continue
            self._shards[index] = shard
            self._write(index)
            written += 1
        self._on_disk_known = True
        return written

    def put(self, info: NamespaceInfo) -> bool:
        """Store one namespace; True when its shard was rewritten."""
        index = shard_of(info.name)
        entry = entry_of(info)
        if self._shards[index].get(info.name) == entry:
            return False
        self._shards[index][info.name] = entry
        self._write(index)
        return True

    def delete(self, name: str) -> bool:
        index = shard_of(name)
        if self._shards[index].pop(name, None) is None:
            return False
        self._write(index)
        return True

    def size_bytes(self) -> int:
        """What the shards hold on disk (the JSON, not the filesystem's pages)."""
        paths = (shard_path(self._directory, index) for index in range(SHARDS))
        return sum(path.stat().st_size for path in paths if path.exists())

    def _write(self, index: int) -> None:
        path = shard_path(self._directory, index)
        shard = self._shards[index]
        self.shard_writes += 1
        if not shard:
            path.unlink(missing_ok=True)
            return
        handle, temporary = tempfile.mkstemp(dir=self._directory, prefix=f".{path.name}.")
        try:
            with os.fdopen(handle, "wb") as output:
                output.write(encode_json(shard))
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


class _ParsedShard:
    __slots__ = ("entries", "infos", "stamp")

    def __init__(self, stamp: tuple[int, int, int], entries: dict[str, Entry]) -> None:
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
            stat = os.stat(path)
        except FileNotFoundError:
            return None
        stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        with self._lock:
            cached = self._parsed.get(index)
            if cached is not None and cached.stamp == stamp:
                self._parsed.move_to_end(index)
                return cached
        try:
            with open(path, "rb") as shard_file:  # the stamp of what is read, even if replaced since the stat
                stat = os.fstat(shard_file.fileno())
                data = shard_file.read()
            entries = orjson.loads(data)
        except FileNotFoundError:  # deleted since the stat: the shard's last namespace went away
            return None
        except (OSError, ValueError) as error:  # never written so by the controller (it replaces by rename)
            log.error("namespace shard %s unreadable (%s); its namespaces are read from the API server", path, error)
            return None
        if not isinstance(entries, dict):
            log.error("namespace shard %s is not a JSON object; its namespaces are read from the API server", path)
            return None
        stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        parsed = _ParsedShard(stamp, entries)
        with self._lock:
            self._parsed[index] = parsed
            self._parsed.move_to_end(index)
            while len(self._parsed) > PARSED_SHARDS_KEPT:
                self._parsed.popitem(last=False)
        return parsed
