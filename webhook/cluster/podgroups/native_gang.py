"""The controller's side of `scheduler: native`: which PodGroup version is served, and keeping one PodGroup.

Which version: discovery (`ServedApis`) says which `scheduling.k8s.io` versions serve the kind `PodGroup`;
Placer writes the best it knows (`webhook.gang.native.VERSIONS`: `v1beta1` on 1.37, `v1alpha2` on 1.36).
The controller publishes it with the cluster state, so workers admit pods unchanged where none is served
(with the gates off the API server silently drops `spec.schedulingGroup` and `/apis/scheduling.k8s.io/v1alpha2`
is 404, as captured from kube-apiserver v1.36.2), and the policy's status says so (`NOT_SERVED_REASON`).

Keeping: the PodGroup is created when absent (a 409 from another replica that created it first is the same
PodGroup: deterministic names), its `minCount` follows the gang's size where the version lets it change
(`v1beta1`; `v1alpha2` refuses with 422 "field is immutable", so there the first size stays and the log says
so once), and a PodGroup of that name left by an earlier workload of the same name (Placer's label, and an
owner of the same kind and name with another uid, or none left) is deleted (preconditions on its uid and
resourceVersion), waited for while its finalizer `scheduling.k8s.io/podgroup-protection` holds it, then made
again for the new workload.
"""

import logging
from collections.abc import Mapping
from typing import Any, Literal

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.cluster.client.discovery import ServedApis
from webhook.engine.configuration import GANG_ACTION, Finding
from webhook.gang.native import (
    API_GROUP,
    GATES_HINT,
    MUTABLE_MIN_COUNT,
    NATIVE,
    NOT_SERVED,
    VERSIONS,
    min_count_of,
    with_min_count,
)
from webhook.gang.pod_groups import MANAGED_BY, MANAGED_BY_LABEL, DesiredPodGroup
from webhook.policy.model import Policy
from webhook.support.typing import as_map

log = logging.getLogger(__name__)

NOT_SERVED_REASON = "PodGroupAPINotServed"
Outcome = Literal["created", "updated", "unchanged", "foreign", "conflict", "error", "not-served", "waiting"]


def native_version_of(served: ServedApis) -> str | None:
    """The PodGroup version to write: the first of `VERSIONS` serving `PodGroup`; `NOT_SERVED` when none
    does; None when discovery has not been read (nothing is known, nothing is said)."""
    if not served.known:
        return None
    group = served.groups.get(API_GROUP)
    for version in VERSIONS:
        if group is not None and "PodGroup" in group.kinds.get(version, {}):
            return version
    return NOT_SERVED


def native_gang_rules(policy: Policy) -> list[str]:
    return [rule.name for rule in policy.rules
            if rule.action.name == GANG_ACTION and (rule.parameters.get("scheduler") == NATIVE
                                                    or rule.raw_parameters.get("scheduler") == NATIVE)]


def native_gang_not_served(policy: Policy) -> list[Finding]:
    """What the policy's status says when the API server serves no PodGroup API its native rules need."""
    return [
        Finding(name, NOT_SERVED_REASON,
                f"rule {policy.name}/{name}: native gang: the API server serves no PodGroup API ({API_GROUP} "
                f"{' or '.join(VERSIONS)}), so pods are admitted unchanged and schedule one by one; {GATES_HINT}")
        for name in native_gang_rules(policy)
    ]


class NativePodGroups:
    """Makes one wanted native PodGroup so (from `PodGroupKeeper.reconcile`, the Lease holder only)."""

    def __init__(self, api: KubeApi, *, retry: float) -> None:
        self._api = api
        self._retry = retry
        self._immutable_said: set[tuple[str, str, int]] = set()

    def ensure(self, key: str, want: DesiredPodGroup, version: str) -> Outcome:
        collection = f"/apis/{API_GROUP}/{version}/namespaces/{want.namespace}/podgroups"
        path = f"{collection}/{want.name}"
        where = f"PodGroup {want.namespace}/{want.name} ({API_GROUP}/{version}) for {key}"
        try:
            try:
                existing = self._api.get(path)
            except ApiError as error:
                if error.code != 404:
                    raise
                return self._create(collection, want, version, where)
            return self._keep(path, existing, want, version, where)
        except ApiError as error:
            outcome: Outcome = "conflict" if error.code == 409 else "error"
            log.warning("%s not written (%s); trying again in %.0fs", where, error, self._retry)
            return outcome
        except TransportError as error:
            log.warning("%s not written (%s); trying again in %.0fs", where, error, self._retry)
            return "error"

    def _create(self, collection: str, want: DesiredPodGroup, version: str, where: str) -> Outcome:
        try:
            self._api.create(collection, want.body(version))
        except ApiError as error:
            if error.code == 409:  # another replica (or the same one, retried) made it just now
                return "conflict"
            if error.code == 404:
                log.warning("%s: PodGroups are not served any more; the pods wait until they are", where)
                return "not-served"
            raise
        log.info("%s created with minCount %d", where, want.min_member)
        return "created"

    def _keep(self, path: str, existing: Mapping[str, Any], want: DesiredPodGroup, version: str,
              where: str) -> Outcome:
        metadata = as_map(existing.get("metadata"))
        if metadata.get("deletionTimestamp"):
            log.info("%s: the PodGroup of that name is being deleted; made again once it is gone", where)
            return "waiting"
        if not want.made_by_placer(existing):
            if as_map(metadata.get("labels")).get(MANAGED_BY_LABEL) == MANAGED_BY and _stale(metadata, want):
                # An earlier workload's of that name: deleted unless it changed meanwhile (preconditions)
                self._api.delete(path, {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {
                    "uid": metadata.get("uid"), "resourceVersion": metadata.get("resourceVersion")}})
                log.info("%s: the PodGroup of an earlier workload of that name deleted; made again once it is "
                         "gone", where)
                return "waiting"
            log.warning("%s: a PodGroup of that name exists that Placer did not make for this workload; left "
                        "alone (its minCount stays %s)", where, min_count_of(existing))
            return "foreign"
        current = min_count_of(existing)
        if current == want.min_member:
            return "unchanged"
        if version not in MUTABLE_MIN_COUNT:
            said = (want.namespace, want.name, want.min_member)
            if said not in self._immutable_said:
                self._immutable_said.add(said)
                log.warning("%s: the gang is %d now, but minCount is immutable in %s: it stays %s until the "
                            "workload is re-created", where, want.min_member, version, current)
            return "unchanged"
        self._api.replace(path, with_min_count(existing, want.min_member))
        log.info("%s: minCount %s -> %d", where, current, want.min_member)
        return "updated"


def _stale(metadata: Mapping[str, Any], want: DesiredPodGroup) -> bool:
    """Placer's PodGroup of an earlier workload of the same name: owned by the same kind and name with another
    uid, or by nothing (a batch/v1 Job deleted through the API orphans its dependents by default,
    `DefaultGarbageCollectionPolicy` in kubernetes/kubernetes pkg/registry/batch/job/strategy.go, and the
    garbage collector then removes their owner references)."""
    references = [ref for ref in metadata.get("ownerReferences") or [] if isinstance(ref, dict)]
    return not references or any(
        ref.get("kind") == want.owner["kind"] and ref.get("name") == want.owner["name"]
        and ref.get("uid") != want.owner["uid"] for ref in references)
