"""Operator custom resources as workloads: Kubeflow training jobs, Ray, JobSet, LeaderWorkerSet.

Each of them embeds real PodTemplateSpecs, one per role, so every slot is patched in place. What differs is
where the templates are and how many pods each one runs, which is the operator's own defaulting:

- Kubeflow (`kubeflow.org/v1` PyTorchJob, TFJob; `kubeflow.org/v2beta1` MPIJob): one template per replica
  type under `spec.<x>ReplicaSpecs.<Type>.template`; `replicas` defaults to 1 (training-operator
  `setDefaultReplicas`, mpi-operator `setDefaultsTypeLauncher/Worker`).
- Ray (`ray.io/v1` RayCluster, RayJob): one head pod, and per worker group `replicas * numOfHosts` pods
  (`replicas` falls back to `minReplicas`, then 0, as KubeRay does; a suspended group runs none). A RayJob's
  `submitterPodTemplate` runs after the cluster is up: actions apply to it, but it is not a gang member.
- JobSet (`jobset.x-k8s.io/v1alpha2`): per replicated job, `replicas` (default 1) Jobs of `parallelism`
  pods (default 1, never more than `completions`).
- LeaderWorkerSet (`leaderworkerset.x-k8s.io/v1`): `replicas` (default 1) groups of `size` pods (default
  1): a leader from `leaderTemplate` (the worker template when there is none) and `size - 1` workers from
  `workerTemplate` (kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go,
  `LeaderWorkerTemplate`; defaults in `leaderworkerset_webhook.go` `Default`).
"""

from collections.abc import Callable
from typing import Any

from webhook.support.typing import JSONObject, as_map
from webhook.workloads.builtin import CREATE_UPDATE, job_pods, no_labels, template_labels_selector, template_pods
from webhook.workloads.slots import Count, TemplateSlot, WorkloadKind, int_at, own_pods_term, read_path

KUBEFLOW_JOB_NAME = "training.kubeflow.org/job-name"
RAY_CLUSTER = "ray.io/cluster"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
"""kubernetes-sigs/lws leaderworkerset_types.go `SetNameLabelKey`: on every pod of the set."""
KUBEFLOW_VERSIONS = ("v1", "v2beta1")
"""training-operator serves v1 (PyTorchJob, TFJob, MPIJob); mpi-operator serves MPIJob as v2beta1."""
RAY_HEAD_GROUP = "headgroup"
"""The task-group name KubeRay's YuniKorn integration gives the head (ray-operator batchscheduler/yunikorn)."""


def own_pods_by_label(label: str) -> Callable[[JSONObject, JSONObject], JSONObject | None]:
    """Pods the operator labels `<label>: <object name>`; the template's own labels when there is no name."""

    def selector(obj: JSONObject, template: JSONObject) -> JSONObject | None:
        name = (obj.get("metadata") or {}).get("name")
        if isinstance(name, str) and name:
            return own_pods_term({"matchLabels": {label: name}})
        return own_pods_term(template_labels_selector(obj, template))

    return selector


def total_members(templates: Callable[[JSONObject], list[TemplateSlot]]) -> Count:
    """The gang is every pod of every member template; unknown when one template's count is unknown."""

    def count(obj: JSONObject) -> int | None:
        members = [slot.members for slot in templates(obj) if slot.gang_member]
        if not members or any(member is None for member in members):
            return None
        return sum(member for member in members if member is not None)

    return count


