"""Which pods a native gang counts: the ones that exist together before any of them must run.

kube-scheduler holds every pod of a PodGroup until `minCount` of them exist (`PreEnqueue` counts the group's
pods it knows, `AllPodsCount`) and lets them bind only once `minCount` are placed at once (`Permit`,
`ScheduledPodsCount`): kubernetes/kubernetes `pkg/scheduler/framework/plugins/gangscheduling/
gangscheduling.go`. A pod that is made only once another member runs can therefore never be counted: the
gang waits for it, and it waits for the gang. Each operator's own startup order decides who is counted:

- SparkApplication: the running driver asks for the executors, so the gang is the executors and the driver
  schedules by itself, as the Spark operator's own Workload API integration does (kubeflow/spark-operator
  PR #3113, `internal/scheduler/workload/scheduler.go`, `Schedule`: "Adding it to the executor PodGroup would
  deadlock while waiting for executors that do not yet exist").
- MPIJob with `launcherCreationPolicy: WaitForWorkersReady`: the launcher Job is made once every worker is
  Ready (kubeflow/mpi-operator `pkg/controller/mpi_job_controller.go`, `syncHandler`), so the gang is the
  workers; with `AtStartup` (the default) and for a kubeflow.org/v1 MPIJob the launcher is made with them.
- RayCluster, RayJob: KubeRay makes the head and the workers together (`reconcilePods`); with
  `enableInTreeAutoscaling` the autoscaler adds and removes workers above each group's `minReplicas`, so the
  gang is the head and the `minReplicas`.

A Spark application with dynamic allocation keeps `minExecutors` for its whole run and no more
(`webhook.workloads.spark.lasting_executors`); without `minExecutors` no executor lasts, and the application is
left alone. JobSet (one gang per child Job, each made whole by the Job controller), LeaderWorkerSet
(`LeaderCreated`: the workers are made when the leader is created; `LeaderReady` is left alone) and the
Kubeflow jobs whose replicas are all made at once need nothing here (`webhook.gang.native_operators`).
"""

from collections.abc import Mapping
from typing import Any

from webhook.support.typing import JSONObject, as_map
from webhook.workloads.operators import RAY_HEAD_GROUP
from webhook.workloads.slots import int_at, read_path
from webhook.workloads.spark import dynamic_allocation, lasting_executors

WAIT_FOR_WORKERS = "WaitForWorkersReady"
"""kubeflow/mpi-operator `pkg/apis/kubeflow/v2beta1/types.go`, `LauncherCreationPolicyWaitForWorkersReady`:
"makes Launcher creation postponed until all workers are in ready state"."""
SPARK_ROLE_LABEL = "spark-role"
"""apache/spark `Constants.SPARK_ROLE_LABEL`: `driver` or `executor` on every pod Spark makes."""


def counted_pods(kind: str, obj: Mapping[str, Any]) -> dict[str, int] | None:
    """Per member template, how many of its pods the resource's one native gang counts, where that is not
    every pod of every member template (see the module's table); None where it is."""
    if kind == "SparkApplication":
        return {"executor": lasting_executors(dict(obj))}
    if kind == "MPIJob" and as_map(obj.get("spec")).get("launcherCreationPolicy") == WAIT_FOR_WORKERS:
        workers = int_at(obj, "spec", "mpiReplicaSpecs", "Worker", "replicas")
        return {"Worker": workers or 0}
    if kind in ("RayCluster", "RayJob"):
        cluster = read_path(obj, ("spec",) if kind == "RayCluster" else ("spec", "rayClusterSpec"))
        if isinstance(cluster, dict) and cluster.get("enableInTreeAutoscaling") is True:
            return _ray_floor(cluster)
    return None


def never_counted(kind: str, obj: Mapping[str, Any]) -> str | None:
    """Why no gang of the resource's pods can be counted on (it is left alone), or None."""
    if kind == "SparkApplication" and dynamic_allocation(dict(obj)) and lasting_executors(dict(obj)) < 1:
        return ("dynamic allocation without minExecutors: Spark adds and removes every executor as its tasks "
                "need, so no gang of them lasts; set spec.dynamicAllocation.minExecutors")
    return None


def left_out(kind: str, template: str) -> str:
    """Why a member template's pods are not in the gang (`counted_pods` leaves it out): they are made only once
    counted ones run."""
    if kind == "SparkApplication":
        return "the driver is not in the gang: it creates the executors once it runs"
    if kind == "MPIJob":
        return (f"the launcher is not in the gang: launcherCreationPolicy {WAIT_FOR_WORKERS} creates it once "
                "every worker is Ready")
    return f"template {template} is not in the gang"


def pod_left_out(pod: Mapping[str, Any]) -> str | None:
    """A Pod that must never name a gang whatever its template says: a Spark driver (labelled `spark-role:
    driver`), which a resource marked before this rule existed may still carry the marks of."""
    labels = as_map(as_map(pod.get("metadata")).get("labels"))
    if labels.get(SPARK_ROLE_LABEL) == "driver":
        return "a Spark driver is not in its application's gang: it creates the executors once it runs"
    return None


def _ray_floor(cluster: JSONObject) -> dict[str, int]:
    """The head and each worker group's `minReplicas` x `numOfHosts`: what the Ray autoscaler never goes
    below (ray-project/kuberay `GetWorkerGroupDesiredReplicas` keeps `replicas` within `minReplicas` and
    `maxReplicas`)."""
    counted = {RAY_HEAD_GROUP: 1}
    groups = cluster.get("workerGroupSpecs")
    for index, group in enumerate(groups if isinstance(groups, list) else []):
        if not isinstance(group, dict):
            continue
        name = str(group.get("groupName") or f"worker-{index}")
        suspended = group.get("suspend") is True
        counted[name] = 0 if suspended else (int_at(group, "minReplicas", default=0) or 0) * (
            int_at(group, "numOfHosts") or 0)
    return counted
