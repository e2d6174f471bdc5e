"""A SparkApplication's life under each label-based gang scheduler: the driver starts, then the executors as one.

The Spark operator creates the driver pod from `spec.driver`; only the running driver creates the executors,
from `spec.executor`, owned by the driver pod. Each test plays that order through Placer (the application, then
every pod, admitted as the API server would send them) and asks a model of the scheduler's gang gate, written
from its source (`webhook.gang.members` cites each), whether each pod may be scheduled:

- coscheduling: a member waits until as many pods carry its group label as the PodGroup's `minMember`;
- Volcano: a member waits until its PodGroup has `minMember` valid tasks; a pod naming no group gets a
  PodGroup of one from Volcano's controller (pkg/controllers/podgroup, `createNormalPodPGIfNotExist`);
- Kueue: a pod group is admitted once `pod-group-total-count` pods exist; a pod in no group alone;
- KubeNexus: a member waits until `min-available` pods carry its group name;
- YuniKorn: the application's first pod declares the task groups and YuniKorn reserves every member with a
  placeholder at once, so the driver runs and the executors then take the reserved places.

The PodGroups coscheduling and Volcano need are made as docs/gang-scheduling.md says: named after the group,
with the size Placer derived. A driver counted in its executors' gang would never start (the check at the end
of each test), which is what Placer wrote before.
"""

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.conftest import REPO
from tests.helpers import read_yaml, review_for, run, snapshot_of
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot

OBJECTS = Path(__file__).parent / "objects"
NAMESPACE = "spark"
EXECUTORS = 10
Pod = dict[str, Any]
Gate = Callable[[Pod, list[Pod], Mapping[str, int]], bool]
"""(pod, every pod of the namespace, PodGroup name -> minMember) -> may the pod be scheduled now."""


def _labels(pod: Pod) -> dict[str, str]:
    return dict(pod["metadata"].get("labels") or {})


def _annotations(pod: Pod) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


def _carrying(pods: list[Pod], where: Callable[[Pod], dict[str, str]], key: str, value: str) -> int:
    return sum(1 for pod in pods if where(pod).get(key) == value)


def coscheduling(pod: Pod, pods: list[Pod], groups: Mapping[str, int]) -> bool:
    group = _labels(pod).get("scheduling.x-k8s.io/pod-group")
    if group is None:
        return True
    return group in groups and _carrying(pods, _labels, "scheduling.x-k8s.io/pod-group", group) >= groups[group]


def volcano(pod: Pod, pods: list[Pod], groups: Mapping[str, int]) -> bool:
    group = _annotations(pod).get("scheduling.k8s.io/group-name")
    if group is None:
        return True  # Volcano's controller makes it a PodGroup of minMember 1
    return group in groups and _carrying(pods, _annotations, "scheduling.k8s.io/group-name", group) >= groups[group]


def kueue(pod: Pod, pods: list[Pod], groups: Mapping[str, int]) -> bool:
    group = _labels(pod).get("kueue.x-k8s.io/pod-group-name")
    if group is None:
        return True  # a single-pod workload
    total = int(_annotations(pod)["kueue.x-k8s.io/pod-group-total-count"])
    return _carrying(pods, _labels, "kueue.x-k8s.io/pod-group-name", group) >= total


def kubenexus(pod: Pod, pods: list[Pod], groups: Mapping[str, int]) -> bool:
    labels = _labels(pod)
    group, minimum = labels.get("pod-group.scheduling.kubenexus.io/name"), labels.get(
        "pod-group.scheduling.kubenexus.io/min-available")
    if group is None or minimum is None or int(minimum) <= 1:
        return True
    return _carrying(pods, _labels, "pod-group.scheduling.kubenexus.io/name", group) >= int(minimum)


def yunikorn(pod: Pod, pods: list[Pod], groups: Mapping[str, int]) -> bool:
    """Placeholders for every task group of the application are made when its originating pod arrives: a
    member is placed as soon as the originator declared its task group."""
    app = _labels(pod).get("yunikorn.apache.org/app-id")
    declared = [json.loads(_annotations(other)["yunikorn.apache.org/task-groups"]) for other in pods
                if _labels(other).get("yunikorn.apache.org/app-id") == app
                and "yunikorn.apache.org/task-groups" in _annotations(other)]
    names = {group["name"] for groups_of in declared for group in groups_of}
    return bool(declared) and _annotations(pod).get("yunikorn.apache.org/task-group-name") in names


GATES: dict[str, Gate] = {"coscheduling": coscheduling, "volcano": volcano, "kueue": kueue,
                          "kubenexus": kubenexus, "yunikorn": yunikorn}
QUEUES = {"volcano": "spark", "kueue": "spark", "yunikorn": "root.spark"}


def policy(flavour: str) -> str:
    if flavour == "volcano":
        return (REPO / "policies" / "gang-volcano-spark.yaml").read_text()
    queue = f", queue: {QUEUES[flavour]}" if flavour in QUEUES else ""
    return f"""apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: spark-gang}}
spec:
  rules:
  - {{name: gang, condition: "workload.kind == 'SparkApplication'", action: add-gang-labels,
     parameters: {{scheduler: {flavour}{queue}}}}}
"""


