"""List+watch of one resource into an in-memory store, the way client-go's reflector does it.

- List (paged), remember the list's `resourceVersion`, then watch from it with bookmarks on.
- Each event moves the remembered `resourceVersion` forward, so a dropped connection or a watch that timed
  out resumes exactly where it stopped, without a new list.
- `410 Gone` (as an HTTP status or an ERROR event in the stream) means that version has been compacted away:
  list again, and replace the store wholesale, so objects deleted meanwhile disappear.
- Any other failure waits a bounded, jittered, exponential backoff, then resumes.
- The `resourceVersion` moves past an event only once the sink has applied it. A sink that fails (its shard
  could not be written: ENOSPC on the state directory) ends the watch; after the backoff the reflector
  watches again from the last event applied, so the API server sends the failed event again, and the
  events after it, until the sink takes them (or, once that version is compacted, 410 Gone: a list, which the
  sink applies whole). Nothing is lost and nothing waits for a relist; a list the sink failed to apply is
  made again. client-go's reflector logs a store error and moves on (`watchHandler` in
  staging/src/k8s.io/client-go/tools/cache/reflector.go): its store is memory and cannot fail; these sinks
  write files, which can.

What it learns goes to a sink, event by event (`StoreSink`): the namespace sink of the controller projects
and publishes just the object that changed, so one relabel among 10,000 namespaces costs one object's work.
`SnapshotSink` keeps the whole store and hands a consumer a fresh copy after each change (policies).
"""

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from webhook.cluster.client.api import ApiError, KubeApi, TransportError, decode_event

log = logging.getLogger(__name__)

Store = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource collection, e.g. /apis/placer.dev/v1alpha1/schedulingpolicies; a namespaced one (listed
    across namespaces, /api/v1/persistentvolumeclaims) keys its objects `namespace/name`."""

    path: str
    kind: str
    namespaced: bool = False
    label_selector: str | None = None
    """Only the objects with these labels (the API server filters: a watch sends nothing of the others)."""

    def key(self, obj: Any) -> str | None:
        metadata = obj.get("metadata") if isinstance(obj, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if not isinstance(name, str) or not name:
            return None
        if not self.namespaced:
            return name
        namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
        return f"{namespace}/{name}" if isinstance(namespace, str) and namespace else None


class StoreSink(Protocol):
    """Receives what a reflector learns; called from the reflector's thread."""

    def keep(self, name: str, obj: Mapping[str, Any]) -> Any:
        """What of a listed object the list keeps until `replace` (a projection: a list of 5,000 Nodes then
        never holds 5,000 whole Nodes at once)."""

    def replace(self, store: Mapping[str, Any]) -> None:
        """The whole collection after a list (the first one, or again after 410 Gone), as `keep` made it."""

    def upsert(self, name: str, obj: Mapping[str, Any]) -> None:
        """An object was added or modified."""

    def remove(self, name: str) -> None:
        """An object was deleted."""


class SnapshotSink:
    """Keeps the whole store and calls `on_change(store)` with a fresh dict (never mutated afterwards) after
    every change, so a consumer can keep it and tell changes apart by identity."""

    def __init__(self, on_change: Callable[[Store], None]) -> None:
        self._on_change = on_change
        self._store: dict[str, Mapping[str, Any]] = {}

    def keep(self, name: str, obj: Mapping[str, Any]) -> Any:
        return obj

    def replace(self, store: Mapping[str, Any]) -> None:
        self._store = dict(store)
        self._on_change(dict(self._store))

    def upsert(self, name: str, obj: Mapping[str, Any]) -> None:
        self._store[name] = obj
        self._on_change(dict(self._store))

    def remove(self, name: str) -> None:
        self._store.pop(name, None)
        self._on_change(dict(self._store))


class UnchangedEvents(Protocol):
    """Recognises, without decoding, events that change nothing a sink keeps."""

    def skip(self, buffer: bytes, start: int, end: int) -> bool:
        """True when the event `buffer[start:end]` can be dropped (it is not decoded, nor applied)."""

    def take_version(self) -> str | None:
        """The resourceVersion of the newest event dropped since the last call, if any."""

    def reset(self) -> None:
        """Forget what was seen: a list replaces the store."""

    def remember(self, name: str, obj: Mapping[str, Any]) -> None:
        """A listed object: what its next events are compared with."""

    def forget(self, name: str) -> None:
        """The sink failed to apply this object's last event: its next one (the same, sent again) is decoded."""


