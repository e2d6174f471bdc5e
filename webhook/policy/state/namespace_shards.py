"""The cluster's namespaces in shards (`webhook.policy.state.shards`): written by what changed, read by the one name
an admission needs.

The controller process watches every Namespace; each worker needs one per admission. A worker stats the
shard of the namespace it is admitting and parses it only when it changed.
"""

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from webhook.policy.snapshot import NamespaceInfo
from webhook.policy.state.shards import PARSED_SHARDS_KEPT, SHARDS, Entry, KeyedShards, shard_of


def entry_of(info: NamespaceInfo) -> Entry:
    """The JSON form of one namespace: labels, annotations, and `metadata`/`spec`/`status` where known."""
    return {"labels": dict(info.labels), "annotations": dict(info.annotations), **info.rest}


def info_of(name: str, entry: Mapping[str, Any]) -> NamespaceInfo:
    rest = {key: entry[key] for key in ("metadata", "spec", "status") if isinstance(entry.get(key), dict)}
    return NamespaceInfo(name, dict(entry.get("labels") or {}), dict(entry.get("annotations") or {}), rest)


class NamespaceShards(Mapping[str, NamespaceInfo]):
    """A worker's side: `shards[name]` reads the namespace from its shard, re-parsing only a changed shard.

    A lookup costs one stat (about 2 µs) when the shard is unchanged; what a worker keeps is bounded by
    PARSED_SHARDS_KEPT, whatever the number of namespaces. Iterating reads every shard (tools and tests,
    never an admission).
    """

    def __init__(self, directory: Path, *, kept: int = PARSED_SHARDS_KEPT) -> None:
        self._shards = KeyedShards(directory, "its namespaces are read from the API server", kept=kept)

    @property
    def shards_kept(self) -> int:
        """Parsed shards held now (at most `kept`)."""
        return self._shards.kept

    def get(self, name: str, default: Any = None) -> Any:  # Mapping.get would look the shard up twice
        try:
            return self[name]
        except KeyError:
            return default

    def __getitem__(self, name: str) -> NamespaceInfo:
        shard = self._shards.shard(shard_of(name))
        if shard is None:
            raise KeyError(name)
        info: NamespaceInfo | None = shard.derived.get(name)
        if info is None:
            entry = shard.entries.get(name)
            if not isinstance(entry, dict):
                raise KeyError(name)
            info = shard.derived[name] = info_of(name, entry)
        return info

    def __iter__(self) -> Iterator[str]:
        for index in range(SHARDS):
            shard = self._shards.shard(index)
            if shard is not None:
                yield from shard.entries

    def __len__(self) -> int:
        return sum(1 for _ in self)
