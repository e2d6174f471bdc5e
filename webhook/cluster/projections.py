"""What each of the controller's watches keeps of its objects: a projection (what Placer reads of a Namespace,
Node, claim, volume or DRA object) written to its shard from the watch thread, and nothing when the projection
did not change (a Node's status heartbeat, a resourceVersion bump)."""

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from webhook.pods.dra import CLASS_KIND, class_entry, device_entry, is_generated_claim
from webhook.pods.volumes import claim_entry, volume_entry
from webhook.policy.sources.documents import namespace_info
from webhook.policy.state.namespace_shards import entry_of
from webhook.policy.state.node_facts import node_facts
from webhook.policy.state.shards import Entry, ShardWriter

log = logging.getLogger(__name__)


class ProjectedSink:
    """A watch's sink that keeps only a projection of each object (what Placer reads of it) and writes the
    projection's shard at once, from the watch thread. An update whose projection did not change (a
    resourceVersion, managed fields, a Node's status heartbeat) writes nothing."""

    def __init__(
        self,
        kind: str,
        writer: ShardWriter,
        project: Callable[[str, Mapping[str, Any]], Entry],
        on_synced: Callable[[], None] = lambda: None,
        *,
        on_change: Callable[[Iterable[str]], None] | None = None,
    ) -> None:
        """`on_change(names)`: told the names whose projection changed once they are on disk (an event that
        rewrote its shard, or the entries a list changed)."""
        self._kind = kind
        self._writer = writer
        self._project = project
        self._on_synced = on_synced
        self._on_change = on_change
        self._lock = threading.Lock()
        self.synced = False
        self.events = 0
        self.published = 0
        """Watch events that rewrote a shard (the rest changed nothing Placer reads)."""

    def keep(self, name: str, obj: Mapping[str, Any]) -> Entry:
        return self._project(name, obj)

    def replace(self, entries: Mapping[str, Entry]) -> None:
        with self._lock:
            changed = self._writer.changed_by(entries) if self._on_change is not None else []
            written = self._writer.replace(entries)
            self.synced = True
        log.info("%s: %d published (%d shards written)", self._kind, len(entries), written)
        if changed and self._on_change is not None:
            self._on_change(changed)
        self._on_synced()

    def upsert(self, name: str, obj: Mapping[str, Any]) -> None:
        entry = self._project(name, obj)
        with self._lock:
            self.events += 1
            rewritten = self._writer.put(name, entry)
            self.published += rewritten
        if rewritten and self._on_change is not None:
            self._on_change((name,))

    def remove(self, name: str) -> None:
        with self._lock:
            self.events += 1
            rewritten = self._writer.delete(name)
            self.published += rewritten
        if rewritten and self._on_change is not None:
            self._on_change((name,))

    def count(self) -> int:
        with self._lock:
            return len(self._writer)


def namespace_entry(name: str, obj: Mapping[str, Any]) -> Entry:
    return entry_of(namespace_info(name, obj))


def node_entry(name: str, obj: Mapping[str, Any]) -> Entry:
    return node_facts(obj)


def claim_projection(name: str, obj: Mapping[str, Any]) -> Entry:
    return claim_entry(obj)


def volume_projection(name: str, obj: Mapping[str, Any]) -> Entry:
    return volume_entry(obj)


class SharedClaimsSink(ProjectedSink):
    """The ResourceClaims pods name (shared ones), leaving out those Kubernetes makes for one pod
    (`webhook.pods.dra.is_generated_claim`): what is published grows with the shared claims, not with DRA pods."""

    _LEFT_OUT = "placer.dev/left-out"

    def keep(self, name: str, obj: Mapping[str, Any]) -> Entry:
        return {self._LEFT_OUT: True} if is_generated_claim(obj) else super().keep(name, obj)

    def replace(self, entries: Mapping[str, Entry]) -> None:
        super().replace({name: entry for name, entry in entries.items() if self._LEFT_OUT not in entry})

    def upsert(self, name: str, obj: Mapping[str, Any]) -> None:
        if is_generated_claim(obj):
            self.remove(name)
        else:
            super().upsert(name, obj)


def device_projection(kind: str) -> Callable[[str, Mapping[str, Any]], Entry]:
    def project(name: str, obj: Mapping[str, Any]) -> Entry:
        return class_entry(obj) if kind == CLASS_KIND else device_entry(obj, kind)

    return project


def global_default_priority_class(classes: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The PriorityClass with `globalDefault: true` (the API server allows one; the lowest name if several)."""
    defaults = sorted(name for name, obj in classes.items() if obj.get("globalDefault") is True)
    return defaults[0] if defaults else None
