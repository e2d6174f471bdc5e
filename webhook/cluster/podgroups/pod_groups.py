"""PodGroups that exist when the gang arrives: the controller's side of `createPodGroup: true`.

The workloads an admission marked (`webhook.gang.pod_groups`) are watched with a label selector, so the
API server sends nothing of the others. For each one the controller keeps a PodGroup: created with the
gang's `minMember` and an owner reference to the workload (the garbage collector deletes it with the
workload), updated when the workload's size changes (a scale, a new `minAvailable`). A PodGroup of that name
that Placer did not make for this workload (no `app.kubernetes.io/managed-by: placer` label, or another
owner) is the user's: left alone, and said once in the log.

A workload deleted and created again under the same name (`kubectl delete job train && kubectl create -f
job.yaml`, `kubectl replace --force`) finds the PodGroup Placer made for the one before: Placer's label, and
an owner reference of the same kind and name with the old uid, which the garbage collector treats as an
absent owner (`isDangling` in pkg/controller/garbagecollector/garbagecollector.go compares the uid of the
object found by name with the reference's). Or no owner at all: a batch/v1 Job deleted through the API
orphans its dependents by default (`DefaultGarbageCollectionPolicy` in pkg/registry/batch/job/strategy.go),
and the garbage collector then removes their owner references. Such a PodGroup is stale, not the user's:
it is deleted (preconditions on its uid and resourceVersion, so nothing newer is lost) and made again for
the live workload, with a fresh status. One already being deleted is waited for.

PodGroups are watched too (every one, once their API is served): a PodGroup deleted (by the garbage
collector, by a user, a user's own one given up) or changed away from what a workload wants makes the
controller look at that workload again, so a gang never waits on a PodGroup that nothing re-makes.

Writes come from the controller's loop while it holds the Lease (one replica writes), never from admission.
When the API server does not serve PodGroups (scheduler-plugins' CRD is not installed), the controller says
so once a minute with how many workloads wait, and creates them as soon as the CRD appears; nothing crashes
and nothing is retried in a tight loop. A write that fails (a conflict, the API server away) is tried again
a few seconds later.
"""

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.cluster.client.reflector import Reflector, Resource
from webhook.cluster.podgroups.native_gang import NativePodGroups
from webhook.gang.native import NATIVE
from webhook.gang.pod_groups import (
    API_VERSION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    OWNER_KINDS,
    POD_GROUP_LABEL,
    DesiredPodGroup,
    desired_pod_group,
)
from webhook.support.typing import as_map
from webhook.workloads import WorkloadKind, WorkloadTable

log = logging.getLogger(__name__)

API_PATH = f"/apis/{API_VERSION}"
NOT_SERVED = "the server could not find the requested resource"
"""The message of kube-apiserver's 404 for a path no API serves (as opposed to an object that is missing)."""
RECHECK_SECONDS = 60.0
RETRY_SECONDS = 5.0

Outcome = Literal["created", "updated", "unchanged", "foreign", "recreated", "deleting", "conflict", "error",
                  "not-served"]
_SETTLED = frozenset({"created", "updated", "unchanged", "foreign", "recreated"})
POD_GROUPS = Resource(f"{API_PATH}/podgroups", "PodGroup", namespaced=True)
_UNSEEN = object()
"""A PodGroup an event says nothing about (another name than the event's)."""
"""Every PodGroup (a few per gang-scheduled workload): their deletions and changes make workloads looked at again."""


def workload_resources(table: WorkloadTable) -> list[tuple[WorkloadKind, Resource]]:
    """The label-filtered, all-namespace collections of the kinds that own PodGroups."""
    found = []
    for group, kind_name in OWNER_KINDS:
        kind = table.lookup(group, kind_name)
        if kind is not None:
            path = f"/apis/{group}/{kind.versions[0]}/{kind.resource}"
            found.append((kind, Resource(path, kind_name, namespaced=True, label_selector=POD_GROUP_LABEL)))
    return found


