"""`scheduler: native` for operator resources: which gangs a JobSet, Kubeflow, Ray or Spark workload holds.

An operator makes its pods itself (or through Jobs it makes), from templates of its own custom resource. Two
things stop Placer from naming the group on those templates, as it does for a Job:

- the operator decodes its resource into Go types of the `k8s.io/api` it was built with, and its CRD's schema
  is generated from them: an operator built before 1.36 knows no `spec.schedulingGroup`, so the API server
  prunes it from the resource, or the operator drops it from the pods it makes;
- a JobSet holds one gang per child Job (the `replicas` Jobs of a replicated job run apart: each is restarted
  by itself, and a gang spanning them would wait for Jobs that `dependsOn` starts later), and every child Job
  is made from the same template, so no template can name a per-Job group.

So the member template gets Placer's annotations (`GROUP_ANNOTATION`, and `PER_ANNOTATION` for per-Job
gangs), which every operator copies onto the pods it makes, and the field is set on each Pod at its own
CREATE (`member_group`, from the engine), where the API server is the one that knows the field. The group a
Pod names comes from the annotation and, per Job, from the labels JobSet puts on every pod of a child Job
(kubernetes-sigs/jobset `api/jobset/v1alpha2/jobset_types.go`: `ReplicatedJobNameKey =
"jobset.sigs.k8s.io/replicatedjob-name"`, `JobIndexKey = "jobset.sigs.k8s.io/job-index"`, "a label/annotation
set to the index of the Job replica within its parent replicatedJob", 0 to replicas-1).

The PodGroups themselves are the controller's (`webhook.cluster.podgroups.native_operators`): it watches the marked
resources and computes the same names from the resource (`wanted_groups`), each owned by the resource.

Shapes (`SHAPES`):

| Workload | Gangs | minCount |
|---|---|---|
| JobSet | one per child Job (`<group>-<replicatedJob>-<index>`) | the Job's pods (`parallelism` <= `completions`) |
| LeaderWorkerSet (once a workload row) | one per group (`<group>-<groupIndex>`) | `leaderWorkerTemplate.size` |
| PyTorchJob, TFJob, MPIJob | one per job | every replica of every type (MPI `WaitForWorkersReady`: workers) |
| RayCluster, RayJob | one per cluster: head and workers | 1 + `replicas` x `numOfHosts` (autoscaler: `minReplicas`) |
| SparkApplication | one per application | the executors (`instances`; dynamic allocation: `minExecutors`) |

Who is counted, and why, is `webhook.gang.native_members`.

A whole Ray cluster is one gang, not one per worker group: the head is what the workers join (a worker group
without its head runs nothing), and KubeRay's own gang integration makes one Volcano PodGroup for the head and
the workers together (ray-project/ray `doc/source/cluster/kubernetes/k8s-ecosystem/volcano.md`).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.gang.native import NATIVE, POD_GROUP_API_ANNOTATION, RUN_ANNOTATION, pod_group_name
from webhook.gang.native_members import counted_pods, never_counted
from webhook.gang.pod_groups import MIN_MEMBER_ANNOTATION, POD_GROUP_LABEL
from webhook.support.typing import JSONObject, as_map
from webhook.workloads import WorkloadKind, controller_reference
from webhook.workloads.builtin import job_pods
from webhook.workloads.slots import int_at, read_path

GROUP_ANNOTATION = "placer.dev/native-pod-group"
"""On an operator's member template, so on each pod it makes: the gang's PodGroup name (or its prefix)."""
PER_ANNOTATION = RUN_ANNOTATION
"""Beside `GROUP_ANNOTATION` where a resource holds several gangs: `job`, one per JobSet child Job."""
PER_JOB = "job"
PER_GROUP = "group"
PER_RUN = "run"
"""On a CronJob's job template: each run (a Job) names a PodGroup of its own at its creation
(`webhook.engine.native_pods`), kept by the controller and owned by that Job."""
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
"""kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go, `GroupIndexLabelKey`: "added to pods to
record which group this statefulset/pod belong to" (0 to replicas-1, the leader's index)."""