KUBEFLOW_REPLICA_TYPE = "training.kubeflow.org/replica-type"
"""training-operator (kubeflow.org/v1): every pod is labelled with its replica type, lowercased, over the
template's labels (pkg/controller.v1/common/pod.go, `ReconcilePods` and `createNewPod`)."""
MPI_JOB_ROLE = "training.kubeflow.org/job-role"
"""mpi-operator (kubeflow.org/v2beta1): the launcher and the workers are labelled `launcher` or `worker`, over
the template's labels (pkg/controller/mpi_job_controller.go, `defaultLabels`)."""
RAY_NODE_TYPE = "ray.io/node-type"
RAY_GROUP = "ray.io/group"
"""KubeRay labels every pod `ray.io/node-type: head|worker` and `ray.io/group: headgroup|<groupName>`
(ray-operator/controllers/ray/common/pod.go, `labelPod`; utils/constant.go)."""
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
"""JobSet labels each child Job and its pods with the replicated job's name (api/jobset/v1alpha2,
`ReplicatedJobNameKey`)."""


def kubeflow_templates(field: str) -> Callable[[JSONObject], list[TemplateSlot]]:
    def templates(obj: JSONObject) -> list[TemplateSlot]:
        specs = read_path(obj, ("spec", field))
        if not isinstance(specs, dict):
            return []
        key = MPI_JOB_ROLE if str(obj.get("apiVersion")).endswith("/v2beta1") else KUBEFLOW_REPLICA_TYPE
        return [
            TemplateSlot(str(role), ("spec", field, str(role), "template"), members=int_at(spec, "replicas"),
                         role_labels=((key, str(role).lower()),))
            for role, spec in specs.items()
            if isinstance(spec, dict)
        ]

    return templates


def _ray_workers(group: Any) -> int | None:
    """The worker pods KubeRay runs for a group: `replicas` kept within `minReplicas` (default 0) and
    `maxReplicas` (default unbounded), times `numOfHosts`; none for a suspended group (ray-project/kuberay
    ray-operator/controllers/ray/utils/util.go, `GetWorkerGroupDesiredReplicas`)."""
    if not isinstance(group, dict):
        return 0
    if group.get("suspend") is True:
        return 0
    low = int_at(group, "minReplicas", default=0)
    high = int_at(group, "maxReplicas", default=None)
    replicas = int_at(group, "replicas", default=None)
    if low is None:
        return None
    if replicas is None or replicas < low:
        replicas = low
    elif high is not None and replicas > high:
        replicas = high
    hosts = int_at(group, "numOfHosts")
    return None if hosts is None else replicas * hosts


def ray_cluster_slots(cluster_spec: Any, prefix: tuple[str, ...]) -> list[TemplateSlot]:
    """The head and every worker group of a RayClusterSpec found at `prefix`."""
    if not isinstance(cluster_spec, dict):
        return []
    slots = []
    if isinstance(cluster_spec.get("headGroupSpec"), dict):
        slots.append(TemplateSlot(RAY_HEAD_GROUP, (*prefix, "headGroupSpec", "template"), members=1,
                                  role_labels=((RAY_NODE_TYPE, "head"), (RAY_GROUP, RAY_HEAD_GROUP))))
    groups = cluster_spec.get("workerGroupSpecs")
    for index, group in enumerate(groups if isinstance(groups, list) else []):
        name = group.get("groupName") if isinstance(group, dict) else None
        role = ((RAY_NODE_TYPE, "worker"), (RAY_GROUP, name)) if isinstance(name, str) and name else (
            (RAY_NODE_TYPE, "worker"),)
        slots.append(
            TemplateSlot(
                str(name or f"worker-{index}"),
                (*prefix, "workerGroupSpecs", index, "template"),
                members=_ray_workers(group),
                role_labels=role,
            )
        )
    return slots


def raycluster_templates(obj: JSONObject) -> list[TemplateSlot]:
    return ray_cluster_slots(read_path(obj, ("spec",)), ("spec",))


def rayjob_templates(obj: JSONObject) -> list[TemplateSlot]:
    slots = ray_cluster_slots(read_path(obj, ("spec", "rayClusterSpec")), ("spec", "rayClusterSpec"))
    if isinstance(read_path(obj, ("spec", "submitterPodTemplate")), dict):
        slots.append(TemplateSlot("submitter", ("spec", "submitterPodTemplate"), members=1, gang_member=False))
    return slots