def admitted(snapshot: PolicySnapshot, obj: dict[str, Any]) -> dict[str, Any]:
    mutation = run(snapshot, review_for(obj, namespace=NAMESPACE))
    assert mutation.denial is None
    result: dict[str, Any] = jsonpatch.apply_patch(obj, mutation.patch) if mutation.patch else obj
    return result


def spark_pod(app: dict[str, Any], role: str, index: int, owner: Mapping[str, Any]) -> Pod:
    """A pod as Spark makes it from the role's SparkPodSpec (labels, annotations, schedulerName) plus the
    labels Spark writes on every pod (apache/spark BasicDriverFeatureStep, BasicExecutorFeatureStep)."""
    spec = app["spec"][role]
    name = "spark-pi-driver" if role == "driver" else f"spark-pi-exec-{index}"
    labels = {**(spec.get("labels") or {}), "spark-role": role, "spark-app-selector": "spark-3f6c5b1d",
              "sparkoperator.k8s.io/app-name": "spark-pi"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels,
                         "annotations": dict(spec.get("annotations") or {}), "ownerReferences": [dict(owner)]},
            "spec": {"schedulerName": spec.get("schedulerName", "default-scheduler"),
                     "containers": [{"name": f"spark-kubernetes-{role}", "image": "spark:3.5.3"}]}}


def pod_groups(app: dict[str, Any], flavour: str, snapshot: PolicySnapshot) -> dict[str, int]:
    """The PodGroups the user makes as the docs say (coscheduling, Volcano): the group Placer wrote on the
    executors, with the size Placer derived."""
    if flavour not in ("coscheduling", "volcano"):
        return {}
    mutation = run(snapshot, review_for(read_yaml(OBJECTS / "sparkapplication.yaml"), namespace=NAMESPACE))
    assert mutation.gang is not None
    sizes = {group.value: int(size.value) for (name, *_), (group, size) in mutation.gang.derived.items()
             if name == flavour and size is not None}
    assert sizes == {"spark-pi": EXECUTORS}
    return sizes


@pytest.mark.parametrize("flavour", sorted(GATES))
def test_the_driver_starts_then_the_executors_as_one_gang(flavour: str) -> None:
    gate = GATES[flavour]
    snapshot = snapshot_of(policy(flavour), namespaces=[NamespaceInfo(NAMESPACE, {"gang-scheduler": flavour,
                                                                                  "volcano-queue": "spark"})])
    app = admitted(snapshot, read_yaml(OBJECTS / "sparkapplication.yaml"))
    assert app["spec"]["executor"]["instances"] == EXECUTORS
    groups = pod_groups(app, flavour, snapshot)

    application = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication", "name": "spark-pi",
                   "uid": "0c1f", "controller": True}
    driver = spark_pod(app, "driver", 0, application)
    assert admitted(snapshot, driver) == driver, "made from a template Placer mutated: passed unchanged"
    pods = [driver]
    assert gate(driver, pods, groups), f"{flavour}: the driver must start by itself"

    by_driver = {"apiVersion": "v1", "kind": "Pod", "name": "spark-pi-driver", "uid": "7d2e", "controller": True}
    executors = []
    for index in range(1, EXECUTORS + 1):
        executor = admitted(snapshot, spark_pod(app, "executor", index, by_driver))
        executors.append(executor)
        pods.append(executor)
        if index < EXECUTORS and flavour != "yunikorn":
            assert not any(gate(pod, pods, groups) for pod in executors), f"{flavour}: {index} executors ran"
    assert all(gate(pod, pods, groups) for pod in executors), f"{flavour}: the executors run together"
    if flavour == "yunikorn":  # the placeholders reserved every executor when the driver arrived
        task_groups = json.loads(_annotations(driver)["yunikorn.apache.org/task-groups"])
        assert {group["name"]: group["minMember"] for group in task_groups} == {"driver": 1, "executor": EXECUTORS}
    else:  # the driver counted in its executors' gang would wait for them forever
        counted = {**driver, "metadata": {**driver["metadata"], "labels": {**_labels(executors[0]),
                                                                            "spark-role": "driver"},
                                          "annotations": _annotations(executors[0])}}
        stalled = {name: size + 1 for name, size in groups.items()}
        if flavour in ("kueue", "kubenexus"):
            counted = _with_size(counted, flavour, EXECUTORS + 1)
        assert not gate(counted, [counted], stalled)


def _with_size(pod: Pod, flavour: str, size: int) -> Pod:
    where, key = {"kueue": ("annotations", "kueue.x-k8s.io/pod-group-total-count"),
                  "kubenexus": ("labels", "pod-group.scheduling.kubenexus.io/min-available")}[flavour]
    metadata = {**pod["metadata"], where: {**pod["metadata"][where], key: str(size)}}
    return {**pod, "metadata": metadata}