@dataclass(frozen=True, slots=True)
class Shape:
    """How an operator resource's pods form gangs."""

    group: str
    kind: str
    per: str | None
    """None: one gang per resource; `job`: one per child Job (JobSet); `group`: one per leader and its
    workers (LeaderWorkerSet)."""
    gangs: str
    """What a gang is, for explain."""


SHAPES: dict[tuple[str, str], Shape] = {
    (shape.group, shape.kind): shape
    for shape in (
        Shape("jobset.x-k8s.io", "JobSet", PER_JOB, "one PodGroup per child Job"),
        Shape("leaderworkerset.x-k8s.io", "LeaderWorkerSet", PER_GROUP, "one PodGroup per leader and its workers"),
        Shape("kubeflow.org", "PyTorchJob", None, "one PodGroup for every replica of the job"),
        Shape("kubeflow.org", "TFJob", None, "one PodGroup for every replica of the job"),
        Shape("kubeflow.org", "MPIJob", None, "one PodGroup for the launcher and workers that start together"),
        Shape("ray.io", "RayCluster", None, "one PodGroup for the head and every worker group"),
        Shape("ray.io", "RayJob", None, "one PodGroup for its cluster's head and every worker group"),
        Shape("sparkoperator.k8s.io", "SparkApplication", None, "one PodGroup for the executors"),
    )
}


def operator_shape(kind: WorkloadKind) -> Shape | None:
    return SHAPES.get((kind.group, kind.kind))


def shape_named(kind: str) -> Shape | None:
    """The shape of an operator kind by its name alone (the names are distinct across the groups Placer knows)."""
    return next((shape for shape in SHAPES.values() if shape.kind == kind), None)


def operator_manages(kind: str, obj: Mapping[str, Any]) -> str | None:
    """Why an operator resource's gang is its operator's already (so Placer leaves it alone), or None.

    - KubeRay: the label `ray.io/scheduler-name` hands the cluster to a batch scheduler integration, which
      makes its own group (ray-project/ray `doc/source/cluster/kubernetes/k8s-ecosystem/volcano.md`: "must
      include the `ray.io/scheduler-name: volcano` label").
    - Spark: `spec.batchScheduler` (kubeflow/spark-operator api/v1beta2 `SparkApplicationSpec.BatchScheduler`:
      "configures which batch scheduler will be used for scheduling").
    - Kubeflow: `spec.runPolicy.schedulingPolicy` (kubeflow/training-operator pkg/apis/kubeflow.org/v1
      `RunPolicy.SchedulingPolicy`: "the policy related to scheduling, e.g. gang-scheduling").
    - LeaderWorkerSet: not the operator's, but `startupPolicy: LeaderReady` starts the workers only once the
      leader is Ready (kubernetes-sigs/lws `LeaderWorkerSetSpec.StartupPolicy`), which a gang never lets it be.
    - any member template naming a Workload template for the Job controller (KEP-5547's
      `scheduling.k8s.io/group-template-name`) is handled in the template's own checks.
    """
    metadata = as_map(obj.get("metadata"))
    spec = as_map(obj.get("spec"))
    if kind in ("RayCluster", "RayJob") and as_map(metadata.get("labels")).get("ray.io/scheduler-name"):
        return "KubeRay's batch scheduler integration keeps its group (label ray.io/scheduler-name)"
    if kind == "SparkApplication" and spec.get("batchScheduler"):
        return f"the Spark operator's batch scheduler {spec['batchScheduler']} keeps its group (spec.batchScheduler)"
    if kind in ("PyTorchJob", "TFJob", "MPIJob") and as_map(spec.get("runPolicy")).get("schedulingPolicy"):
        return "the training operator's gang scheduling keeps its group (spec.runPolicy.schedulingPolicy)"
    if kind == "LeaderWorkerSet" and spec.get("startupPolicy") == "LeaderReady":
        return ("startupPolicy LeaderReady creates the workers once the leader is Ready, so a gang of the leader "
                "and its workers would wait forever; use LeaderCreated")
    return never_counted(kind, obj)


