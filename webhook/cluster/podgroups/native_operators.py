"""The controller keeps the kube-scheduler PodGroups of operator resources marked for native gangs.

What it keeps comes from what it watches, never from an admission: per operator kind Placer knows
(`webhook.gang.native_operators.SHAPES`), a label-filtered watch (`placer.dev/pod-group`) of the resources an
admission marked, across namespaces. Each marked resource wants its PodGroups (`marked_groups`: one per
JobSet child Job, else one), each owned by the resource (its controller owner reference: the garbage
collector deletes them with it), `minCount` the gang's size. Making one so is `NativePodGroups.ensure`, as
for the built-in workloads: created when absent (409 from another replica is the same PodGroup: the names
are deterministic), `minCount` kept where the version lets it change, a PodGroup left by an earlier resource
of the same name deleted and made again.

An operator's CRD may be missing (no JobSet installed): its watch starts only once the API server serves the
resource, asked of discovery once a minute (`GET /apis/<group>/<version>`), so a cluster without an operator
costs one GET a minute and no errors in the log.

Write load: a resource is looked at when its watch says it changed, and each of its PodGroups is settled
once it is as wanted; nothing is read or written for resources that did not change. A JobSet scaled from 2
to 3 replicas of a replicated job costs the one new PodGroup's GET and POST.
"""

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.cluster.client.reflector import Reflector, Resource
from webhook.cluster.podgroups.native_gang import NativePodGroups
from webhook.gang.native import NATIVE
from webhook.gang.native_operators import SHAPES, marked_groups
from webhook.gang.pod_groups import POD_GROUP_LABEL, DesiredPodGroup
from webhook.support.typing import as_map
from webhook.workloads import WorkloadKind, WorkloadTable

log = logging.getLogger(__name__)

RECHECK_SECONDS = 60.0
RETRY_SECONDS = 5.0
_SETTLED = frozenset({"created", "updated", "unchanged", "foreign"})


def desired_groups(kind: WorkloadKind, version: str, obj: Mapping[str, Any]) -> tuple[DesiredPodGroup, ...] | str:
    """The PodGroups a watched resource wants, each owned by it; or why none (for the log)."""
    metadata = as_map(obj.get("metadata"))
    name, namespace, uid = metadata.get("name"), metadata.get("namespace"), metadata.get("uid")
    if not all(isinstance(value, str) and value for value in (name, namespace, uid)):
        return "not a stored resource"
    groups = marked_groups(kind, dict(obj))
    if isinstance(groups, str):
        return groups
    owner = {"apiVersion": f"{kind.group}/{version}", "kind": kind.kind, "name": name, "uid": uid,
             "controller": True}
    return tuple(DesiredPodGroup(str(namespace), group, size, owner, NATIVE) for group, size in groups)


class OperatorPodGroups:
    """Keeps the PodGroups of marked operator resources (reconciled by the Lease holder only)."""

    def __init__(
        self,
        api: KubeApi,
        table: WorkloadTable,
        *,
        native_version: Callable[[], str | None],
        wake: Callable[[], None] = lambda: None,
        observe: Callable[[str], None] = lambda outcome: None,
        monotonic: Callable[[], float] = time.monotonic,
        retry: float = RETRY_SECONDS,
        recheck: float = RECHECK_SECONDS,
    ) -> None:
        self._native_version = native_version
        self._native = NativePodGroups(api, retry=retry)
        self._wake = wake
        self._observe = observe
        self._monotonic = monotonic
        self._retry = retry
        self._lock = threading.Lock()
        self._desired: dict[str, tuple[DesiredPodGroup, ...]] = {}
        """Per marked resource (`Kind/namespace/name`), the PodGroups it wants."""
        self._settled: dict[tuple[str, str], DesiredPodGroup] = {}
        """Per (resource, PodGroup name), what that PodGroup was last made to be (or found to be another's)."""
        self._retry_at: dict[tuple[str, str], float] = {}
        self.reflectors: list[WhenResourceServed] = []
        for (group, kind_name) in SHAPES:
            kind = table.lookup(group, kind_name)
            if kind is None:
                continue
            self.reflectors.append(WhenResourceServed(api, kind, self, recheck=recheck))

    @property
    def wanted(self) -> int:
        """PodGroups the marked resources want now."""
        with self._lock:
            return sum(len(groups) for groups in self._desired.values())

    def want(self, key: str, kind: WorkloadKind, version: str, obj: Mapping[str, Any] | None) -> None:
        """A marked resource appeared, changed (obj) or went (None); from its watch thread."""
        desired = desired_groups(kind, version, obj) if obj is not None else "deleted"
        with self._lock:
            if isinstance(desired, tuple) and desired:
                if self._desired.get(key) == desired:
                    return
                self._desired[key] = desired
            elif self._desired.pop(key, None) is None:
                return
        self._wake()

    def replace(self, kind: WorkloadKind, version: str, objects: Mapping[str, Mapping[str, Any]]) -> None:
        prefix = f"{kind.kind}/"
        with self._lock:
            for key in [key for key in self._desired if key.startswith(prefix)]:
                del self._desired[key]
        for name, obj in objects.items():
            self.want(prefix + name, kind, version, obj)
        self._wake()

    def reconcile(self) -> None:
        """Make every wanted PodGroup so, at the version served now; nothing while none is (the workers then
        admit the resources and their pods unchanged, and the policy's status says so)."""
        now = self._monotonic()
        with self._lock:
            desired = {(key, want.name): want for key, groups in self._desired.items() for want in groups}
        for gone in set(self._settled) - set(desired):
            del self._settled[gone]  # the resource went (its PodGroups go with it) or wants fewer now
            self._retry_at.pop(gone, None)
        pending = [(slot, want) for slot, want in desired.items()
                   if self._settled.get(slot) != want and now >= self._retry_at.get(slot, 0.0)]
        version = self._native_version() if pending else None
        if not version:
            return
        for slot, want in pending:
            outcome = self._native.ensure(slot[0], want, version)
            self._observe(outcome)
            if outcome in _SETTLED:
                self._settled[slot] = want
                self._retry_at.pop(slot, None)
            else:
                self._retry_at[slot] = now + self._retry


