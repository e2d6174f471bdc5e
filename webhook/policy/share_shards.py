"""A worker's view of the spot share: the live pods per workload and class the controller publishes
(`spot-shares/` of the state directory, written by `webhook.kube.spot_ledger`), plus what this worker admitted
that the published counts do not hold yet. Implements `webhook.capacity_share.ShareLedger`.

A lookup reads the workload's shard (one stat when it is unchanged, `webhook.policy.shards.KeyedShards`),
so it costs the same at 10 and at 50,000 labelled pods.

Consistency model:
- The published counts lag the API server by the controller's watch lag (the time from a pod's creation in
  etcd to its event reaching this replica's controller, and one shard write).
- Each admission this worker answers is kept as pending (`admitted`) until the published counts include its
  pod. A worker cannot know its pod's name (a ReplicaSet's pods are named by the API server after admission,
  from `generateName`), so it watches the workload's `seen` count of that class, which grows by one for each
  new pod the controller sees: a pending admission taken when `seen` was `b` ends when `seen` passes `b`,
  each new pod ending one admission, oldest first. The published entry's `since` says which controller and
  which life of the entry a count belongs to; when it changes (a controller restart, a workload whose pods
  all went and came back), pending admissions count from zero in the new one.
- A pending admission whose pod never shows (the create failed after admission: quota, another webhook, a
  timeout) ends after `PENDING_SECONDS`, and so does one the controller does not see in that time.
- What this worker sees is then exact for its own admissions; the admissions of other workers and other
  replicas reach it only through the published counts, so during one watch lag they are invisible (the burst
  overshoot docs/spot-share-ledger.md measures). A pod of another worker that the controller sees first may
  end one of this worker's pending admissions early: for one watch lag this worker counts the other's pod
  in place of its own, never both.
- `complete` is False until the controller has published its first list (its `spot-shares/` directory
  exists): before that, or without RBAC to list pods, nothing is known.
"""

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from webhook.capacity_share import CapacityClass, ShareCounts
from webhook.policy.shards import Entry, KeyedShards

SHARES_DIRECTORY = "spot-shares"
PENDING_SECONDS = 30.0
"""How long an admission counts while the published counts do not show its pod."""
SEEN_KEYS: dict[str, str] = {"spot": "seenSpot", "on-demand": "seenOnDemand"}
LIVE_KEYS: dict[str, str] = {"spot": "spot", "on-demand": "onDemand"}


def shares_directory(state_directory: Path) -> Path:
    return state_directory / SHARES_DIRECTORY


@dataclass(slots=True)
class Pending:
    capacity_class: CapacityClass
    since: str | None
    """The entry's `since` when the admission was answered (None: the workload had no entry)."""
    baseline: int
    """The entry's `seen` count of the class then."""
    at: float


@dataclass(slots=True)
class Accounted:
    """Per workload and class: up to which `seen` count pods were matched to pending admissions."""

    since: str | None
    seen: int


class ShareShards:
    def __init__(self, state_directory: Path, *, pending_seconds: float = PENDING_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._directory = str(shares_directory(state_directory))
        self._shards = KeyedShards(shares_directory(state_directory), "its workloads count as having no pods")
        self._pending_seconds = pending_seconds
        self._clock = clock
        self._known = False
        self._pending: dict[str, deque[Pending]] = {}
        self._accounted: dict[tuple[str, str], Accounted] = {}
        self._lock = threading.Lock()
        self._next_sweep = 0.0

    def known(self) -> bool:
        """Whether the controller has published its first list of labelled pods (once true, stays true)."""
        if not self._known:
            self._known = os.path.isdir(self._directory)
        return self._known

    def counts(self, namespace: str, owner_uid: str) -> ShareCounts:
        key = f"{namespace}/{owner_uid}"
        entry = self._shards.entry(key)
        spot = _number(entry, LIVE_KEYS["spot"])
        on_demand = _number(entry, LIVE_KEYS["on-demand"])
        with self._lock:
            for pending in self._settle(key, entry):
                if pending.capacity_class == "spot":
                    spot += 1
                else:
                    on_demand += 1
        return ShareCounts(spot, on_demand, self.known())

    def admitted(self, namespace: str, owner_uid: str, capacity_class: CapacityClass) -> None:
        key = f"{namespace}/{owner_uid}"
        entry = self._shards.entry(key)
        now = self._clock()
        with self._lock:
            self._settle(key, entry)
            since = _since(entry)
            self._pending.setdefault(key, deque()).append(
                Pending(capacity_class, since, _number(entry, SEEN_KEYS[capacity_class]), now))
            if now >= self._next_sweep:  # workloads never looked at again: their admissions end too
                self._next_sweep = now + self._pending_seconds
                for other in [other for other in self._pending if other != key]:
                    self._settle(other, None, expire_only=True)

    def pending(self) -> int:
        """Admissions this worker counts that the published counts do not show yet (read now)."""
        with self._lock:
            keys = list(self._pending)
        entries = {key: self._shards.entry(key) for key in keys}
        with self._lock:
            return sum(len(self._settle(key, entry)) for key, entry in entries.items())

    def _settle(self, key: str, entry: Entry | None, *, expire_only: bool = False) -> deque[Pending]:
        """End the pending admissions of `key` the published entry now holds, or too old; the rest."""
        queue = self._pending.get(key)
        if not queue:
            return deque()
        oldest = self._clock() - self._pending_seconds
        kept: deque[Pending] = deque()
        since = _since(entry)
        for pending in queue:
            if pending.at < oldest:
                continue
            if not expire_only:
                accounted = self._accounted.get((key, pending.capacity_class))
                if accounted is None or accounted.since != since:
                    accounted = self._accounted[(key, pending.capacity_class)] = Accounted(since, 0)
                start = max(accounted.seen, pending.baseline if pending.since == since else 0)
                if _number(entry, SEEN_KEYS[pending.capacity_class]) > start:
                    accounted.seen = start + 1  # this new pod is taken to be this admission's
                    continue
            kept.append(pending)
        if kept:
            self._pending[key] = kept
        else:
            del self._pending[key]
            for capacity_class in SEEN_KEYS:
                self._accounted.pop((key, capacity_class), None)
        return kept


def _number(entry: Entry | None, key: str) -> int:
    value = entry.get(key) if entry is not None else None
    return value if isinstance(value, int) and value >= 0 else 0


def _since(entry: Entry | None) -> str | None:
    value = entry.get("since") if entry is not None else None
    return value if isinstance(value, str) else None