def pods_per_gang(kind: str, obj: Mapping[str, Any]) -> dict[str, int] | None:
    """Per member template, how many of its pods one native gang holds, where a resource holds several gangs
    (a JobSet's child Job runs one replicated job's pods; an LWS group one leader and `size - 1` workers) or
    where its one gang counts only the pods made together (a Spark application's executors); None where the
    resource is one gang of every member. What "can this gang ever fit" must count, not the whole resource."""
    shape = shape_named(kind)
    if shape is None:
        return None
    if shape.per is None:  # one gang, of the pods made together (`webhook.gang.native_members`)
        return counted_pods(kind, obj)
    if shape.per == PER_JOB:
        jobs = read_path(obj, ("spec", "replicatedJobs"))
        counts = {}
        for index, job in enumerate(jobs if isinstance(jobs, list) else []):
            pods = job_pods(as_map(job.get("template"))) if isinstance(job, dict) else None
            if pods is not None:
                counts[str(job.get("name") or f"job-{index}")] = pods
        return counts
    size = int_at(obj, "spec", "leaderWorkerTemplate", "size")
    if size is None:
        return {}
    if isinstance(read_path(obj, ("spec", "leaderWorkerTemplate", "leaderTemplate")), dict):
        return {"leader": 1, "worker": size - 1}
    return {"worker": size}


def one_template_per_gang(kind: str) -> bool:
    """Whether each of the kind's native gangs holds one template's pods only (a JobSet's child Job)."""
    shape = shape_named(kind)
    return shape is not None and shape.per == PER_JOB


def template_marks(shape: Shape, group: str) -> dict[str, str]:
    """The annotations a member template gets: every pod made from it names its gang from them."""
    marks = {GROUP_ANNOTATION: group}
    if shape.per is not None:
        marks[PER_ANNOTATION] = shape.per
    return marks


def run_marks(group: str, minimum: int | None) -> dict[str, str]:
    """The annotations a CronJob's pod template gets: each Job made from it names a group of its own."""
    marks = {GROUP_ANNOTATION: group, PER_ANNOTATION: PER_RUN}
    if minimum is not None:
        marks[MIN_MEMBER_ANNOTATION] = str(minimum)
    return marks


def job_group(base: str, replicated_job: str, index: int | str) -> str:
    """The PodGroup of one JobSet child Job (the child Job's own name when `base` is the JobSet's)."""
    return pod_group_name(f"{base}-{replicated_job}-{index}")


def member_group(pod: Mapping[str, Any]) -> tuple[str | None, str]:
    """The PodGroup a Pod of a marked operator template names, and why; (None, why) when it names none.

    The annotation alone decides, not the Pod's owner: a Spark driver has an owner reference only where the
    Spark operator's own webhook runs, and a member left out would hold its whole gang Pending forever."""
    metadata = as_map(pod.get("metadata"))
    annotations = as_map(metadata.get("annotations"))
    base = annotations.get(GROUP_ANNOTATION)
    if not isinstance(base, str) or not base:
        return None, ""
    per = annotations.get(PER_ANNOTATION)
    if per == PER_RUN:
        return None, ""  # named on the template by its Job's own admission; nothing to add to the Pod
    if per is None:
        return pod_group_name(base), f"{GROUP_ANNOTATION} of its template: one PodGroup per workload"
    labels = as_map(metadata.get("labels"))
    if per == PER_JOB:
        replicated, index = labels.get(REPLICATED_JOB_LABEL), labels.get(JOB_INDEX_LABEL)
        if isinstance(replicated, str) and replicated and isinstance(index, str) and index.isdigit():
            return job_group(base, replicated, index), (
                f"{GROUP_ANNOTATION} of its template, {REPLICATED_JOB_LABEL}={replicated} and "
                f"{JOB_INDEX_LABEL}={index}: one PodGroup per child Job")
        return None, f"labels {REPLICATED_JOB_LABEL} and {JOB_INDEX_LABEL} missing: no group named"
    if per == PER_GROUP:
        group = labels.get(GROUP_INDEX_LABEL)
        if isinstance(group, str) and group.isdigit():
            return pod_group_name(f"{base}-{group}"), (
                f"{GROUP_ANNOTATION} of its template and {GROUP_INDEX_LABEL}={group}: one PodGroup per group")
        return None, f"label {GROUP_INDEX_LABEL} missing: no group named"
    return None, f"{PER_ANNOTATION}={per} is not a shape Placer knows: no group named"


