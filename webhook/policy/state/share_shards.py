"""A worker's view of the spot share: the live pods per workload and class the controller publishes
(`spot-shares/` of the state directory, written by `webhook.cluster.spot.spot_ledger`), plus the admissions of this
replica's workers that the published counts do not hold yet. Implements `webhook.pods.capacity_share.ShareLedger`.

A lookup reads the workload's shard (one stat when it is unchanged, `webhook.policy.state.shards.KeyedShards`)
and the replica's pending files (`spot-pending/`, one per worker, a stat each, parsed again only when
replaced), so it costs the same at 10 and at 50,000 labelled pods.

Consistency model:
- The published counts lag the API server by the controller's watch lag (the time from a pod's creation in
  etcd to its event reaching this replica's controller, and one shard write).
- Each admission a worker answers is kept as pending (`admitted`, written to the worker's own file, which the
  replica's other workers read: a worker answers one admission at a time, so within a replica every decision
  sees every earlier one) until the published counts include its pod. A ReplicaSet's pods are named by the
  API server after admission (`generateName`), so no admission knows its pod: the workload's entry carries a
  `seen` count per class, which grows by one for each new pod the controller sees, and each pod it went up
  by since an admission's baseline ends one admission, oldest first (`_unsettled`). The entry's `since` says
  which controller and which life of the entry a count belongs to; when it changes (a controller restart, a
  workload whose pods all went and came back), admissions are matched from zero in the new one.
- A pending admission whose pod never shows (the create failed after admission: quota, another webhook, a
  timeout) ends after `PENDING_SECONDS`, and so does one the controller does not see in that time.
- Within a replica a decision is then exact up to the other replicas' admissions, which reach it only
  through the published counts: during one watch lag they are invisible (the burst overshoot
  docs/spot-share-ledger.md states and measures). A pod of another replica seen first may end one of this
  replica's admissions early: for that watch lag the other's pod is counted in place of this one's, never
  both.
- `complete` is False until the controller has published its first list (its `spot-shares/` directory
  exists): before that, or without RBAC to list pods, nothing is known.
"""

import contextlib
import fcntl
import itertools
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import orjson

from webhook.pods.capacity_share import CapacityClass, ShareCounts
from webhook.policy.state.shards import Entry, KeyedShards, Stamp, stamp_of, write_atomically
from webhook.support.json_bytes import encode_json

log = logging.getLogger(__name__)

SHARES_DIRECTORY = "spot-shares"
PENDING_DIRECTORY = "spot-pending"
HOLD_STRIPES = 64
"""Workloads share this many lock files (`spot-pending/locks/`): two workloads rarely wait on each other."""
HOLD_SECONDS = 0.05
"""The longest a worker waits for another worker of its replica to finish deciding a Pod of the same workload
stripe; past it, it decides without the hold (as two replicas do: the overshoot `docs/spot-share-ledger.md`
bounds)."""
PENDING_SECONDS = 30.0
"""How long an admission counts while the published counts do not show its pod."""
SEEN_KEYS: dict[str, str] = {"spot": "seenSpot", "on-demand": "seenOnDemand"}
LIVE_KEYS: dict[str, str] = {"spot": "spot", "on-demand": "onDemand"}


def shares_directory(state_directory: Path) -> Path:
    return state_directory / SHARES_DIRECTORY


def pending_directory(state_directory: Path) -> Path:
    return state_directory / PENDING_DIRECTORY


@dataclass(frozen=True, slots=True)
class Pending:
    """One admission a worker answered, until the published counts show its pod."""

    key: str
    capacity_class: str
    since: str | None
    """The workload entry's `since` when the admission was answered (None: the workload had no entry)."""
    baseline: int
    """The entry's `seen` count of the class then."""
    at: float
    """When (`time.monotonic`, one clock for every process of the machine)."""
    order: str
    """Orders admissions made at the same instant: the worker and its sequence number."""

    def encode(self) -> list[object]:
        return [self.key, self.capacity_class, self.since, self.baseline, self.at, self.order]

    @staticmethod
    def decode(raw: object) -> "Pending | None":
        if not isinstance(raw, list) or len(raw) != 6:
            return None
        key, capacity_class, since, baseline, at, order = raw
        if (not isinstance(key, str) or capacity_class not in SEEN_KEYS or not isinstance(baseline, int)
                or not isinstance(at, int | float) or not isinstance(order, str)):
            return None
        return Pending(key, capacity_class, since if isinstance(since, str) else None, baseline, float(at), order)