class PodGroupKeeper:
    def __init__(
        self,
        api: KubeApi,
        table: WorkloadTable,
        *,
        wake: Callable[[], None] = lambda: None,
        observe: Callable[[str], None] = lambda outcome: None,
        monotonic: Callable[[], float] = time.monotonic,
        recheck: float = RECHECK_SECONDS,
        retry: float = RETRY_SECONDS,
        native_version: Callable[[], str | None] = lambda: None,
    ) -> None:
        """`native_version`: the kube-scheduler PodGroup version served now
        (`webhook.cluster.podgroups.native_gang`)."""
        self._api = api
        self._native_version = native_version
        self._native = NativePodGroups(api, retry=retry)
        self._wake = wake
        self._observe = observe
        self._monotonic = monotonic
        self._recheck = recheck
        self._retry = retry
        self._lock = threading.Lock()
        self._desired: dict[str, DesiredPodGroup] = {}
        """Per marked workload (`Kind/namespace/name`), the PodGroup it wants."""
        self._settled: dict[str, DesiredPodGroup] = {}
        """What each workload's PodGroup was last made to be (or found to be someone else's)."""
        self._retry_at: dict[str, float] = {}
        self._served = False
        self._next_check = 0.0
        """When discovery may be asked again whether PodGroups are served (while they are not known to be)."""
        self._recheck_keys: dict[str, bool] = {}
        """Workloads whose PodGroup was deleted or changed since the last round (from the PodGroup watch), and
        whether at once (it was deleted: a PodGroup being deleted was waited for), or after any retry delay."""
        self._foreign: set[str] = set()
        """Workloads whose PodGroup is someone else's: only its deletion makes them looked at again."""
        self._served_event = threading.Event()
        self.reflectors: list[Reflector] = [
            Reflector(api, resource, _MarkedWorkloads(self, kind)) for kind, resource in workload_resources(table)]
        self.reflectors.append(WhenServed(self._served_event, api, POD_GROUPS, _PodGroupEvents(self)))

    @property
    def marked(self) -> int:
        """Marked workloads that want a PodGroup now."""
        with self._lock:
            return len(self._desired)

    @property
    def waiting(self) -> int:
        """Workloads whose PodGroup is not (yet) what they want."""
        with self._lock:
            return sum(1 for key, want in self._desired.items() if self._settled.get(key) != want)

    def want(self, key: str, kind: WorkloadKind, obj: Mapping[str, Any] | None) -> None:
        """A marked workload appeared, changed (obj) or went (None); called from the watch threads."""
        desired = desired_pod_group(kind, obj) if obj is not None else "deleted"
        with self._lock:
            if isinstance(desired, DesiredPodGroup):
                if self._desired.get(key) == desired:
                    return
                self._desired[key] = desired
            elif self._desired.pop(key, None) is None:
                return
        self._wake()

    def replace(self, kind: WorkloadKind, objects: Mapping[str, Mapping[str, Any]]) -> None:
        prefix = f"{kind.kind}/"
        with self._lock:
            for key in [key for key in self._desired if key.startswith(prefix)]:
                del self._desired[key]
        for name, obj in objects.items():
            self.want(prefix + name, kind, obj)
        self._wake()

    def pod_group_seen(self, key: str, obj: Mapping[str, Any] | None, *, deleted: bool = False) -> None:
        """A PodGroup (`namespace/name`) changed (obj) or was deleted (None, `deleted`); from its watch thread."""
        self._look_again(lambda group: obj if group == key else _UNSEEN, deleted=deleted)

    def pod_groups_listed(self, store: Mapping[str, Mapping[str, Any]]) -> None:
        """Every PodGroup, after a list of them: each workload is compared with its PodGroup (or its absence)."""
        self._look_again(store.get, deleted=False)

    def _look_again(self, found: Callable[[str], Any], *, deleted: bool) -> None:
        """Mark the workloads whose PodGroup (`found(namespace/name)`: the object, None when missing, or
        `_UNSEEN`) is not what they want to be looked at again; a user's PodGroup only once it is gone."""
        with self._lock:
            again = []
            for workload, want in self._desired.items():
                if want.flavour == NATIVE:  # that watch is of scheduler-plugins' PodGroups, not kube-scheduler's
                    continue
                obj = found(f"{want.namespace}/{want.name}")
                if obj is _UNSEEN or _as_wanted(want, obj) or (obj is not None and workload in self._foreign):
                    continue
                again.append(workload)
                self._recheck_keys[workload] = deleted or self._recheck_keys.get(workload, False)
        if again:
            self._wake()

    def reconcile(self) -> None:
        """Make every wanted PodGroup so, from the controller's loop (only while it holds the Lease)."""
        now = self._monotonic()
        with self._lock:
            desired = dict(self._desired)
            again, self._recheck_keys = self._recheck_keys, {}
        for key, deleted in again.items():
            self._settled.pop(key, None)
            if deleted:  # made again at once, not after the retry delay (that was waiting for this deletion)
                self._retry_at.pop(key, None)
        for gone in set(self._settled) - set(desired):
            del self._settled[gone]  # the workload went (its PodGroup goes with it) or is no longer marked
            self._retry_at.pop(gone, None)
        pending = [(key, want) for key, want in desired.items()
                   if self._settled.get(key) != want and now >= self._retry_at.get(key, 0.0)]
        self._reconcile_native([(key, want) for key, want in pending if want.flavour == NATIVE], now)
        pending = [(key, want) for key, want in pending if want.flavour != NATIVE]
        if not pending or not self._api_served(now, len(pending)):
            return
        for key, want in pending:
            outcome = self._ensure(key, want)
            self._observe(outcome)
            with self._lock:
                if outcome == "foreign":
                    self._foreign.add(key)
                    # A look-again the PodGroup watch asked for while this one ran would have been skipped had
                    # the workload been known as foreign then; only the PodGroup's deletion calls for one.
                    if not self._recheck_keys.get(key, True):
                        del self._recheck_keys[key]
                else:
                    self._foreign.discard(key)
            if outcome in _SETTLED:
                self._settled[key] = want
                self._retry_at.pop(key, None)
            elif outcome == "not-served":  # the CRD went away meanwhile
                self._served, self._next_check = False, now + self._recheck
                return
            else:
                self._retry_at[key] = now + self._retry

    def _reconcile_native(self, pending: list[tuple[str, DesiredPodGroup]], now: float) -> None:
        """kube-scheduler's PodGroups, at the version served now; none while none is (the workers admit pods
        unchanged then, and the policy's status says so)."""
        version = self._native_version() if pending else None
        if not version:
            return
        for key, want in pending:
            outcome = self._native.ensure(key, want, version)
            self._observe(outcome)
            if outcome in _SETTLED:
                self._settled[key] = want
                self._retry_at.pop(key, None)
            else:
                self._retry_at[key] = now + self._retry

    def _api_served(self, now: float, waiting: int) -> bool:
        """Whether PodGroups are served, asked of discovery at most once a `recheck` after a 404 (once a
        `retry` after a failed call) until they are."""
        if self._served:
            return True
        if now < self._next_check:
            return False
        try:
            self._api.get(API_PATH)
        except ApiError as error:
            if error.code != 404:
                log.warning("PodGroup API discovery failed (%s); %d workloads wait for their PodGroup", error, waiting)
                self._next_check = now + self._retry
                return False
            self._next_check = now + self._recheck
            log.error(
                "PodGroups are not served by the API server (%s: is the scheduler-plugins PodGroup CRD installed?);"
                " %d workloads wait for their PodGroup; checking again in %.0fs", API_VERSION, waiting, self._recheck,
            )
            self._observe("not-served")
            return False
        except TransportError as error:
            log.warning("PodGroup API discovery failed (%s)", error)
            self._next_check = now + self._retry
            return False
        if self._next_check:
            log.info("PodGroups are served now (%s): creating the ones workloads wait for", API_VERSION)
        self._served = True
        self._served_event.set()
        return True

    def _ensure(self, key: str, want: DesiredPodGroup) -> Outcome:
        collection = f"{API_PATH}/namespaces/{want.namespace}/podgroups"
        path = f"{collection}/{want.name}"
        where = f"PodGroup {want.namespace}/{want.name} for {key}"
        try:
            try:
                existing = self._api.get(path)
            except ApiError as error:
                if error.code != 404 or error.message == NOT_SERVED:
                    raise
                self._api.create(collection, want.body())
                log.info("%s created with minMember %d", where, want.min_member)
                return "created"
            if as_map(existing.get("metadata")).get("deletionTimestamp"):
                log.info("%s: the PodGroup of that name is being deleted; made again once it is gone", where)
                return "deleting"
            if not want.made_by_placer(existing) and _stale(want, existing):
                return self._remake(collection, path, want, existing, where)
            if not want.made_by_placer(existing):
                log.warning("%s: a PodGroup of that name exists that Placer did not make for this workload; "
                            "left alone (its minMember stays %s)", where, (existing.get("spec") or {}).get("minMember"))
                return "foreign"
            spec = as_map(existing.get("spec"))
            if spec.get("minMember") == want.min_member:
                return "unchanged"
            self._api.replace(path, {**existing, "spec": {**spec, "minMember": want.min_member}})
            log.info("%s: minMember %s -> %d", where, spec.get("minMember"), want.min_member)
            return "updated"
        except ApiError as error:
            if error.code == 404 and error.message == NOT_SERVED:
                return "not-served"
            outcome: Outcome = "conflict" if error.code == 409 else "error"
            log.warning("%s not written (%s); trying again in %.0fs", where, error, self._retry)
            return outcome
        except TransportError as error:
            log.warning("%s not written (%s); trying again in %.0fs", where, error, self._retry)
            return "error"


    def _remake(self, collection: str, path: str, want: DesiredPodGroup, existing: Mapping[str, Any],
                where: str) -> Outcome:
        """Delete the PodGroup made for a former workload of this name, and create this one's. The delete's
        preconditions (uid, resourceVersion) make it fail with 409 Conflict if the PodGroup was replaced or
        changed meanwhile (`Preconditions.Check` in staging/src/k8s.io/apiserver/pkg/storage/interfaces.go);
        then, as when the create finds one again (409 AlreadyExists), it is tried again later."""
        metadata = as_map(existing.get("metadata"))
        old_owners = [ref.get("uid") for ref in metadata.get("ownerReferences") or [] if isinstance(ref, dict)]
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background",
                   "preconditions": {"uid": metadata.get("uid"), "resourceVersion": metadata.get("resourceVersion")}}
        try:
            self._api.delete(path, options)
        except ApiError as error:
            if error.code != 404 or error.message == NOT_SERVED:
                raise  # a 404 for the object: the garbage collector was first
        self._api.create(collection, want.body())
        log.info("%s made again with minMember %d: the one there was made for a former %s of that name (owner %s)",
                 where, want.min_member, want.owner["kind"], ", ".join(map(str, old_owners)) or "none, orphaned")
        return "recreated"


