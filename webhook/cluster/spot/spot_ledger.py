"""The controller's side of the spot share: live pods per workload and capacity class, published for workers.

Placer labels every Pod it gives a capacity class (`webhook.pods.capacity_share.CLASS_LABEL`). The controller
list+watches Pods with that label only (a label-selected watch: the API server sends nothing of the other
pods, so a cluster whose pods carry no class costs one idle watch), and keeps, per workload, the live pods by
class. A workload is a namespace and the uid of the pods' controller ownerReference (the ReplicaSet of a
Deployment's pods, the StatefulSet, the Job); a pod without one is counted nowhere.

A pod is live while it is not terminating (no `deletionTimestamp`) and not finished (phase neither Succeeded
nor Failed): the pods a ReplicaSet counts as its replicas (`IsPodActive` in kubernetes/kubernetes
pkg/controller/controller_utils.go).

Each workload's entry, in shards of the state directory (`webhook.policy.state.share_shards`):
`{"spot": live spot pods, "onDemand": live on-demand pods, "seenSpot": .., "seenOnDemand": .., "since": ..}`.
The `seen` counts are how many distinct pods (by uid) of that class the controller has seen for the workload
since `since` (this controller process and the moment the workload's entry was made): they only grow, and
tell a worker that a pod it admitted has reached the published counts (`share_shards.ShareShards`). An entry
is rewritten when one of its numbers changes: a pod's status updates (conditions, container states) write
nothing; its creation, its end and its deletion rewrite one shard.

Memory follows the disk the way `webhook.policy.state.shards.ShardWriter` does: an event whose shard write failed
(ENOSPC) raises to the reflector, which sends the same event again; applying it twice changes nothing in
memory, and the workloads whose entry is not on disk yet are written then.
"""

import logging
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.cluster.client.reflector import Resource
from webhook.pods.capacity_share import CLASS_LABEL, CapacityClass
from webhook.policy.state.shards import Entry, ShardWriter
from webhook.support.typing import as_map

log = logging.getLogger(__name__)

PODS = Resource("/api/v1/pods", "Pod", namespaced=True, label_selector=CLASS_LABEL)
"""Every namespace's pods that carry a capacity class (pods only Placer labels: those of opted-in namespaces)."""
CLASSES: tuple[CapacityClass, ...] = ("spot", "on-demand")
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
ENTRY_KEYS = {"spot": ("spot", "seenSpot"), "on-demand": ("onDemand", "seenOnDemand")}
"""Where an entry keeps the live and the seen count of each class."""


@dataclass(frozen=True, slots=True)
class PodShare:
    """What the controller keeps of one labelled pod."""

    workload: str
    """`namespace/owner-uid`: the key of the workload's entry."""
    capacity_class: CapacityClass
    live: bool
    uid: str


def workload_key(namespace: str, owner_uid: str) -> str:
    return f"{namespace}/{owner_uid}"


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid of the object's controller ownerReference (`controller: true`; at most one is allowed)."""
    for reference in as_map(obj.get("metadata")).get("ownerReferences") or []:
        if isinstance(reference, dict) and reference.get("controller") is True and reference.get("uid"):
            return str(reference["uid"])
    return None


def pod_share(obj: Mapping[str, Any]) -> PodShare | None:
    """The pod's class, workload and liveness; None for a pod counted nowhere (no class Placer gives, no
    controller)."""
    metadata = as_map(obj.get("metadata"))
    capacity_class = as_map(metadata.get("labels")).get(CLASS_LABEL)
    namespace = metadata.get("namespace")
    owner = controller_uid(obj)
    if capacity_class not in CLASSES or not isinstance(namespace, str) or owner is None:
        return None
    live = metadata.get("deletionTimestamp") is None and as_map(obj.get("status")).get("phase") not in FINISHED_PHASES
    key = sys.intern(workload_key(namespace, owner))  # shared by the workload's pods: one string, not one each
    return PodShare(key, capacity_class, live, str(metadata.get("uid") or ""))


@dataclass(slots=True)
class Workload:
    since: str
    pods: dict[str, PodShare] = field(default_factory=dict)
    live: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    seen: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))

    def entry(self) -> Entry:
        entry: Entry = {"since": self.since}
        for capacity_class, (live_key, seen_key) in ENTRY_KEYS.items():
            entry[live_key] = self.live[capacity_class]
            entry[seen_key] = self.seen[capacity_class]
        return entry

    def add(self, name: str, pod: PodShare, *, known: PodShare | None = None) -> None:
        """Count the pod (again: an update); `known`, what a list replaces, tells whether it was seen."""
        old = self.pods.get(name)
        if old is not None:
            self.live[old.capacity_class] -= old.live
        seen = old or known
        if seen is None or seen.uid != pod.uid:
            self.seen[pod.capacity_class] += 1
        self.pods[name] = pod
        self.live[pod.capacity_class] += pod.live

    def drop(self, name: str) -> None:
        old = self.pods.pop(name, None)
        if old is not None:
            self.live[old.capacity_class] -= old.live


