"""kube-scheduler's own gang scheduling (`scheduler: native`): the PodGroup a Pod names in `spec.schedulingGroup`.

Since Kubernetes 1.36 kube-scheduler holds the pods of a gang itself. A Pod names its group in
`spec.schedulingGroup.podGroupName`, and the `GangScheduling` plugin keeps it Pending (no event, no condition)
until a `PodGroup` of that name with `spec.schedulingPolicy.gang.minCount` exists in its namespace and that
many members can be placed at once. Sources (kubernetes/kubernetes):

- `staging/src/k8s.io/api/core/v1/types.go`, `PodSpec.SchedulingGroup` / `PodSchedulingGroup`: "This field is
  immutable", and "the group object referenced by this field may not exist at the time the Pod is created".
  A PodTemplateSpec holds a PodSpec, so a workload's template may carry it (the v1.36.0 published schema of
  `PodTemplateSpec.spec` is `core.v1.PodSpec`, which has `schedulingGroup`).
- `staging/src/k8s.io/api/scheduling/v1alpha2/types.go` (1.36): `PodGroup`, `PodGroupSpec.SchedulingPolicy`
  ("This field is immutable"; a `minCount` update is refused with 422 `field is immutable`, captured from
  kube-apiserver v1.36.2), `GangSchedulingPolicy.MinCount` (required, positive). `PodGroupTemplateRef`, the
  link to a `Workload`, is optional: a standalone PodGroup is enough, so Placer writes no Workload.
- `staging/src/k8s.io/api/scheduling/v1beta1/types.go` (1.37): the same PodGroup, `minCount` "mutable to
  support workload scaling", `workloadRef` optional. `CompositePodGroup` exists only as `v1alpha3` in 1.37
  (kubernetes-validate's v1.37.0 schemas hold no v1beta1 CompositePodGroup object), so Placer does not use it.

The Job controller's own integration (KEP-5547; feature gate `WorkloadWithJob`, alpha in 1.36 and 1.37:
`pkg/features/kube_features.go` of v1.36.2): kubernetes/kubernetes `pkg/controller/job`,
`shouldManageWorkloadForJob`, makes a Workload and a PodGroup only for a Job whose template names no
`schedulingGroup` (1.36: Indexed, parallelism = completions > 1), so a Job whose template Placer gave the
field is left to Placer, never to both. In 1.37 a Job asks for it with `spec.scheduling`, and a parent
controller hands a Job its template with the annotation `scheduling.k8s.io/group-template-name`: Placer leaves
such a Job, and any template or Pod that already names a scheduling group, as it is (`not_for_native`); where
the Job controller keeps Jobs' gangs Placer writes that field itself (`job_field_stalls`, `job_scheduling`).
"""

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.support.names import dns1123_subdomain_error
from webhook.support.typing import JSONObject, as_map

NATIVE = "native"
API_GROUP = "scheduling.k8s.io"
IMMUTABLE_MIN_COUNT = frozenset({"v1alpha1", "v1alpha2"})
"""Versions whose `spec.schedulingPolicy` may not change after creation (1.36's v1alpha2: 422 `field is
immutable`, captured from kube-apiserver v1.36.2). From 1.37 `minCount` is "mutable to support workload
scaling" (`GangSchedulingPolicy.MinCount` in the v1beta1 published schema)."""
NO_PODGROUP_API = f"the API server serves no PodGroup API (no version of {API_GROUP} serves PodGroup)"
MINIMUM_MINOR = 36
"""The first Kubernetes minor with a PodGroup API (`scheduling.k8s.io/v1alpha2`, behind feature gates; 1.35's
`v1alpha1` has Workloads only: KEP-4671, the "Workload API" concept page)."""
JOB_FIELD_MINOR = 37
"""The first minor whose batch/v1 JobSpec has `scheduling` (alpha, gate WorkloadWithJob)."""
_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")
_STABILITY = {"alpha": 0, "beta": 1, None: 2}
NOT_SERVED = ""
"""The native version when the API server is known to serve no PodGroup version Placer writes."""
GATES_HINT = ("on 1.36: feature gates GenericWorkload and GangScheduling on kube-apiserver and kube-scheduler, "
              "and --runtime-config=scheduling.k8s.io/v1alpha2=true")
POD_GROUP_API_ANNOTATION = "placer.dev/pod-group-api"
RUN_ANNOTATION = "placer.dev/native-pod-group-per"
JOB_SCHEDULING_ANNOTATION = "scheduling.k8s.io/group-template-name"
"""KEP-5547: a parent controller (or the user) names the Workload template the Job controller builds from."""
MAX_NAME = 253
HASH_CHARS = 8