def _stale(want: DesiredPodGroup, existing: Mapping[str, Any]) -> bool:
    """Made by Placer for a former workload of this kind and name: Placer's label, and owner references that
    are all to this kind and name with another uid, or none (orphaned when that workload was deleted)."""
    metadata = as_map(existing.get("metadata"))
    if as_map(metadata.get("labels")).get(MANAGED_BY_LABEL) != MANAGED_BY:
        return False
    references = metadata.get("ownerReferences") or []
    return all(isinstance(ref, dict) and ref.get("kind") == want.owner["kind"] and ref.get("name") == want.owner["name"]
               and ref.get("uid") != want.owner["uid"] for ref in references)


def _as_wanted(want: DesiredPodGroup, obj: Mapping[str, Any] | None) -> bool:
    """Whether a PodGroup is what the workload wants: Placer's, for it, of its size, not being deleted."""
    if obj is None or as_map(obj.get("metadata")).get("deletionTimestamp"):
        return False
    return want.made_by_placer(obj) and as_map(obj.get("spec")).get("minMember") == want.min_member


class WhenServed(Reflector):
    """The PodGroup watch, started once their API is known to be served (no 404 every backoff meanwhile)."""

    def __init__(self, served: threading.Event, *args: Any) -> None:
        super().__init__(*args)
        self._served = served

    def run(self, stop: threading.Event) -> None:
        while not self._served.wait(1.0):
            if stop.is_set():
                return
        super().run(stop)