class ShareShards:
    """`ShareLedger` for a worker of `placer serve`: the published counts plus the admissions of every
    worker of this replica (each worker's own file in `spot-pending/`) that they do not show yet."""

    def __init__(self, state_directory: Path, *, pending_seconds: float = PENDING_SECONDS,
                 clock: Callable[[], float] = time.monotonic, worker: str | None = None) -> None:
        """`worker`: this worker's name among the replica's (its pending file); the pid and a random part."""
        self._directory = str(shares_directory(state_directory))
        self._shards = KeyedShards(shares_directory(state_directory), "its workloads count as having no pods")
        self._pending_directory = pending_directory(state_directory)
        self._worker = worker or f"{os.getpid()}-{os.urandom(3).hex()}"
        self._path = self._pending_directory / f"{self._worker}.json"
        self._pending_seconds = pending_seconds
        self._clock = clock
        self._known = False
        self._mine: dict[str, list[Pending]] = {}
        """This worker's admissions by workload key."""
        self._others: dict[str, tuple[Stamp, dict[str, list[Pending]]]] = {}
        """The other workers' files (by file name): what was read, by workload key."""
        self._sequence = itertools.count()
        self._lock = threading.Lock()
        self._held: int | None = None
        """The lock file descriptor this worker holds from `counts` to `admitted` or `release`."""
        self._waited_too_long = False

    def known(self) -> bool:
        """Whether the controller has published its first list of labelled pods (once true, stays true)."""
        if not self._known:
            self._known = os.path.isdir(self._directory)
        return self._known

    def counts(self, namespace: str, owner_uid: str) -> ShareCounts:
        """The counts, read under the replica-wide hold of the workload's stripe, which is kept until this
        admission is recorded (`admitted`) or over (`release`): the next worker to decide a Pod of the same
        workload sees this one's decision in its pending file."""
        key = f"{namespace}/{owner_uid}"
        self._hold(key)
        entry = self._shards.entry(key)
        spot = _number(entry, LIVE_KEYS["spot"])
        on_demand = _number(entry, LIVE_KEYS["on-demand"])
        with self._lock:
            for pending in _unsettled(self._pending_of(key), entry):
                if pending.capacity_class == "spot":
                    spot += 1
                else:
                    on_demand += 1
        return ShareCounts(spot, on_demand, self.known())

    def admitted(self, namespace: str, owner_uid: str, capacity_class: CapacityClass) -> None:
        try:
            self._record(namespace, owner_uid, capacity_class)
        finally:
            self.release()

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            os.close(held)  # closing the descriptor ends its flock

    def _hold(self, key: str) -> None:
        """Take the replica-wide lock of `key`'s stripe (flock: released by the kernel if this worker dies),
        waiting at most HOLD_SECONDS; without it, go on (the counts are still right, only a concurrent
        decision of another worker may be missed)."""
        if self._held is not None:
            return  # this admission holds it already
        path = self._pending_directory / "locks" / f"{zlib.crc32(key.encode()) % HOLD_STRIPES:02d}.lock"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            log.warning("spot-share hold not taken (%s): concurrent decisions of this replica may overlap", error)
            return
        deadline = time.monotonic() + HOLD_SECONDS
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.0002)
                    continue
                os.close(descriptor)
                if not self._waited_too_long:
                    self._waited_too_long = True
                    log.warning("spot-share: another worker held %s for over %.0f ms; deciding without it",
                                path.name, HOLD_SECONDS * 1000)
                return
            self._held = descriptor
            return

    def _record(self, namespace: str, owner_uid: str, capacity_class: CapacityClass) -> None:
        key = f"{namespace}/{owner_uid}"
        entry = self._shards.entry(key)
        now = self._clock()
        with self._lock:
            oldest = now - self._pending_seconds
            kept = {k: fresh for k, queue in self._mine.items() if (fresh := [p for p in queue if p.at >= oldest])}
            kept.setdefault(key, []).append(Pending(key, capacity_class, _since(entry),
                                                    _number(entry, SEEN_KEYS[capacity_class]), now,
                                                    f"{self._worker}.{next(self._sequence):012d}"))
            self._mine = kept
            records = [pending.encode() for queue in kept.values() for pending in queue]
            try:
                self._pending_directory.mkdir(parents=True, exist_ok=True)
                write_atomically(self._path, encode_json({"pending": records}))
            except OSError as error:  # the other workers will not see it; this one still does
                log.warning("pending spot-share admissions not written (%s): only this worker counts them", error)

    def pending(self) -> int:
        """Admissions of this replica's workers that the published counts do not show yet (read now)."""
        with self._lock:
            keys = set(self._mine).union(*(by_key for _, by_key in self._read_others().values()))
            pending_of = {key: self._pending_of(key, read=False) for key in keys}
        return sum(len(_unsettled(pending, self._shards.entry(key))) for key, pending in pending_of.items())

    def _pending_of(self, key: str, *, read: bool = True) -> list[Pending]:
        """This replica's admissions of `key` not older than the bound, oldest first (`read`: the other
        workers' files looked at now, else as last read)."""
        oldest = self._clock() - self._pending_seconds
        others = self._read_others() if read else self._others
        found = [pending for pending in self._mine.get(key, ()) if pending.at >= oldest]
        for _, by_key in others.values():
            found.extend(pending for pending in by_key.get(key, ()) if pending.at >= oldest)
        found.sort(key=lambda p: (p.at, p.order))
        return found

    def _read_others(self) -> dict[str, tuple[Stamp, dict[str, list[Pending]]]]:
        """The other workers' pending files, parsed again only when replaced; files of workers gone for
        twice the bound (a recycled worker) are removed."""
        try:
            listing = list(os.scandir(self._pending_directory))
        except FileNotFoundError:
            return {}
        seen: dict[str, tuple[Stamp, dict[str, list[Pending]]]] = {}
        stale = time.time() - 2 * self._pending_seconds
        for item in listing:
            if item.name == self._path.name or not item.name.endswith(".json"):
                continue
            try:
                stat = item.stat()
            except FileNotFoundError:
                continue
            if stat.st_mtime < stale:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(item.path)
                continue
            stamp = stamp_of(stat)
            cached = self._others.get(item.name)
            seen[item.name] = cached if cached is not None and cached[0] == stamp else (stamp, _read(item.path))
        self._others = seen
        return seen