class Backoff:
    """Exponential backoff with ±20 % jitter, bounded by `ceiling`, reset after a success."""

    def __init__(self, *, initial: float = 0.5, ceiling: float = 30.0, rng: random.Random | None = None) -> None:
        self._initial = initial
        self._ceiling = ceiling
        self._next = initial
        self._rng = rng or random.Random()

    def delay(self) -> float:
        value = self._next
        self._next = min(self._next * 2, self._ceiling)
        return value * self._rng.uniform(0.8, 1.2)

    def reset(self) -> None:
        self._next = self._initial


class Expired(Exception):
    """The resourceVersion being watched from is too old (410 Gone): list again."""


class SinkFailed(Exception):
    """The sink could not apply an event (or a list): watch (list) again from the last one it applied."""


class Reflector:
    """Keeps a sink current with one resource: a `StoreSink`, or `on_change(store)` called with a fresh dict
    after every change (a `SnapshotSink`)."""

    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        on_change: Callable[[Store], None] | StoreSink,
        *,
        backoff: Backoff | None = None,
        watch_timeout: int = 290,
        page_size: int = 500,
        pace: float = 0.0,
        unchanged: "UnchangedEvents | None" = None,
    ) -> None:
        """`pace`: when no event is waiting, wait that long before reading, so that the events of a busy
        collection (Nodes) are read in bursts rather than one wake-up each; 0 reads each event as it comes.
        `unchanged`: tells from an event's bytes that it changes nothing the sink keeps (a Node's status
        heartbeat), so that it is not even decoded."""
        self._api = api
        self._resource = resource
        self._sink: StoreSink = SnapshotSink(on_change) if callable(on_change) else on_change
        self._backoff = backoff or Backoff()
        self._watch_timeout = watch_timeout
        self._page_size = page_size
        self._pace = pace
        self._unchanged = unchanged
        self.kind = resource.kind
        self.resource_version: str | None = None
        self.lists = 0
        """How many full lists were made (1 + one per 410 Gone), for logs and tests."""
        self.sink_failures = 0
        """Events (or lists) the sink failed to apply, each tried again."""

    def run(self, stop: threading.Event) -> None:
        """List and watch until `stop` is set; never raises. Once `stop` is set, a failure (the stream closed
        under the watch as its process or test shuts down) ends the thread quietly: nothing is logged after
        the stop, when the log's stream may be gone already."""
        while not stop.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                self._watch(stop)
            except Exception as error:
                if stop.is_set():
                    return
                self._failed(error, stop)

    def _failed(self, error: Exception, stop: threading.Event) -> None:
        if isinstance(error, Expired):
            log.info("%s: %s; listing again", self._resource.kind, error)
            self.resource_version = None
            return
        if isinstance(error, SinkFailed):
            wait = self._backoff.delay()
            log.error("%s: %s (%s); trying again in %.1fs from resourceVersion %s", self._resource.kind,
                      error, error.__cause__, wait, self.resource_version or "(a new list)")
            self.sink_failures += 1
        elif isinstance(error, ApiError):
            wait = error.retry_after if error.retry_after is not None else self._backoff.delay()
            log.warning("%s: API server error %s; retrying in %.1fs", self._resource.kind, error, wait)
        elif isinstance(error, TransportError):
            wait = self._backoff.delay()
            log.warning("%s: %s; retrying in %.1fs", self._resource.kind, error, wait)
        else:  # a surprise must not end the watch: the snapshot would silently go stale
            wait = self._backoff.delay()
            log.error("%s: unexpected failure; retrying in %.1fs", self._resource.kind, wait, exc_info=error)
        stop.wait(wait)

    def _list(self) -> None:
        store: dict[str, Any] = {}
        if self._unchanged is not None:
            self._unchanged.reset()
        selector = {"labelSelector": self._resource.label_selector} if self._resource.label_selector else {}
        query = {"limit": str(self._page_size), **selector}
        resource_version = ""
        while True:
            try:
                page = self._api.get(self._resource.path, query)
            except ApiError as error:
                if error.code != 410 or "continue" not in query:
                    raise
                # The version of the first page was compacted before the last page was read (a list slower than
                # the compaction interval, `--etcd-compaction-interval`, 5 minutes by default): a paged list
                # started over might never finish. As client-go's pager does (`FullListIfExpired`,
                # staging/src/k8s.io/client-go/tools/pager/pager.go), list everything in one request instead.
                log.warning("%s: %s; listing everything in one request", self._resource.kind, error.message[:80])
                store.clear()
                if self._unchanged is not None:
                    self._unchanged.reset()
                resource_version = ""
                query = dict(selector)
                try:
                    page = self._api.get(self._resource.path, query)
                except ApiError as again:
                    if again.code == 410:
                        raise Expired(again.message) from None
                    raise
            for item in page.get("items") or []:
                name = self._resource.key(item)
                if name:
                    store[name] = self._sink.keep(name, item)
                    if self._unchanged is not None:
                        self._unchanged.remember(name, item)
            metadata = page.get("metadata") or {}
            resource_version = resource_version or str(metadata.get("resourceVersion") or "")
            token = metadata.get("continue")
            if not token:
                break
            query = {"limit": str(self._page_size), "continue": str(token), **selector}
        log.info("%s: listed %d at resourceVersion %s", self._resource.kind, len(store), resource_version)
        try:
            self._sink.replace(store)
        except Exception as error:  # the version stays unset: the list is made again
            raise SinkFailed(f"the list at resourceVersion {resource_version} was not applied") from error
        self.resource_version = resource_version
        self.lists += 1
        self._backoff.reset()

    def _watch(self, stop: threading.Event) -> None:
        if stop.is_set():
            return  # asked to stop while listing: do not open a watch that would block until it times out
        query = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version or "",
            "timeoutSeconds": str(self._watch_timeout),
        }
        if self._resource.label_selector:
            query["labelSelector"] = self._resource.label_selector
        started = time.monotonic()
        events = 0
        unchanged = self._unchanged
        skip = unchanged.skip if unchanged is not None else None
        try:
            for line in self._api.watch_lines(self._resource.path, query, pace=self._pace, skip=skip):
                if stop.is_set():
                    return
                events += 1
                if not line:  # events were dropped undecoded (they change nothing the sink keeps)
                    continue
                if unchanged is not None:
                    unchanged.take_version()  # this event is newer than those dropped before it
                self._apply(decode_event(line))
        except ApiError as error:
            if error.code == 410:
                raise Expired(error.message) from None
            raise
        finally:
            # The newest dropped event came after the last applied one: resume after it.
            dropped_at = unchanged.take_version() if unchanged is not None else None
            if dropped_at is not None:
                self.resource_version = dropped_at
                self._backoff.reset()
        if events == 0 and time.monotonic() - started < 1.0:
            # An API server that ends watches at once must not turn this loop into a busy loop.
            stop.wait(self._backoff.delay())

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise TransportError(f"watch event without an object: {str(event)[:200]}")
        if kind == "ERROR":
            error = ApiError.from_status(obj)
            if error.code == 410:
                raise Expired(error.message)
            raise error
        version = (obj.get("metadata") or {}).get("resourceVersion")
        name = self._resource.key(obj) if kind != "BOOKMARK" else None
        if name:
            try:
                if kind in ("ADDED", "MODIFIED"):
                    self._sink.upsert(name, obj)
                elif kind == "DELETED":
                    self._sink.remove(name)
                else:
                    log.warning("%s: unknown watch event type %r ignored", self._resource.kind, kind)
            except Exception as error:
                if self._unchanged is not None:
                    self._unchanged.forget(name)  # its bytes were learnt: the same event, sent again, is decoded
                raise SinkFailed(f"{kind} {name} at resourceVersion {version} was not applied") from error
        if version:  # applied (or a bookmark): a watch that breaks from now on resumes after it
            self.resource_version = str(version)
        self._backoff.reset()