def jobset_templates(obj: JSONObject) -> list[TemplateSlot]:
    jobs = read_path(obj, ("spec", "replicatedJobs"))
    slots = []
    for index, job in enumerate(jobs if isinstance(jobs, list) else []):
        if not isinstance(job, dict):
            continue
        replicas, pods = int_at(job, "replicas"), job_pods(as_map(job.get("template")))
        members = None if replicas is None or pods is None else replicas * pods
        name = job.get("name")
        slots.append(
            TemplateSlot(
                str(name or f"job-{index}"),
                ("spec", "replicatedJobs", index, "template", "spec", "template"),
                members=members,
                role_labels=((JOBSET_REPLICATED_JOB, name),) if isinstance(name, str) and name else (),
            )
        )
    return slots


def lws_templates(obj: JSONObject) -> list[TemplateSlot]:
    """The leader template once per group and the worker template `size - 1` times; a set without a leader
    template runs its leaders from the worker template too."""
    replicas = _defaulted(obj, ("spec", "replicas"), minimum=0)
    size = _defaulted(obj, ("spec", "leaderWorkerTemplate", "size"), minimum=1)
    template = ("spec", "leaderWorkerTemplate")
    groups = None if replicas is None or size is None else replicas
    workers = None if replicas is None or size is None else replicas * (size - 1)
    if isinstance(read_path(obj, (*template, "leaderTemplate")), dict):
        return [TemplateSlot("leader", (*template, "leaderTemplate"), members=groups),
                TemplateSlot("worker", (*template, "workerTemplate"), members=workers)]
    total = None if groups is None or workers is None else groups + workers
    return [TemplateSlot("worker", (*template, "workerTemplate"), members=total)]


def _defaulted(obj: JSONObject, path: tuple[str, ...], *, minimum: int) -> int | None:
    """A count LWS defaults to 1 when absent (its webhook's `Default`); None when it is no valid count."""
    value = read_path(obj, path)
    if value is None:
        return 1
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= minimum else None


def operator_kind(
    group: str,
    kind: str,
    versions: tuple[str, ...],
    templates: Callable[[JSONObject], list[TemplateSlot]],
    own_label: str | None,
) -> WorkloadKind:
    """A row for an operator resource: CREATE and UPDATE (templates are compared, as for Deployments)."""
    members = total_members(templates)
    return WorkloadKind(
        group,
        kind,
        CREATE_UPDATE,
        templates,
        members,
        own_pods_by_label(own_label) if own_label else template_pods,
        no_labels,
        versions=versions,
    )


def operator_kinds() -> list[WorkloadKind]:
    """Kubeflow, Ray, JobSet and LeaderWorkerSet rows; SparkApplication lives in `webhook.workloads.spark`."""
    return [
        operator_kind(
            "kubeflow.org",
            "PyTorchJob",
            KUBEFLOW_VERSIONS,
            kubeflow_templates("pytorchReplicaSpecs"),
            KUBEFLOW_JOB_NAME,
        ),
        operator_kind(
            "kubeflow.org", "TFJob", KUBEFLOW_VERSIONS, kubeflow_templates("tfReplicaSpecs"), KUBEFLOW_JOB_NAME
        ),
        operator_kind(
            "kubeflow.org", "MPIJob", KUBEFLOW_VERSIONS, kubeflow_templates("mpiReplicaSpecs"), KUBEFLOW_JOB_NAME
        ),
        operator_kind("ray.io", "RayCluster", ("v1",), raycluster_templates, RAY_CLUSTER),
        # A RayJob's cluster is named `<rayjob>-<random>`: its pods' selector is not known at admission.
        operator_kind("ray.io", "RayJob", ("v1",), rayjob_templates, None),
        operator_kind("jobset.x-k8s.io", "JobSet", ("v1alpha2",), jobset_templates, JOBSET_NAME),
        operator_kind("leaderworkerset.x-k8s.io", "LeaderWorkerSet", ("v1",), lws_templates, LWS_NAME),
    ]
