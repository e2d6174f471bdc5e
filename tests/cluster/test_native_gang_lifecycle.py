"""Native gangs through the real lifecycles on a living cluster: every gang Placer forms can be completed.

kube-scheduler holds a PodGroup's pods until `minCount` of them exist and binds them once `minCount` are
placed at once, counting only pods that have not finished (`webhook.gang.native_lifecycle`). Each test here
plays one lifecycle through to its end, with nothing left Pending:

- a SparkApplication-shaped set of pods (no Spark operator installed: a minimal CRD, and the test makes the
  pods as the operator and the driver do): the driver schedules by itself, then its executors as one gang;
- an MPIJob-shaped one with `launcherCreationPolicy: WaitForWorkersReady`: the workers as one gang, then the
  launcher Job, made once they are Ready, runs to completion;
- a Deployment that gains a gang policy while its pods run: the rolling update completes without the gang
  (the API server's answer says why); the same Deployment with `strategy: Recreate` gets it;
- an Indexed Job whose last index fails after the other three succeeded: its replacement runs, because the
  controller made the PodGroup again with the one member left;
- two overlapping runs of a CronJob: a PodGroup each, owned by each run's Job;
- a StatefulSet scaled from 4 to 2: a pod replaced afterwards runs (`minCount` follows the scale).

The pods finish when the test says so (`finish`: the status a kubelet writes), so the node agent may be a real
kubelet or a simulated one. Needs a v1.36 cluster started with the gates `GenericWorkload=true` and
`GangScheduling=true` on kube-apiserver and kube-scheduler and `--runtime-config=scheduling.k8s.io/v1alpha2=true`
(or a 1.37 cluster serving `scheduling.k8s.io/v1beta1`), 4 schedulable untainted nodes, and neither the Spark
operator nor mpi-operator installed (their controllers would make the pods these tests make).
"""

import copy
import datetime
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import yaml

from tests.cluster.harness import CRDS, Cluster, wait_until
from tests.cluster.test_native_gang import BIND_TIMEOUT, GROUP, HELD_FOR, four_nodes, native_version
from tests.conftest import REPO
from webhook.cluster.client.api import ApiError

pytestmark = pytest.mark.cluster

DISCOVERY_WAIT = 150.0
"""Placer's controller asks once a minute whether an operator's resource is served; then lists and creates."""
PAUSE = "registry.k8s.io/pause:3.10"
SMALL = {"requests": {"cpu": "10m", "memory": "16Mi"}}


def needs_native(cluster: Cluster) -> str:
    version = native_version(cluster)
    if version is None:
        pytest.skip("scheduling.k8s.io PodGroups are not served: start the cluster with the gates GenericWorkload "
                    "and GangScheduling and --runtime-config=scheduling.k8s.io/v1alpha2=true")
    return version


def container(name: str) -> dict[str, Any]:
    return {"name": name, "image": PAUSE, "resources": copy.deepcopy(SMALL)}


def pods(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods",
                                                  {"labelSelector": selector})["items"]
    return found


def running(items: list[dict[str, Any]]) -> int:
    return sum(1 for pod in items
               if (pod.get("status") or {}).get("phase") == "Running" and pod["spec"].get("nodeName"))


def pending(items: list[dict[str, Any]]) -> list[str]:
    return [pod["metadata"]["name"] for pod in items if not pod["spec"].get("nodeName")]


