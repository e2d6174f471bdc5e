"""What background evaluation keeps of each workload: its CREATE, compressed, a digest, its last results.

The reflectors' threads feed the book (`KindSink`); the evaluation thread takes what needs judging. A
workload event whose projection (`compliance.as_create`: no status, no server-set metadata) did not change
costs one digest and marks nothing.
"""

import hashlib
import json
import threading
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.cluster.reports.compliance import WorkloadRef, as_create, reference_of
from webhook.cluster.reports.results import RuleResult
from webhook.workloads import WorkloadKind


@dataclass(slots=True)
class Record:
    """What is kept of one workload: its CREATE, compressed, and the results of its last judgement."""

    workload: WorkloadRef
    packed: bytes
    digest: bytes
    results: tuple[RuleResult, ...] | None = None
    """None until judged (or after a change that needs a new judgement)."""
    found: float = 0.0
    """When the results were first found (kept while a new judgement finds the same)."""

    def unpacked(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(zlib.decompress(self.packed))
        return value


def pack(obj: Mapping[str, Any]) -> tuple[bytes, bytes]:
    data = json.dumps(as_create(dict(obj)), sort_keys=True, separators=(",", ":")).encode()
    return zlib.compress(data, 6), hashlib.blake2b(data, digest_size=16).digest()


@dataclass(slots=True)
class WorkloadBook:
    """Every watched workload by namespace, and which need judging; fed by the reflectors' threads."""

    by_namespace: dict[str, dict[str, Record]] = field(default_factory=dict)
    dirty: set[tuple[str, str]] = field(default_factory=set)
    """(namespace, key) to judge again."""
    previous: dict[tuple[str, str], Record] = field(default_factory=dict)
    """The record as last judged of each workload replaced or dropped since (what its report and the cluster
    report's counts still say), until the evaluation takes it (`take_previous`)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    wake: threading.Event = field(default_factory=threading.Event)

    def put(self, namespace: str, key: str, obj: Mapping[str, Any]) -> None:
        packed, digest = pack(obj)
        with self.lock:
            records = self.by_namespace.setdefault(namespace, {})
            known = records.get(key)
            if known is not None and known.digest == digest:
                return  # nothing the engine reads changed
            if known is not None:
                self.previous.setdefault((namespace, key), known)
            records[key] = Record(reference_of(dict(obj)), packed, digest)
            self.dirty.add((namespace, key))
        self.wake.set()

    def drop(self, namespace: str, key: str) -> None:
        with self.lock:
            records = self.by_namespace.get(namespace)
            gone = records.pop(key, None) if records is not None else None
            if gone is not None:
                self.previous.setdefault((namespace, key), gone)
                self.dirty.add((namespace, key))
        self.wake.set()

    def replace_kind(self, kind: str, objects: Mapping[str, tuple[str, Mapping[str, Any]]]) -> None:
        """After a list: the kind's workloads are exactly `objects` (key: (namespace, object))."""
        prefix = f"{kind}/"
        with self.lock:
            for namespace, records in self.by_namespace.items():
                for key in [key for key in records if key.startswith(prefix) and key not in objects]:
                    self.previous.setdefault((namespace, key), records.pop(key))
                    self.dirty.add((namespace, key))
        for key, (namespace, obj) in objects.items():
            self.put(namespace, key, obj)
        self.wake.set()

    def mark(self, namespaces: Iterable[str] | None) -> None:
        """Judge again every workload of `namespaces` (None: of all)."""
        with self.lock:
            chosen = self.by_namespace if namespaces is None else {
                name: self.by_namespace[name] for name in namespaces if name in self.by_namespace}
            for namespace, records in chosen.items():
                self.dirty.update((namespace, key) for key in records)
        self.wake.set()

    def take_previous(self, namespace: str, key: str) -> Record | None:
        with self.lock:
            return self.previous.pop((namespace, key), None)

    def take_dirty(self) -> set[tuple[str, str]]:
        with self.lock:
            dirty, self.dirty = self.dirty, set()
        return dirty

    def count(self) -> int:
        with self.lock:
            return sum(len(records) for records in self.by_namespace.values())


class KindSink:
    """A reflector's sink for one workload kind: keys `Kind/namespace/name` in the book."""

    def __init__(self, kind: WorkloadKind, version: str, book: WorkloadBook) -> None:
        self._kind = kind.kind
        self._api_version = f"{kind.group}/{version}" if kind.group else version
        self._book = book

    def keep(self, name: str, obj: Mapping[str, Any]) -> Any:
        return self._typed(obj)

    def replace(self, store: Mapping[str, Any]) -> None:
        self._book.replace_kind(self._kind, {f"{self._kind}/{name}": (name.partition("/")[0], obj)
                                             for name, obj in store.items()})

    def upsert(self, name: str, obj: Mapping[str, Any]) -> None:
        self._book.put(name.partition("/")[0], f"{self._kind}/{name}", self._typed(obj))

    def _typed(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """Built-in list items come without kind and apiVersion (watch events carry them)."""
        return {**obj, "kind": self._kind, "apiVersion": obj.get("apiVersion") or self._api_version}

    def remove(self, name: str) -> None:
        self._book.drop(name.partition("/")[0], f"{self._kind}/{name}")