class _PodGroupEvents:
    """The sink of the PodGroup watch: tells the keeper what happened to each PodGroup."""

    def __init__(self, keeper: PodGroupKeeper) -> None:
        self._keeper = keeper

    def keep(self, name: str, obj: Mapping[str, Any]) -> Any:
        return obj

    def replace(self, store: Mapping[str, Any]) -> None:
        self._keeper.pod_groups_listed(store)

    def upsert(self, name: str, obj: Mapping[str, Any]) -> None:
        self._keeper.pod_group_seen(name, obj)

    def remove(self, name: str) -> None:
        self._keeper.pod_group_seen(name, None, deleted=True)


class _MarkedWorkloads:
    """The sink of one kind's label-filtered watch: what each marked workload wants."""

    def __init__(self, keeper: PodGroupKeeper, kind: WorkloadKind) -> None:
        self._keeper = keeper
        self._kind = kind

    def keep(self, name: str, obj: Mapping[str, Any]) -> Any:
        return obj

    def replace(self, store: Mapping[str, Any]) -> None:
        self._keeper.replace(self._kind, store)

    def upsert(self, name: str, obj: Mapping[str, Any]) -> None:
        self._keeper.want(f"{self._kind.kind}/{name}", self._kind, obj)

    def remove(self, name: str) -> None:
        self._keeper.want(f"{self._kind.kind}/{name}", self._kind, None)