def _read(path: str) -> dict[str, list[Pending]]:
    """A worker's pending file, by workload key."""
    try:
        with open(path, "rb") as pending_file:
            raw = orjson.loads(pending_file.read())
    except (OSError, ValueError):
        return {}  # gone meanwhile, or being replaced: read again when its stamp changes
    by_key: dict[str, list[Pending]] = {}
    for item in (raw.get("pending") if isinstance(raw, dict) else None) or []:
        pending = Pending.decode(item)
        if pending is not None:
            by_key.setdefault(pending.key, []).append(pending)
    return by_key


def _unsettled(pending: Iterable[Pending], entry: Entry | None) -> list[Pending]:
    """The admissions (oldest first) whose pod the published entry does not show yet: each pod the entry's
    `seen` count of a class went up by after an admission's baseline is taken to be that admission's, oldest
    admission first; `since` changed (another controller, a new life of the entry): counted from zero."""
    since = _since(entry)
    matched: dict[str, int] = {}
    left = []
    for admission in pending:
        start = max(matched.get(admission.capacity_class, 0), admission.baseline if admission.since == since else 0)
        if _number(entry, SEEN_KEYS[admission.capacity_class]) > start:
            matched[admission.capacity_class] = start + 1
        else:
            left.append(admission)
    return left


def _number(entry: Entry | None, key: str) -> int:
    value = entry.get(key) if entry is not None else None
    return value if isinstance(value, int) and value >= 0 else 0


def _since(entry: Entry | None) -> str | None:
    value = entry.get("since") if entry is not None else None
    return value if isinstance(value, str) else None