def wanted_groups(kind: WorkloadKind, obj: JSONObject, base: str, fixed: int | None) -> list[tuple[str, int]]:
    """The PodGroups (name, minCount) a marked resource wants now; `fixed` is the rule's `minAvailable`,
    which sizes each gang. A gang of no pods (a suspended worker group, a replicated job of 0) wants none."""
    shape = operator_shape(kind)
    if shape is None:
        return []
    if shape.per == PER_JOB:
        jobs = read_path(obj, ("spec", "replicatedJobs"))
        groups: list[tuple[str, int]] = []
        for job in jobs if isinstance(jobs, list) else []:
            if not isinstance(job, dict) or not isinstance(job.get("name"), str):
                continue
            replicas, pods = int_at(job, "replicas"), job_pods(as_map(job.get("template")))
            size = fixed if fixed is not None else pods
            if replicas is None or size is None or size < 1:
                continue
            groups.extend((job_group(base, job["name"], index), size) for index in range(replicas))
        return groups
    if shape.per == PER_GROUP:
        size = fixed if fixed is not None else int_at(obj, "spec", "leaderWorkerTemplate", "size")
        groups_wanted = _lws_groups(obj)
        if size is None or size < 1 or groups_wanted is None:
            return []
        return [(pod_group_name(f"{base}-{index}"), size) for index in range(groups_wanted)]
    size = fixed if fixed is not None else native_size(kind, obj)
    return [(pod_group_name(base), size)] if size is not None and size > 0 else []


def native_size(kind: WorkloadKind, obj: JSONObject) -> int | None:
    """The pods an operator resource's one native gang counts (`counted_pods`, else every member)."""
    counted = counted_pods(kind.kind, obj)
    return sum(counted.values()) if counted is not None else kind.members(obj)


def _lws_groups(obj: JSONObject) -> int | None:
    """How many group indexes a LeaderWorkerSet may use: `replicas` (default 1) plus a rolling update's
    `maxSurge` (an integer, or a percentage of replicas rounded up, as `RollingUpdateConfiguration` says), so a
    surge group's pods find their PodGroup too."""
    replicas = int_at(obj, "spec", "replicas")
    if replicas is None:
        return None
    surge = read_path(obj, ("spec", "rolloutStrategy", "rollingUpdateConfiguration", "maxSurge"))
    if isinstance(surge, str) and surge.endswith("%") and surge[:-1].isdigit():
        surge = -(-replicas * int(surge[:-1]) // 100)
    return replicas + (surge if isinstance(surge, int) and not isinstance(surge, bool) and surge > 0 else 0)


def marked_groups(kind: WorkloadKind, obj: JSONObject) -> list[tuple[str, int]] | str:
    """The PodGroups an operator resource marked for native gangs wants (from its own metadata, as the
    controller watches it), or why it wants none. A resource made by another marked resource (a RayJob's
    RayCluster, should it carry the RayJob's marks) wants none: its owner's PodGroup is the one its pods name."""
    metadata = as_map(obj.get("metadata"))
    base = as_map(metadata.get("labels")).get(POD_GROUP_LABEL)
    annotations = as_map(metadata.get("annotations"))
    if not isinstance(base, str) or not base or annotations.get(POD_GROUP_API_ANNOTATION) != NATIVE:
        return "not marked for native gangs"
    owner = controller_reference(obj)
    if owner is not None and shape_named(str(owner.get("kind"))) is not None:
        return f"made by {owner.get('kind')} {owner.get('name')}, which keeps the PodGroup"
    fixed = annotations.get(MIN_MEMBER_ANNOTATION)
    groups = wanted_groups(kind, obj, base, int(fixed) if isinstance(fixed, str) and fixed.isdigit() else None)
    return groups or f"{kind.kind} runs no pods now: no PodGroup needed"