def newest_version(versions: Iterable[str]) -> str | None:
    """The newest of Kubernetes API versions by the API's own priority: GA before beta before alpha, then the
    higher number (`v1` > `v1beta2` > `v1beta1` > `v1alpha3`; kubernetes/kubernetes
    `staging/src/k8s.io/apimachinery/pkg/version/helpers.go`, `CompareKubeAwareVersionStrings`). So the version
    GA brings (`v1`, planned for 1.38) is written as soon as the API server serves it, without a new Placer."""
    ranked = []
    for version in versions:
        match = _VERSION.match(version)
        if match:
            major, stability, minor = match.groups()
            ranked.append(((_STABILITY[stability], int(major), int(minor or 0)), version))
    return max(ranked)[1] if ranked else None


def served_from(kubernetes: str) -> bool:
    """Whether a Kubernetes minor (`1.35`) can serve a PodGroup API at all: the offline tools' target below
    that leaves native gang rules changing nothing, as the webhook does where none is served."""
    major, _, minor = kubernetes.partition(".")
    return (int(major), int(minor)) >= (1, MINIMUM_MINOR) if major.isdigit() and minor.isdigit() else True


def unavailable_on(kubernetes: str) -> str:
    return (f"Kubernetes {kubernetes} has no PodGroup API (scheduling.k8s.io serves PodGroups from "
            f"1.{MINIMUM_MINOR}, with feature gates): the rule changes nothing there; the webhook admits its "
            "workloads unchanged")


def min_count_mutable(version: str) -> bool:
    return version not in IMMUTABLE_MIN_COUNT


def pod_group_name(group: str) -> str:
    """`group` as a PodGroup name (a DNS subdomain, what `podGroupName` must be): as it is when valid, else
    lower-cased with other characters turned into '-' and a hash of the original appended, so two groups that
    differ only in case or punctuation stay two."""
    if dns1123_subdomain_error(group) is None:
        return group
    digest = hashlib.sha256(group.encode()).hexdigest()[:HASH_CHARS]
    cleaned = "".join(c if c.isalnum() or c in "-." else "-" for c in group.lower())
    prefix = cleaned[: MAX_NAME - HASH_CHARS - 1].strip("-.")
    return f"{prefix}-{digest}" if prefix else digest


def scheduling_group(template: Mapping[str, Any]) -> str | None:
    """The group a pod template or Pod already names (`spec.schedulingGroup.podGroupName`), if any."""
    group = as_map(as_map(template.get("spec")).get("schedulingGroup"))
    name = group.get("podGroupName")
    return name if isinstance(name, str) and name else ("(set)" if group else None)


JOB_FIELD = "job"
"""`placer.dev/pod-group-api` of a Job whose gang the Job controller keeps from the Job's own
`spec.scheduling`: Placer's controller only follows its `minCount` (`pods_still_to_run`), never a PodGroup."""

def not_for_native(kind: str, obj: Mapping[str, Any]) -> str | None:
    """Why the workload's pods must not name a group Placer keeps, or None: its own controller keeps its
    Workload and PodGroup, or it starts its pods one at a time (a StatefulSet's `OrderedReady` creates each
    pod once the one before is Ready, `apps/v1` StatefulSetSpec.PodManagementPolicy, so a gang of more than
    one would wait forever)."""
    if kind == "StatefulSet":
        spec = as_map(obj.get("spec"))
        replicas = spec.get("replicas", 1)
        if spec.get("podManagementPolicy", "OrderedReady") != "Parallel" and isinstance(replicas, int) and replicas > 1:
            return ("podManagementPolicy OrderedReady starts each pod once the one before is Ready, so a gang would "
                    "wait forever; set podManagementPolicy: Parallel")
        return None
    ours = as_map(as_map(obj.get("metadata")).get("annotations")).get(POD_GROUP_API_ANNOTATION) == JOB_FIELD
    if kind == "CronJob":
        obj, kind = as_map(as_map(obj.get("spec")).get("jobTemplate")), "Job"
    if kind != "Job":
        return None
    spec = as_map(obj.get("spec"))
    if spec.get("scheduling") and not ours:  # Placer's own `spec.scheduling` (`JOB_FIELD`) stays Placer's
        return "the Job controller keeps its Workload and PodGroup (spec.scheduling, feature gate WorkloadWithJob)"
    annotations = as_map(as_map(obj.get("metadata")).get("annotations"))
    if annotations.get(JOB_SCHEDULING_ANNOTATION):
        return (f"the Job names a Workload template ({JOB_SCHEDULING_ANNOTATION}): its controllers keep its "
                "PodGroup")
    return None