class WhenResourceServed(Reflector):
    """The label-filtered watch of one operator kind, started once the API server serves its resource."""

    def __init__(self, api: KubeApi, kind: WorkloadKind, keeper: OperatorPodGroups, *, recheck: float) -> None:
        self._api_client = api
        self._operator_kind = kind
        self._keeper = keeper
        self.recheck = recheck
        """Seconds between two discovery reads while the resource is not served."""
        self.version: str | None = None
        first = kind.versions[0]
        super().__init__(api, self._collection(first), _MarkedResources(keeper, kind, first))

    def _collection(self, version: str) -> Resource:
        kind = self._operator_kind
        return Resource(f"/apis/{kind.group}/{version}/{kind.resource}", kind.kind, namespaced=True,
                        label_selector=POD_GROUP_LABEL)

    def served_version(self) -> str | None:
        """The first version of the kind the API server serves its resource at, None when none is."""
        kind = self._operator_kind
        for version in kind.versions:
            try:
                listing = self._api_client.get(f"/apis/{kind.group}/{version}")
            except ApiError as error:
                if error.code != 404:
                    raise
                continue
            resources = listing.get("resources") if isinstance(listing, dict) else None
            if any(isinstance(item, dict) and item.get("name") == kind.resource for item in resources or []):
                return version
        return None

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                version = self.served_version()
            except (ApiError, TransportError) as error:
                if stop.is_set():
                    return  # stopping: nothing is logged after the stop (`Reflector.run`)
                log.warning("%s: discovery failed (%s); asking again in %.0fs", self.kind, error, self.recheck)
                version = None
            if version is not None:
                self.version = version
                # Nothing was read yet: start afresh on the collection of the version served (an MPIJob of
                # mpi-operator is kubeflow.org/v2beta1, the training operator's v1).
                super().__init__(self._api_client, self._collection(version),
                                 _MarkedResources(self._keeper, self._operator_kind, version))
                log.info("%s served (%s/%s): watching the ones marked for native gangs", self.kind,
                         self._operator_kind.group, version)
                super().run(stop)
                return
            stop.wait(self.recheck)


class _MarkedResources:
    """The sink of one operator kind's label-filtered watch: what each marked resource wants."""

    def __init__(self, keeper: OperatorPodGroups, kind: WorkloadKind, version: str) -> None:
        self._keeper = keeper
        self._kind = kind
        self._version = version

    def keep(self, name: str, obj: Mapping[str, Any]) -> Any:
        return obj

    def replace(self, store: Mapping[str, Any]) -> None:
        self._keeper.replace(self._kind, self._version, store)

    def upsert(self, name: str, obj: Mapping[str, Any]) -> None:
        self._keeper.want(f"{self._kind.kind}/{name}", self._kind, self._version, obj)

    def remove(self, name: str) -> None:
        self._keeper.want(f"{self._kind.kind}/{name}", self._kind, self._version, None)
