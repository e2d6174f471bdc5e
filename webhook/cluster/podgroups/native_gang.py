"""The controller's side of `scheduler: native`: which PodGroup version is served, and keeping one PodGroup.

Which version: discovery (`ServedApis`) says which `scheduling.k8s.io` versions serve the kind `PodGroup`;
Placer writes the newest of them (`webhook.gang.native.newest_version`: `v1alpha2` on 1.36, `v1beta1` on
1.37, and the GA `v1` once an API server serves it, with no new release of Placer).
The controller publishes it with the cluster state, so workers admit pods unchanged where none is served
(with the gates off the API server silently drops `spec.schedulingGroup` and `/apis/scheduling.k8s.io/v1alpha2`
is 404, as captured from kube-apiserver v1.36.2), and the policy's status says so (`NOT_SERVED_REASON`).

Keeping: the PodGroup is created when absent (a 409 from another replica that created it first is the same
PodGroup: deterministic names), its `minCount` follows the gang's size (a scale, or what a Job can still
run: `webhook.gang.native.pods_still_to_run`). From `v1beta1` on it is updated in place. `v1alpha2` refuses
any change (422 "field is immutable"): a larger gang keeps the first size there (the new pods join a group
already placed, so they bind as they come: `Permit` counts the placed ones), but a smaller one would leave
every later pod waiting for members that are gone, so that PodGroup is deleted and made again with the new
`minCount`, as KubeRay's own Workload API integration does on `v1alpha2` (ray-project/kuberay
`batchscheduler/kubernetes-was/v1alpha2`, `syncSchedulingResources`). Its finalizer
`scheduling.k8s.io/podgroup-protection` is released for that (the protection controller keeps it while any
pod naming the group is active: `pkg/controller/scheduling/podgroupprotection`, `hasActivePods`, and the
running members name it); pods waiting meanwhile are queued again when it reappears (the plugin's PodGroup
add event). And a PodGroup of that name left by an earlier workload of the same name (Placer's label, and an
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
    JOB_FIELD_MINOR,
    NATIVE,
    NO_PODGROUP_API,
    NOT_SERVED,
    min_count_mutable,
    min_count_of,
    newest_version,
    with_min_count,
)
from webhook.gang.pod_groups import MANAGED_BY, MANAGED_BY_LABEL, DesiredPodGroup
from webhook.policy.model import Policy
from webhook.support.typing import as_map

log = logging.getLogger(__name__)

NOT_SERVED_REASON = "PodGroupAPINotServed"
PROTECTION_FINALIZER = "scheduling.k8s.io/podgroup-protection"
"""Added to every PodGroup at its creation and kept while a pod naming it is active (captured from
kube-apiserver v1.36.2; kubernetes/kubernetes `pkg/controller/scheduling/podgroupprotection`)."""
Outcome = Literal["created", "updated", "unchanged", "foreign", "conflict", "error", "not-served", "waiting"]


def native_version_of(served: ServedApis) -> str | None:
    """The PodGroup version to write: the newest serving `PodGroup`; `NOT_SERVED` when none does; None when
    discovery has not been read (nothing is known, nothing is said)."""
    if not served.known:
        return None
    group = served.groups.get(API_GROUP)
    kinds = group.kinds if group is not None else {}
    found = newest_version(version for version, served_kinds in kinds.items() if "PodGroup" in served_kinds)
    return found if found is not None else NOT_SERVED


def job_gangs_of(served: ServedApis) -> bool:
    """Whether the Job controller keeps a Job's gang itself, from the Job's own `spec.scheduling`
    (`schedulingPolicy.gang.minCount`): the batch/v1 field exists from 1.37 (the v1.37.0 published schema of
    `JobSpec`), the API server keeps it only with the gate WorkloadWithJob (`DropDisabledFields`, kubernetes/
    kubernetes `pkg/api/job/util.go`, shared by the Job and CronJob strategies), as its `/metrics` says, and the
    Job controller then makes the Workload and PodGroup (`pkg/controller/job`, `shouldManageWorkloadForJob`).
    A gate that cannot be read is taken as off: Placer keeps the PodGroup itself, and the Job controller stands
    aside for a template naming one."""
    if not served.known or (served.major, served.minor) < (1, JOB_FIELD_MINOR):
        return False
    return served.features.get("WorkloadWithJob") is True and native_version_of(served) not in (None, NOT_SERVED)


def native_gang_rules(policy: Policy) -> list[str]:
    return [rule.name for rule in policy.rules
            if rule.action.name == GANG_ACTION and (rule.parameters.get("scheduler") == NATIVE
                                                    or rule.raw_parameters.get("scheduler") == NATIVE)]


def native_gang_not_served(policy: Policy) -> list[Finding]:
    """What the policy's status says when the API server serves no PodGroup API its native rules need."""
    return [
        Finding(name, NOT_SERVED_REASON,
                f"rule {policy.name}/{name}: native gang: {NO_PODGROUP_API}, so pods are admitted unchanged and "
                f"schedule one by one; {GATES_HINT}")
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
            if want.made_by_placer(existing):  # this workload's, deleted to be made again smaller
                self._release(path, existing)
            log.info("%s: the PodGroup of that name is being deleted; made again once it is gone", where)
            return "waiting"
        if not want.made_by_placer(existing):
            if as_map(metadata.get("labels")).get(MANAGED_BY_LABEL) == MANAGED_BY and _stale(metadata, want):
                # An earlier workload's of that name: deleted unless it changed meanwhile (preconditions)
                self._delete(path, metadata)
                log.info("%s: the PodGroup of an earlier workload of that name deleted; made again once it is "
                         "gone", where)
                return "waiting"
            log.warning("%s: a PodGroup of that name exists that Placer did not make for this workload; left "
                        "alone (its minCount stays %s)", where, min_count_of(existing))
            return "foreign"
        current = min_count_of(existing)
        if current == want.min_member:
            return "unchanged"
        if min_count_mutable(version):
            try:
                self._api.replace(path, with_min_count(existing, want.min_member))
            except ApiError as error:
                if error.code != 422:
                    raise
                log.warning("%s: minCount refused (%s); made again instead", where, error)
            else:
                log.info("%s: minCount %s -> %d", where, current, want.min_member)
                return "updated"
        if isinstance(current, int) and want.min_member > current:
            said = (want.namespace, want.name, want.min_member)
            if said not in self._immutable_said:
                self._immutable_said.add(said)
                log.info("%s: the gang is %d now; minCount stays %s (immutable in %s): the new pods join a gang "
                         "already placed", where, want.min_member, current, version)
            return "unchanged"
        released = self._delete(path, metadata)
        self._release(path, released)
        log.info("%s: minCount %s is more than the %d pods that can still run, and immutable in %s: deleted, "
                 "made again with minCount %d", where, current, want.min_member, version, want.min_member)
        return "waiting"

    def _delete(self, path: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """Delete unless it changed meanwhile (preconditions on its uid and resourceVersion); the answer is the
        object as deleting it left it (a finalizer holds it) or the Status of a deletion done."""
        return self._api.delete(path, {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {
            "uid": metadata.get("uid"), "resourceVersion": metadata.get("resourceVersion")}})

    def _release(self, path: str, existing: Mapping[str, Any]) -> None:
        """Lift the protection finalizer from Placer's own PodGroup being deleted (a PUT carrying its
        resourceVersion, so a change meanwhile is a 409 and the next round looks again)."""
        metadata = as_map(existing.get("metadata"))
        finalizers = [item for item in metadata.get("finalizers") or [] if isinstance(item, str)]
        if existing.get("kind") != "PodGroup" or PROTECTION_FINALIZER not in finalizers:
            return
        kept = [item for item in finalizers if item != PROTECTION_FINALIZER]
        self._api.replace(path, {**existing, "metadata": {**metadata, "finalizers": kept}})


def _stale(metadata: Mapping[str, Any], want: DesiredPodGroup) -> bool:
    """Placer's PodGroup of an earlier workload of the same name: owned by the same kind and name with another
    uid, or by nothing (a batch/v1 Job deleted through the API orphans its dependents by default,
    `DefaultGarbageCollectionPolicy` in kubernetes/kubernetes pkg/registry/batch/job/strategy.go, and the
    garbage collector then removes their owner references)."""
    references = [ref for ref in metadata.get("ownerReferences") or [] if isinstance(ref, dict)]
    return not references or any(
        ref.get("kind") == want.owner["kind"] and ref.get("name") == want.owner["name"]
        and ref.get("uid") != want.owner["uid"] for ref in references)