JOB_SCHEDULING_MARK = ("jobScheduling", "minCount")
"""The workload mark (`ActionContext.workload_marks`) that becomes the Job's `spec.scheduling` (a CronJob's
job template's) in the patch."""


def job_field_stalls(spec: Mapping[str, Any] | None) -> str | None:
    """Why the Job controller's own gang of a Job (its `spec.scheduling`) could wait forever, or None: a pod it
    makes after others finished (a failed pod's replacement, the next completion) would never see `minCount`
    members again, and that `minCount` stays the Job's (`webhook.gang.native_lifecycle`). None only for a Job
    that makes all its pods at once and no pod after: `backoffLimit` 0 (a failure fails the Job; the API
    server's default is 6), no `backoffLimitPerIndex`, no `podFailurePolicy` rule that `Ignore`s a failure
    (the pod is replaced), and no more `completions` than `parallelism` (batch/v1 `JobSpec`)."""
    spec = as_map(spec)
    backoff = spec.get("backoffLimit", 6)
    if backoff != 0:
        return f"backoffLimit {backoff} replaces a failed pod, also after the others finished"
    if spec.get("backoffLimitPerIndex") is not None:
        return "backoffLimitPerIndex replaces a failed index, also after the others finished"
    rules = as_map(spec.get("podFailurePolicy")).get("rules")
    if any(isinstance(rule, dict) and rule.get("action") == "Ignore" for rule in rules or []):
        return "a podFailurePolicy rule with action Ignore replaces the pod, also after the others finished"
    completions, parallelism = spec.get("completions"), spec.get("parallelism", 1)
    if isinstance(completions, int) and isinstance(parallelism, int) and completions > parallelism:
        return f"completions {completions} beyond parallelism {parallelism} start new pods as others finish"
    return None


def job_scheduling(min_count: int) -> JSONObject:
    """A Job's `spec.scheduling` asking its controller for a gang of `min_count` (batch/v1
    `JobSchedulingConfiguration.schedulingPolicy.gang.minCount`, in the v1.37.0 published schema)."""
    return {"schedulingPolicy": {"gang": {"minCount": min_count}}}


def set_scheduling_group(template: JSONObject, name: str) -> bool:
    """Name the group on the template (or Pod); a new map, so the request's object is never changed."""
    spec = template.get("spec")
    if not isinstance(spec, dict):
        spec = template["spec"] = {}
    if as_map(spec.get("schedulingGroup")).get("podGroupName") == name:
        return False
    spec["schedulingGroup"] = {"podGroupName": name}
    return True


def pod_group_body(version: str, namespace: str, name: str, *, min_count: int, owner: Mapping[str, Any],
                   labels: Mapping[str, str]) -> JSONObject:
    """A PodGroup of `version` for a gang of `min_count`, owned by the workload (garbage-collected with it)."""
    return {
        "apiVersion": f"{API_GROUP}/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels), "ownerReferences": [dict(owner)]},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def min_count_of(pod_group: Mapping[str, Any]) -> Any:
    return as_map(as_map(as_map(pod_group.get("spec")).get("schedulingPolicy")).get("gang")).get("minCount")


def with_min_count(pod_group: Mapping[str, Any], min_count: int) -> JSONObject:
    """The same PodGroup with another `minCount` (for versions where it may change)."""
    spec = as_map(pod_group.get("spec"))
    policy = as_map(spec.get("schedulingPolicy"))
    gang = {**as_map(policy.get("gang")), "minCount": min_count}
    return {**pod_group, "spec": {**spec, "schedulingPolicy": {**policy, "gang": gang}}}


def pods_still_to_run(kind: str, obj: Mapping[str, Any], size: int) -> int:
    """The most members a gang of `size` can still count: for a Job, the pods it may still make and run
    (`completions` - `status.succeeded`, or none more once any pod succeeded when `completions` is unset: the
    Job then makes no new pod, kubernetes/kubernetes `pkg/controller/job/job_controller.go`, `manageJob`); the
    whole `size` for the other kinds, whose pods run until they are replaced or scaled away."""
    if kind != "Job":
        return size
    spec, status = as_map(obj.get("spec")), as_map(obj.get("status"))
    succeeded = status.get("succeeded")
    done = succeeded if isinstance(succeeded, int) and not isinstance(succeeded, bool) and succeeded > 0 else 0
    if done == 0:
        return size
    completions = spec.get("completions")
    if not isinstance(completions, int) or isinstance(completions, bool):
        return min(size, _active(status))
    return max(0, min(size, completions - done))


def _active(status: Mapping[str, Any]) -> int:
    active = status.get("active")
    return active if isinstance(active, int) and not isinstance(active, bool) else 0