class PodShareSink:
    """The reflector's sink for labelled pods (`webhook.cluster.client.reflector.StoreSink`): keeps `PodShare`s, and
    publishes each workload's entry through `writer` when it changes."""

    def __init__(self, writer: ShardWriter) -> None:
        self._writer = writer
        self._epoch = f"{os.getpid():x}{int.from_bytes(os.urandom(4), 'big'):08x}"
        """This process: `since` values of an earlier controller (a restart) never match one of this one."""
        self._made = 0
        self._workloads: dict[str, Workload] = {}
        self._workload_of: dict[str, str] = {}
        """Pod key (`namespace/name`) → the workload it is counted in."""
        self._unwritten: set[str] = set()
        """Workloads whose entry the disk does not hold yet (a write failed): written with the next event."""
        self._lock = threading.Lock()
        self.synced = False
        self.events = 0
        self.published = 0
        """Events that rewrote a shard (the others changed no count)."""

    def keep(self, name: str, obj: Mapping[str, Any]) -> PodShare | None:
        return pod_share(obj)

    def replace(self, entries: Mapping[str, Any]) -> None:
        """A list (the first, or again after 410 Gone): counts made again, `seen` going on from what was seen."""
        with self._lock:
            workloads: dict[str, Workload] = {}
            workload_of: dict[str, str] = {}
            made = self._made
            for name, pod in entries.items():
                if not isinstance(pod, PodShare):
                    continue
                before = self._workloads.get(pod.workload)
                workload = workloads.get(pod.workload)
                if workload is None:
                    if before is not None:  # `seen` goes on: a pod admitted before the list is not seen twice
                        workload = Workload(before.since, seen=dict(before.seen))
                    else:
                        made += 1
                        workload = Workload(f"{self._epoch}.{made}")
                    workloads[pod.workload] = workload
                known = before.pods.get(name) if before is not None else None
                workload.add(name, pod, known=known)
                workload_of[name] = pod.workload
            written = self._writer.replace({key: workload.entry() for key, workload in workloads.items()})
            self._workloads, self._workload_of, self._made = workloads, workload_of, made
            self._unwritten.clear()
            self.synced = True
        log.info("spot share: %d labelled pods in %d workloads published (%d shards written)",
                 len(workload_of), len(workloads), written)

    def upsert(self, name: str, obj: Mapping[str, Any]) -> None:
        self._apply(name, pod_share(obj))

    def remove(self, name: str) -> None:
        self._apply(name, None)

    def _apply(self, name: str, pod: PodShare | None) -> None:
        with self._lock:
            self.events += 1
            before = self._workload_of.get(name)
            if before is not None and (pod is None or pod.workload != before):
                workload = self._workloads.get(before)
                if workload is not None:
                    workload.drop(name)
                self._unwritten.add(before)
            if pod is None:
                self._workload_of.pop(name, None)
            else:
                workload = self._workloads.get(pod.workload)
                if workload is None:
                    self._made += 1
                    workload = self._workloads[pod.workload] = Workload(f"{self._epoch}.{self._made}")
                workload.add(name, pod)
                self._workload_of[name] = pod.workload
                self._unwritten.add(pod.workload)
            self._flush()

    def _flush(self) -> None:
        """Write the entries the disk does not hold (a workload without pods: its entry deleted)."""
        for key in sorted(self._unwritten):
            workload = self._workloads.get(key)
            if workload is not None and not workload.pods:
                del self._workloads[key]
                workload = None
            changed = self._writer.put(key, workload.entry()) if workload else self._writer.delete(key)
            self.published += changed
            self._unwritten.discard(key)

    def counts(self, namespace: str, owner_uid: str) -> tuple[int, int] | None:
        """(live spot, live on-demand) of one workload as kept now (tests, and the controller's logs)."""
        with self._lock:
            workload = self._workloads.get(workload_key(namespace, owner_uid))
            return (workload.live["spot"], workload.live["on-demand"]) if workload else None

    def size(self) -> tuple[int, int]:
        """(labelled pods, workloads) kept."""
        with self._lock:
            return len(self._workload_of), len(self._workloads)

