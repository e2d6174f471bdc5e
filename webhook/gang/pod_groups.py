"""The PodGroup a coscheduling gang needs (scheduler-plugins `scheduling.x-k8s.io/v1alpha1`), made by Placer.

With the `coscheduling` flavour every member pod carries `scheduling.x-k8s.io/pod-group: <group>`, and the
scheduler holds them until a PodGroup of that name with `spec.minMember` exists in their namespace. When a
rule says `createPodGroup: true`, the admission marks the workload itself (its own metadata, never its pod
template, so nothing rolls out): the label `placer.dev/pod-group: <group>`, and, when the rule fixes the size
with `minAvailable`, the annotation `placer.dev/pod-group-min-member`. The controller watches the marked
workloads (a label-filtered watch) and keeps one PodGroup per workload: created owned by it (garbage
collected with it), `minMember` following the workload's size as it is scaled. Admission stays free of
side effects; the PodGroup is the controller's.

The native flavour (`scheduler: native`, `webhook.gang.native`) is marked the same way plus the annotation
`placer.dev/pod-group-api: native`, and its PodGroup is kube-scheduler's (`scheduling.k8s.io`, at the version
the API server serves) with `spec.schedulingPolicy.gang.minCount`.

For coscheduling only the built-in controllers are marked: the operators Placer knows (Kubeflow's training
operator, KubeRay, Spark, JobSet) create their own PodGroups when set up for coscheduling, and two writers
would fight. For native gangs the operator resources are marked too (`webhook.gang.native_operators`); their
PodGroups are kept by `webhook.cluster.podgroups.native_operators`.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.gang.native import NATIVE, POD_GROUP_API_ANNOTATION, pod_group_body, pods_still_to_run
from webhook.support.names import dns1123_subdomain_error
from webhook.support.typing import JSONObject, as_map
from webhook.workloads import WorkloadKind

POD_GROUP_LABEL = "placer.dev/pod-group"
MIN_MEMBER_ANNOTATION = "placer.dev/pod-group-min-member"
"""`POD_GROUP_API_ANNOTATION` (`webhook.gang.native`): which PodGroup the workload wants: absent for
scheduler-plugins' (coscheduling), `native` for kube-scheduler's, `job` for the one the Job controller keeps."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "placer"
API_VERSION = "scheduling.x-k8s.io/v1alpha1"
OWNER_KINDS = (("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet"), ("batch", "Job"),
               ("batch", "CronJob"))
"""Workload kinds that own the PodGroup of their gang (group, kind)."""


def owns_pod_groups(kind: WorkloadKind) -> bool:
    return (kind.group, kind.kind) in OWNER_KINDS


@dataclass(frozen=True, slots=True)
class DesiredPodGroup:
    """One PodGroup as the marked workload wants it."""

    namespace: str
    name: str
    min_member: int
    owner: JSONObject
    """The ownerReference to the workload (apiVersion, kind, name, uid, controller)."""
    flavour: str = "coscheduling"
    """`coscheduling` (scheduler-plugins' PodGroup) or `native` (kube-scheduler's, `webhook.gang.native`)."""

    def body(self, native_version: str = "") -> JSONObject:
        """The PodGroup to create (a native one at `native_version`)."""
        if self.flavour == NATIVE:
            return pod_group_body(native_version, self.namespace, self.name, min_count=self.min_member,
                                  owner=self.owner, labels={MANAGED_BY_LABEL: MANAGED_BY})
        return {
            "apiVersion": API_VERSION,
            "kind": "PodGroup",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY},
                "ownerReferences": [dict(self.owner)],
            },
            "spec": {"minMember": self.min_member},
        }

    def made_by_placer(self, existing: Mapping[str, Any]) -> bool:
        """A PodGroup Placer made for this workload: its label, and an owner reference to this workload's uid.
        Anything else was made by someone else and is left alone."""
        metadata = as_map(existing.get("metadata"))
        if as_map(metadata.get("labels")).get(MANAGED_BY_LABEL) != MANAGED_BY:
            return False
        return any(isinstance(ref, dict) and ref.get("uid") == self.owner["uid"]
                   for ref in metadata.get("ownerReferences") or [])


def desired_pod_group(kind: WorkloadKind, obj: Mapping[str, Any]) -> DesiredPodGroup | str:
    """The PodGroup a marked workload wants, or why it wants none now (a reason for the log)."""
    metadata = as_map(obj.get("metadata"))
    group = as_map(metadata.get("labels")).get(POD_GROUP_LABEL)
    name, namespace, uid = metadata.get("name"), metadata.get("namespace"), metadata.get("uid")
    if not all(isinstance(value, str) and value for value in (group, name, namespace, uid)):
        return "not a marked workload"
    problem = dns1123_subdomain_error(str(group))
    if problem:
        return f"group {group} cannot name a PodGroup: {problem}"
    fixed = as_map(metadata.get("annotations")).get(MIN_MEMBER_ANNOTATION)
    size = int(fixed) if isinstance(fixed, str) and fixed.isdigit() else kind.members(dict(obj))
    flavour = NATIVE if as_map(metadata.get("annotations")).get(POD_GROUP_API_ANNOTATION) == NATIVE else "coscheduling"
    if size is not None and flavour == NATIVE:  # finished pods leave kube-scheduler's count
        size = pods_still_to_run(kind.kind, obj, size)
    if size is None or size < 1:
        return f"{kind.kind} runs no pods now: no PodGroup needed"
    owner = {"apiVersion": f"{kind.group}/{kind.versions[0]}", "kind": kind.kind, "name": name, "uid": uid,
             "controller": True}
    return DesiredPodGroup(str(namespace), str(group), size, owner, flavour)