def finish(cluster: Cluster, pod: dict[str, Any], phase: str = "Succeeded") -> None:
    """The status a kubelet writes when the pod's containers exit (0 for Succeeded, 1 for Failed)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    code = 0 if phase == "Succeeded" else 1
    statuses = [{**status, "ready": False, "started": False, "state": {"terminated": {
        "exitCode": code, "reason": "Completed" if code == 0 else "Error", "startedAt": stamp, "finishedAt": stamp}}}
        for status in (pod.get("status") or {}).get("containerStatuses") or []]
    cluster.api.merge_patch(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}/status",
                            {"status": {"phase": phase, "containerStatuses": statuses}})


APPROVED = {"sparkoperator.k8s.io": "https://github.com/kubeflow/spark-operator/pull/1298"}
"""The approval annotation of an operator CRD in a protected group (`*.k8s.io`), as the operator's own CRD
carries it (kubeflow/spark-operator charts/spark-operator-chart/crds/sparkoperator.k8s.io_sparkapplications.yaml);
the API server refuses the CRD without it."""


def register_crd(cluster: Cluster, group: str, kind: str, version: str) -> str:
    """The least of an operator's CRD the API server needs (its schema open: nothing pruned); the resource's
    collection path prefix. Skips where the real CRD is installed (its operator would make the pods too)."""
    plural = kind.lower() + "s"
    name = f"{plural}.{group}"
    if cluster.get_or_none(f"{CRDS}/{name}") is not None and not any(
            created.endswith(f"/{name}") for created in cluster.created):
        pytest.skip(f"{kind} is installed: its operator would make the pods this test makes")
    if cluster.get_or_none(f"{CRDS}/{name}") is None:
        cluster.create(CRDS, {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {
                "name": name, **({"annotations": {"api-approved.kubernetes.io": APPROVED[group]}}
                                 if group in APPROVED else {})},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                     "versions": [{"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
    wait_until(lambda: any(c.get("type") == "Established" and c.get("status") == "True" for c in (
        (cluster.get_or_none(f"{CRDS}/{name}") or {}).get("status") or {}).get("conditions") or []),
        timeout=60, what=f"the {kind} CRD")
    return f"/apis/{group}/{version}"


def policy_for(cluster: Cluster, name: str, file: str, namespace: str,
               extra_rules: Sequence[dict[str, Any]] = ()) -> None:
    spec = yaml.safe_load((REPO / "policies" / file).read_text())["spec"]
    spec["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    spec["rules"] = [*spec["rules"], *extra_rules]
    cluster.policy(name, spec)


def served_when(cluster: Cluster, probe: Callable[[], bool], what: str) -> None:
    wait_until(probe, timeout=60, what=f"the webhook serving {what}")


def pod_group(cluster: Cluster, version: str, namespace: str, name: str, *, timeout: float = 60) -> dict[str, Any]:
    path = f"{GROUP}/{version}/namespaces/{namespace}/podgroups/{name}"
    found: dict[str, Any] = wait_until(lambda: cluster.get_or_none(path), timeout=timeout,
                                       what=f"PodGroup {name}")
    return found


def min_count(group: dict[str, Any]) -> int:
    return int(group["spec"]["schedulingPolicy"]["gang"]["minCount"])


def test_spark_shaped_pods_run_to_completion(cluster: Cluster) -> None:
    """The driver names no group and runs; the 3 executors it creates name the application's PodGroup
    (minCount 3: the executors only) and run; then the application finishes."""
    version = needs_native(cluster)
    prefix = register_crd(cluster, "sparkoperator.k8s.io", "SparkApplication", "v1beta2")
    namespace = cluster.namespace()
    policy_for(cluster, "native-spark", "gang-native-operators.yaml", namespace)
    apps = f"{prefix}/namespaces/{namespace}/sparkapplications"
    app = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
           "metadata": {"name": "spark-pi", "namespace": namespace},
           "spec": {"type": "Scala", "mode": "cluster", "image": "spark:3.5.3", "sparkVersion": "3.5.3",
                    "mainClass": "org.apache.spark.examples.SparkPi",
                    "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                    "driver": {"cores": 1, "memory": "512m", "labels": {"version": "3.5.3"}},
                    "executor": {"instances": 3, "cores": 1, "memory": "512m", "labels": {"version": "3.5.3"}}}}
    try:
        served_when(cluster, lambda: (cluster.api.create(apps, {**app, "metadata": {
            "name": "probe", "namespace": namespace}}, {"dryRun": "All"})["metadata"].get("labels") or {}).get(
            "placer.dev/pod-group") == "probe", "the native operators policy")
        stored = cluster.api.create(apps, app)
        assert "annotations" not in stored["spec"]["driver"], "the driver is not in the gang"
        assert stored["spec"]["executor"]["annotations"]["placer.dev/native-pod-group"] == "spark-pi"
        group = pod_group(cluster, version, namespace, "spark-pi", timeout=DISCOVERY_WAIT)
        assert min_count(group) == 3
        labels = {"sparkoperator.k8s.io/app-name": "spark-pi", "spark-app-selector": "spark-0001"}
        driver = cluster.api.create(f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "spark-pi-driver", "labels": {**labels, "spark-role": "driver", "version": "3.5.3"},
                "ownerReferences": [{"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                                     "name": "spark-pi", "uid": stored["metadata"]["uid"], "controller": True}]},
            "spec": {"restartPolicy": "Never", "containers": [container("spark-kubernetes-driver")]}})
        assert "schedulingGroup" not in driver["spec"]
        wait_until(lambda: running(pods(cluster, namespace, "spark-role=driver")) == 1, timeout=BIND_TIMEOUT,
                   what="the driver running by itself")
        for index in range(1, 4):  # what the running driver asks for (Spark's ExecutorPodsAllocator)
            created = cluster.api.create(f"/api/v1/namespaces/{namespace}/pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {
                    "name": f"spark-pi-exec-{index}",
                    "labels": {**labels, "spark-role": "executor", "spark-exec-id": str(index), "version": "3.5.3"},
                    "annotations": dict(stored["spec"]["executor"]["annotations"]),
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "spark-pi-driver",
                                         "uid": driver["metadata"]["uid"], "controller": True}]},
                "spec": {"restartPolicy": "Never", "containers": [container("spark-kubernetes-executor")]}})
            assert created["spec"]["schedulingGroup"] == {"podGroupName": "spark-pi"}
        wait_until(lambda: running(pods(cluster, namespace, "spark-role=executor")) == 3, timeout=BIND_TIMEOUT,
                   what="the 3 executors running as one gang")
        for pod in pods(cluster, namespace, "spark-role=executor") + pods(cluster, namespace, "spark-role=driver"):
            finish(cluster, pod)
        everything = pods(cluster, namespace, "sparkoperator.k8s.io/app-name=spark-pi")
        assert {pod["status"]["phase"] for pod in everything} == {"Succeeded"} and len(everything) == 4
    finally:
        cluster.delete_policy("native-spark")


def test_mpi_shaped_pods_with_wait_for_workers_ready_run_to_completion(cluster: Cluster) -> None:
    """The 3 workers are the gang (minCount 3); once they are Ready the launcher Job (what mpi-operator makes
    then) runs by itself and completes."""
    version = needs_native(cluster)
    prefix = register_crd(cluster, "kubeflow.org", "MPIJob", "v2beta1")
    namespace = cluster.namespace()
    policy_for(cluster, "native-mpi", "gang-native-operators.yaml", namespace)
    mpijobs = f"{prefix}/namespaces/{namespace}/mpijobs"
    template = {"spec": {"containers": [container("mpi")]}}
    mpijob = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
              "metadata": {"name": "pi", "namespace": namespace},
              "spec": {"slotsPerWorker": 1, "launcherCreationPolicy": "WaitForWorkersReady",
                       "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": copy.deepcopy(template)},
                                           "Worker": {"replicas": 3, "template": copy.deepcopy(template)}}}}
    try:
        served_when(cluster, lambda: (cluster.api.create(mpijobs, {**mpijob, "metadata": {
            "name": "probe", "namespace": namespace}}, {"dryRun": "All"})["metadata"].get("labels") or {}).get(
            "placer.dev/pod-group") == "probe", "the native operators policy")
        stored = cluster.api.create(mpijobs, mpijob)
        replicas = stored["spec"]["mpiReplicaSpecs"]
        assert "annotations" not in (replicas["Launcher"]["template"].get("metadata") or {})
        group = pod_group(cluster, version, namespace, "pi", timeout=DISCOVERY_WAIT)
        assert min_count(group) == 3
        owner = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi",
                 "uid": stored["metadata"]["uid"], "controller": True}
        for index in range(3):  # mpi-operator's getOrCreateWorker: one pod per worker
            worker = copy.deepcopy(replicas["Worker"]["template"])
            worker["metadata"].update(name=f"pi-worker-{index}", ownerReferences=[owner], labels={
                "training.kubeflow.org/job-name": "pi", "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": str(index)})
            worker.update(apiVersion="v1", kind="Pod")
            created = cluster.api.create(f"/api/v1/namespaces/{namespace}/pods", worker)
            assert created["spec"]["schedulingGroup"] == {"podGroupName": "pi"}
        wait_until(lambda: running(pods(cluster, namespace, "training.kubeflow.org/replica-type=worker")) == 3,
                   timeout=BIND_TIMEOUT, what="the 3 workers running as one gang")
        launcher = copy.deepcopy(replicas["Launcher"]["template"])
        launcher.setdefault("metadata", {})["labels"] = {"training.kubeflow.org/job-name": "pi",
                                                         "training.kubeflow.org/replica-type": "launcher"}
        launcher["spec"]["restartPolicy"] = "Never"
        jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
        cluster.api.create(jobs, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": "pi-launcher", "ownerReferences": [owner]}, "spec": {"backoffLimit": 0, "template": launcher}})
        launched = wait_until(lambda: (p := pods(cluster, namespace, "batch.kubernetes.io/job-name=pi-launcher"))
                              and running(p) == 1 and p, timeout=BIND_TIMEOUT, what="the launcher running")
        assert "schedulingGroup" not in launched[0]["spec"]
        finish(cluster, launched[0])
        wait_until(lambda: any(c["type"] == "Complete" and c["status"] == "True" for c in (
            cluster.api.get(f"{jobs}/pi-launcher").get("status") or {}).get("conditions") or []),
            timeout=120, what="the launcher Job complete")
        for pod in pods(cluster, namespace, "training.kubeflow.org/replica-type=worker"):
            finish(cluster, pod)
    finally:
        cluster.delete_policy("native-mpi")


DEPLOYMENT_RULE = {"name": "deployment-gang", "condition": "workload.kind == 'Deployment'",
                   "action": "add-gang-labels", "parameters": {"scheduler": "native"}}


def deployment(name: str, namespace: str, strategy: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 3, "strategy": {"type": strategy}, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"terminationGracePeriodSeconds": 0, "containers": [container("server")]}}}}


def rolled_out(cluster: Cluster, path: str) -> bool:
    found = cluster.api.get(path)
    status, spec = found.get("status") or {}, found["spec"]
    return bool(status.get("observedGeneration") == found["metadata"]["generation"]
            and status.get("updatedReplicas") == spec["replicas"] == status.get("availableReplicas")
            and status.get("replicas") == spec["replicas"])


def test_a_deployment_that_gains_a_gang_policy_rolls_out_without_being_stuck(cluster: Cluster) -> None:
    """Created before the policy: an update's rolling replacement would leave its first new pod waiting for a
    gang the old pods never join, so the update is admitted without it and completes. With strategy Recreate
    every pod is replaced at once: that Deployment gets the gang and all its pods run."""
    version = needs_native(cluster)
    four_nodes(cluster)
    namespace = cluster.namespace()
    deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    for name, strategy in (("rolling", "RollingUpdate"), ("recreate", "Recreate")):
        cluster.api.create(deployments, deployment(name, namespace, strategy))
    for name in ("rolling", "recreate"):
        wait_until(lambda n=name: rolled_out(cluster, f"{deployments}/{n}"), timeout=BIND_TIMEOUT,  # type: ignore[misc]
                   what=f"Deployment {name} running before the policy")
    policy_for(cluster, "native-deployments", "gang-native-jobs.yaml", namespace, [DEPLOYMENT_RULE])
    try:
        served_when(cluster, lambda: "schedulingGroup" in cluster.api.create(
            deployments, deployment("probe", namespace, "RollingUpdate"), {"dryRun": "All"})["spec"]["template"][
            "spec"], "the Deployment gang policy")
        for name in ("rolling", "recreate"):
            cluster.api.merge_patch(f"{deployments}/{name}", {"spec": {"template": {"metadata": {
                "annotations": {"example.com/revision": "2"}}}}})
        rolling = cluster.api.get(f"{deployments}/rolling")
        assert "schedulingGroup" not in rolling["spec"]["template"]["spec"]
        recreate = cluster.api.get(f"{deployments}/recreate")
        assert recreate["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "recreate"}
        for name in ("rolling", "recreate"):
            wait_until(lambda n=name: rolled_out(cluster, f"{deployments}/{n}"), timeout=BIND_TIMEOUT,  # type: ignore[misc]
                       what=f"Deployment {name} rolled out")
            live = [pod for pod in pods(cluster, namespace, f"app={name}")
                    if not pod["metadata"].get("deletionTimestamp")]
            assert running(live) == 3 and not pending(live), (name, pending(live))
        assert min_count(pod_group(cluster, version, namespace, "recreate")) == 3
        assert {pod["spec"].get("schedulingGroup", {}).get("podGroupName") for pod in pods(
            cluster, namespace, "app=recreate") if not pod["metadata"].get("deletionTimestamp")} == {"recreate"}
    finally:
        cluster.delete_policy("native-deployments")


def indexed_job(name: str, pods_count: int) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completionMode": "Indexed", "completions": pods_count, "parallelism": pods_count,
                     "backoffLimit": 3, "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                         "containers": [container("worker")]}}}}


def job_status(cluster: Cluster, path: str) -> dict[str, Any]:
    return cluster.api.get(path).get("status") or {}


def test_an_indexed_jobs_replacement_after_the_other_indexes_finished_runs(cluster: Cluster) -> None:
    """3 of 4 indexes succeed, the fourth fails: its replacement is the only pod the Job can still run. The
    scheduler no longer counts the finished ones, so with minCount 4 it would wait forever; the controller
    makes the PodGroup again with minCount 1 and the replacement runs, and the Job completes."""
    version = needs_native(cluster)
    four_nodes(cluster)
    namespace = cluster.namespace()
    policy_for(cluster, "native-jobs", "gang-native-jobs.yaml", namespace)
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    try:
        served_when(cluster, lambda: "schedulingGroup" in cluster.api.create(
            jobs, indexed_job("probe", 4), {"dryRun": "All"})["spec"]["template"]["spec"], "the native jobs policy")
        cluster.api.create(jobs, indexed_job("train", 4))
        first = pod_group(cluster, version, namespace, "train")
        assert min_count(first) == 4
        selector = "batch.kubernetes.io/job-name=train"
        started = wait_until(lambda: (p := pods(cluster, namespace, selector)) and running(p) == 4 and p,
                             timeout=BIND_TIMEOUT, what="the 4 indexes running as one gang")
        by_index = {pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]: pod for pod in started}
        for index in ("0", "1", "2"):
            finish(cluster, by_index[index])
        wait_until(lambda: job_status(cluster, f"{jobs}/train").get("succeeded") == 3, timeout=60,
                   what="3 indexes counted as succeeded")
        finish(cluster, by_index["3"], "Failed")
        replacement = wait_until(
            lambda: [pod for pod in pods(cluster, namespace, f"{selector},batch.kubernetes.io/job-completion-index=3")
                     if pod["metadata"]["uid"] != by_index["3"]["metadata"]["uid"] and running([pod])],
            timeout=BIND_TIMEOUT, what="the replacement of index 3 running")
        assert replacement[0]["spec"]["schedulingGroup"] == {"podGroupName": "train"}
        assert min_count(pod_group(cluster, version, namespace, "train")) == 1
        finish(cluster, replacement[0])
        wait_until(lambda: any(c["type"] == "Complete" and c["status"] == "True" for c in job_status(
            cluster, f"{jobs}/train").get("conditions") or []), timeout=120, what="the Job complete")
    finally:
        cluster.delete_policy("native-jobs")


def test_overlapping_cronjob_runs_are_a_gang_each(cluster: Cluster) -> None:
    """Two runs of one CronJob at once (concurrencyPolicy Allow; made here as `kubectl create job --from` makes
    them, the CronJob suspended so its controller makes none): each names a PodGroup of its own, owned by its
    Job, and both run."""
    version = needs_native(cluster)
    four_nodes(cluster)
    namespace = cluster.namespace()
    policy_for(cluster, "native-cron", "gang-native-jobs.yaml", namespace)
    cronjobs = f"/apis/batch/v1/namespaces/{namespace}/cronjobs"
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
            "spec": {"schedule": "0 2 * * *", "suspend": True, "concurrencyPolicy": "Allow",
                     "jobTemplate": {"spec": indexed_job("nightly", 2)["spec"]}}}
    try:
        served_when(cluster, lambda: "placer.dev/native-pod-group-per" in (cluster.api.create(
            cronjobs, cron, {"dryRun": "All"})["spec"]["jobTemplate"]["spec"]["template"]["metadata"].get(
            "annotations") or {}), "the native jobs policy")
        stored = cluster.api.create(cronjobs, cron)
        owner = {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": stored["metadata"]["uid"],
                 "controller": True, "blockOwnerDeletion": True}
        runs = []
        for minute in ("29415000", "29415060"):
            run = cluster.api.create(jobs, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
                "name": f"nightly-{minute}", "annotations": {"cronjob.kubernetes.io/instantiate": "manual"},
                "ownerReferences": [owner]}, "spec": copy.deepcopy(stored["spec"]["jobTemplate"]["spec"])})
            assert run["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": f"nightly-{minute}"}
            runs.append(run)
        for run in runs:
            name = run["metadata"]["name"]
            group = pod_group(cluster, version, namespace, name)
            assert min_count(group) == 2
            assert [ref["name"] for ref in group["metadata"]["ownerReferences"]] == [name]
            wait_until(lambda n=name: running(pods(cluster, namespace, f"batch.kubernetes.io/job-name={n}")) == 2,  # type: ignore[misc]
                       timeout=BIND_TIMEOUT, what=f"run {name} running")
        assert cluster.get_or_none(f"{GROUP}/{version}/namespaces/{namespace}/podgroups/nightly") is None
    finally:
        cluster.delete_policy("native-cron")


def test_a_statefulset_scaled_down_still_replaces_its_pods(cluster: Cluster) -> None:
    """4 replicas, one gang of 4; scaled to 2, the PodGroup follows (made again on v1alpha2, whose minCount
    cannot change); a pod deleted afterwards comes back and runs. Scaled up again, the new pods join the
    running gang."""
    version = needs_native(cluster)
    four_nodes(cluster)
    namespace = cluster.namespace()
    policy_for(cluster, "native-sts", "gang-native-jobs.yaml", namespace)
    sets = f"/apis/apps/v1/namespaces/{namespace}/statefulsets"
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "ring"},
           "spec": {"replicas": 4, "serviceName": "ring", "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": {"app": "ring"}},
                    "template": {"metadata": {"labels": {"app": "ring"}}, "spec": {
                        "terminationGracePeriodSeconds": 0, "containers": [container("member")]}}}}
    try:
        served_when(cluster, lambda: "schedulingGroup" in cluster.api.create(
            sets, {**sts, "metadata": {"name": "probe"}}, {"dryRun": "All"})["spec"]["template"]["spec"],
            "the native jobs policy")
        cluster.api.create(sets, sts)
        assert min_count(pod_group(cluster, version, namespace, "ring")) == 4
        wait_until(lambda: running(pods(cluster, namespace, "app=ring")) == 4, timeout=BIND_TIMEOUT,
                   what="4 members running")
        cluster.api.merge_patch(f"{sets}/ring", {"spec": {"replicas": 2}})
        wait_until(lambda: (g := cluster.get_or_none(f"{GROUP}/{version}/namespaces/{namespace}/podgroups/ring"))
                   and min_count(g) == 2, timeout=60, what="the PodGroup following the scale to 2")
        wait_until(lambda: len(pods(cluster, namespace, "app=ring")) == 2, timeout=60, what="2 members left")
        with_uid = {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in pods(cluster, namespace, "app=ring")}
        try:
            cluster.api.delete(f"/api/v1/namespaces/{namespace}/pods/ring-0")
        except ApiError as error:
            assert error.code == 404, error
        wait_until(lambda: [pod for pod in pods(cluster, namespace, "app=ring") if pod["metadata"]["name"] == "ring-0"
                            and pod["metadata"]["uid"] != with_uid["ring-0"] and running([pod])],
                   timeout=BIND_TIMEOUT, what="ring-0 replaced and running")
        cluster.api.merge_patch(f"{sets}/ring", {"spec": {"replicas": 4}})
        wait_until(lambda: running(pods(cluster, namespace, "app=ring")) == 4, timeout=BIND_TIMEOUT,
                   what="scaled up again: 4 members running")
    finally:
        cluster.delete_policy("native-sts")


def test_kube_scheduler_does_not_count_finished_members(cluster: Cluster) -> None:
    """What the rules above rest on, shown without Placer: a PodGroup of minCount 2 whose two members ran and
    finished, and a third pod naming it: alone among the pods the scheduler counts (it drops finished ones),
    the third never binds; a fourth makes two and both bind."""
    version = needs_native(cluster)
    namespace = cluster.namespace(opted_in=False)
    groups = f"{GROUP}/{version}/namespaces/{namespace}/podgroups"
    cluster.api.create(groups, {"apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup",
                                "metadata": {"name": "pair"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}})

    def member(name: str) -> dict[str, Any]:
        return cluster.api.create(f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"gang": "pair"}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "schedulingGroup": {"podGroupName": "pair"}, "containers": [container("c")]}})

    member("first")
    member("second")
    wait_until(lambda: running(pods(cluster, namespace, "gang=pair")) == 2, timeout=BIND_TIMEOUT,
               what="the first two members running")
    for pod in pods(cluster, namespace, "gang=pair"):
        finish(cluster, pod)
    member("third")
    deadline = time.monotonic() + HELD_FOR
    while time.monotonic() < deadline:
        assert pending(pods(cluster, namespace, "gang=pair")) == ["third"], "finished members are not counted"
        time.sleep(2)
    member("fourth")
    wait_until(lambda: running(pods(cluster, namespace, "gang=pair")) == 2, timeout=BIND_TIMEOUT,
               what="the third and fourth running together")
