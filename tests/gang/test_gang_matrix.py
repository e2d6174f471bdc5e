"""Every gang flavour x every workload kind: each member pod template ends up with the same group identity
and the right size, written under the scheduler's own keys, and a second pass changes nothing.

Objects are real-shaped (as stored after their API server's or operator's defaulting); expected groups and
sizes are written out by hand below, from the counting rules of docs/gang-scheduling.md, not computed by Placer.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.helpers import compile_errors, read_yaml, review_for, run, snapshot_of
from webhook.policy.snapshot import NamespaceInfo

OBJECTS = Path(__file__).parent / "objects"
NAMESPACE = NamespaceInfo("team-a", {}, {})


@dataclass(frozen=True)
class Member:
    """Where one member template's metadata and schedulerName live, and its YuniKorn task group."""

    metadata: tuple[str | int, ...]
    scheduler: tuple[str | int, ...]
    task_group: str
    count: int


def template(*path: str | int, task_group: str, count: int) -> Member:
    return Member((*path, "metadata"), (*path, "spec", "schedulerName"), task_group, count)


def spark(role: str, count: int) -> Member:
    return Member(("spec", role), ("spec", role, "schedulerName"), role, count)


@dataclass(frozen=True)
class Case:
    group: str
    size: int | None
    members: tuple[Member, ...]
    not_members: tuple[tuple[str | int, ...], ...] = ()


CASES = {
    "deployment": Case("inference", 4, (template("spec", "template", task_group="inference", count=4),)),
    "statefulset": Case("etcd-ring", 3, (template("spec", "template", task_group="etcd-ring", count=3),)),
    "job": Case("allreduce", 8, (template("spec", "template", task_group="allreduce", count=8),)),
    "cronjob": Case("nightly-train", 4, (
        template("spec", "jobTemplate", "spec", "template", task_group="nightly-train", count=4),)),
    # The executor's group is the Spark application id every pod of the app carries; its size is not on the pod.
    "pod-spark-executor": Case("spark-6f1c0a8e2d3b4c5d9e7f", None, (
        template(task_group="spark-6f1c0a8e2d3b4c5d9e7f", count=0),)),
    # YuniKorn's placeholders count the driver and the executors; the others count the executors only.
    "sparkapplication": Case("spark-pi", 11, (spark("driver", 1), spark("executor", 10))),
    "pytorchjob": Case("bert-finetune", 9, (
        template("spec", "pytorchReplicaSpecs", "Master", "template", task_group="master", count=1),
        template("spec", "pytorchReplicaSpecs", "Worker", "template", task_group="worker", count=8))),
    "tfjob": Case("mnist-ps", 6, (
        template("spec", "tfReplicaSpecs", "PS", "template", task_group="ps", count=2),
        template("spec", "tfReplicaSpecs", "Worker", "template", task_group="worker", count=4))),
    "mpijob": Case("horovod-resnet", 5, (
        template("spec", "mpiReplicaSpecs", "Launcher", "template", task_group="launcher", count=1),
        template("spec", "mpiReplicaSpecs", "Worker", "template", task_group="worker", count=4))),
    "raycluster": Case("raycluster-kuberay", 6, (
        template("spec", "headGroupSpec", "template", task_group="headgroup", count=1),
        template("spec", "workerGroupSpecs", 0, "template", task_group="gpu-group", count=3),
        template("spec", "workerGroupSpecs", 1, "template", task_group="cpu-group", count=2))),
    "rayjob": Case("rayjob-sample", 3, (
        template("spec", "rayClusterSpec", "headGroupSpec", "template", task_group="headgroup", count=1),
        template("spec", "rayClusterSpec", "workerGroupSpecs", 0, "template", task_group="small-group", count=2)),
        not_members=(("spec", "submitterPodTemplate", "metadata"),)),
    "jobset": Case("tpu-train", 9, (
        template("spec", "replicatedJobs", 0, "template", "spec", "template", task_group="leader", count=1),
        template("spec", "replicatedJobs", 1, "template", "spec", "template", task_group="workers", count=8))),
}

SPARK_EXECUTORS = Case("spark-pi", 10, (spark("executor", 10),), not_members=(("spec", "driver"),))
"""Where the scheduler waits for a gang's members to exist, the driver, which creates the executors once it
runs, is not in their gang (`webhook.gang.members`)."""

FLAVOURS = {
    # flavour: (group key, size key, queue key, scheduler name), each as (where, key)
    "coscheduling": (("labels", "scheduling.x-k8s.io/pod-group"), None, None, None),
    "volcano": (("annotations", "scheduling.k8s.io/group-name"),
                ("annotations", "scheduling.volcano.sh/group-min-member"),
                ("annotations", "scheduling.volcano.sh/queue-name"), "volcano"),
    "kueue": (("labels", "kueue.x-k8s.io/pod-group-name"), ("annotations", "kueue.x-k8s.io/pod-group-total-count"),
              ("labels", "kueue.x-k8s.io/queue-name"), None),
    "yunikorn": (("labels", "yunikorn.apache.org/app-id"), None, ("labels", "yunikorn.apache.org/queue"), "yunikorn"),
    "kubenexus": (("labels", "pod-group.scheduling.kubenexus.io/name"),
                  ("labels", "pod-group.scheduling.kubenexus.io/min-available"), None, "kubenexus-scheduler"),
}


def policy(scheduler: str, **parameters: Any) -> str:
    params = {"scheduler": scheduler, **parameters}
    return json.dumps({"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy",
                       "metadata": {"name": "gangs"},
                       "spec": {"rules": [{"name": "gang", "action": "add-gang-labels", "parameters": params}]}})


def at(obj: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        obj = obj[key] if isinstance(key, int) else (obj or {}).get(key)
    return obj


def admit(name: str, text: str) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    given = read_yaml(OBJECTS / f"{name}.yaml")
    snapshot = snapshot_of(text, namespaces=[NAMESPACE])
    mutation = run(snapshot, review_for(given, namespace="team-a"))
    assert mutation.denial is None
    output = jsonpatch.apply_patch(given, mutation.patch)
    second = run(snapshot, review_for(output, namespace="team-a"))
    assert second.patch == [], "a second pass over Placer's own output must change nothing"
    return given, output, mutation.warnings


def meta(obj: Any, member: Member, where: str) -> dict[str, Any]:
    """Labels or annotations of a member: a SparkPodSpec keeps them right under the role."""
    return at(obj, (*member.metadata, where)) or {}


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_member_gets_the_same_group_and_size(name: str, flavour: str) -> None:
    case = SPARK_EXECUTORS if name == "sparkapplication" and flavour != "yunikorn" else CASES[name]
    queue = "batch" if FLAVOURS[flavour][2] else None
    _, output, warnings = admit(name, policy(flavour, **({"queue": queue} if queue else {})))
    group_key, size_key, queue_key, scheduler = FLAVOURS[flavour]
    for member in case.members:
        assert meta(output, member, group_key[0]).get(group_key[1]) == case.group, member
        if size_key is not None:
            assert meta(output, member, size_key[0]).get(size_key[1]) == (
                str(case.size) if case.size is not None else None), member
        if queue_key is not None:
            assert meta(output, member, queue_key[0]).get(queue_key[1]) == "batch"
        assert at(output, member.scheduler) == (scheduler or "default-scheduler" if name in (
            "deployment", "statefulset", "job", "cronjob", "pod-spark-executor") else scheduler)
        if flavour == "yunikorn" and case.size is not None:
            annotations = meta(output, member, "annotations")
            groups = json.loads(annotations["yunikorn.apache.org/task-groups"])
            assert {g["name"]: g["minMember"] for g in groups} == {m.task_group: m.count for m in case.members}
            assert sum(g["minMember"] for g in groups) == case.size
            assert annotations["yunikorn.apache.org/task-group-name"] == member.task_group
    for path in case.not_members:
        assert not any("group" in key for part in ("labels", "annotations")
                       for key in (at(output, (*path, part)) or {})), f"{path}: not in the gang"
    unknown = [w for w in warnings if "unknown" in w]
    needs_size = size_key is not None or flavour == "yunikorn"
    assert bool(unknown) == (case.size is None and needs_size), warnings


def test_a_volcano_spark_gang_is_the_ten_executors_and_the_driver_schedules_by_itself() -> None:
    """The driver in its executors' gang would wait for executors only the running driver creates."""
    _, output, _ = admit("sparkapplication", policy("volcano", queue="spark"))
    executor = output["spec"]["executor"]["annotations"]
    assert executor["scheduling.volcano.sh/group-min-member"] == "10"
    assert executor["scheduling.k8s.io/group-name"] == "spark-pi"
    assert output["spec"]["driver"]["annotations"] == {
        "scheduling.volcano.sh/queue-name": "spark", "placer.dev/applied": "gangs/gang"}
    for role in ("driver", "executor"):
        assert output["spec"][role]["schedulerName"] == "volcano"
    assert output["spec"]["executor"]["labels"] == {"version": "3.5.3"}, "the user's labels stay"


def test_pytorchjob_master_and_eight_workers_get_nine() -> None:
    _, output, _ = admit("pytorchjob", policy("kubenexus"))
    for role in ("Master", "Worker"):
        labels = output["spec"]["pytorchReplicaSpecs"][role]["template"]["metadata"]["labels"]
        assert labels == {"pod-group.scheduling.kubenexus.io/name": "bert-finetune",
                          "pod-group.scheduling.kubenexus.io/min-available": "9"}


def test_min_available_wins_over_the_workload_count() -> None:
    _, output, warnings = admit("pod-spark-executor", policy("volcano", minAvailable=11))
    assert output["metadata"]["annotations"]["scheduling.volcano.sh/group-min-member"] == "11"
    assert output["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "spark-6f1c0a8e2d3b4c5d9e7f"
    assert warnings == []


def test_group_name_parameter_wins_and_is_made_a_valid_label_value() -> None:
    long_name = "team-a-" + "very-long-experiment-name-" * 4 + "run-1"
    _, output, _ = admit("job", policy("kueue", groupName=long_name))
    value = output["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"]
    assert len(value) <= 63 and value.startswith("team-a-very-long-experiment-name-")
    assert value.rsplit("-", 1)[1].isalnum() and len(value.rsplit("-", 1)[1]) == 8
    _, again, _ = admit("job", policy("kueue", groupName=long_name))
    assert again == output, "truncation is stable: every member computes the same name"
    _, other, _ = admit("job", policy("kueue", groupName=long_name.replace("run-1", "run-2")))
    assert other["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] != value


def test_a_long_workload_name_is_truncated_with_a_hash_suffix() -> None:
    given = read_yaml(OBJECTS / "deployment.yaml")
    given["metadata"]["name"] = "inference-" + "x" * 80
    snapshot = snapshot_of(policy("coscheduling"), namespaces=[NAMESPACE])
    mutation = run(snapshot, review_for(given, namespace="team-a"))
    output = jsonpatch.apply_patch(given, mutation.patch)
    value = output["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"]
    assert len(value) == 63
    assert value[:54] == ("inference-" + "x" * 80)[:54] and value[54] == "-"
    assert all(c in "0123456789abcdef" for c in value[55:])


def test_an_existing_gang_key_is_kept_and_only_missing_companions_are_filled_in() -> None:
    given = read_yaml(OBJECTS / "job.yaml")
    given["spec"]["template"]["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "hand-named"}
    snapshot = snapshot_of(policy("volcano", queue="batch"), namespaces=[NAMESPACE])
    mutation = run(snapshot, review_for(given, namespace="team-a"))
    output = jsonpatch.apply_patch(given, mutation.patch)
    annotations = output["spec"]["template"]["metadata"]["annotations"]
    assert annotations["scheduling.k8s.io/group-name"] == "hand-named"
    assert annotations["scheduling.volcano.sh/group-min-member"] == "8"
    assert annotations["scheduling.volcano.sh/queue-name"] == "batch"
    assert mutation.warnings == []


def test_a_key_of_another_flavour_names_the_group() -> None:
    given = read_yaml(OBJECTS / "deployment.yaml")
    given["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "pg-inference"
    snapshot = snapshot_of(policy("kubenexus"), namespaces=[NAMESPACE])
    output = jsonpatch.apply_patch(given, run(snapshot, review_for(given, namespace="team-a")).patch)
    assert output["spec"]["template"]["metadata"]["labels"]["pod-group.scheduling.kubenexus.io/name"] == "pg-inference"


def test_a_different_group_parameter_does_not_override_an_existing_key_without_override() -> None:
    given = read_yaml(OBJECTS / "job.yaml")
    given["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "mine"
    snapshot = snapshot_of(policy("kueue", groupName="theirs"), namespaces=[NAMESPACE])
    mutation = run(snapshot, review_for(given, namespace="team-a"))
    output = jsonpatch.apply_patch(given, mutation.patch)
    assert output["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "mine"
    assert any("kept" in warning for warning in mutation.warnings)


def test_unknown_size_leaves_the_size_key_out_with_a_warning() -> None:
    given = read_yaml(OBJECTS / "deployment.yaml")
    given["kind"] = "DaemonSet"
    del given["spec"]["replicas"], given["spec"]["strategy"], given["spec"]["progressDeadlineSeconds"]
    snapshot = snapshot_of(policy("kubenexus"), namespaces=[NAMESPACE])
    mutation = run(snapshot, review_for(given, namespace="team-a"))
    labels = jsonpatch.apply_patch(given, mutation.patch)["spec"]["template"]["metadata"]["labels"]
    assert labels["pod-group.scheduling.kubenexus.io/name"] == "inference"
    assert "pod-group.scheduling.kubenexus.io/min-available" not in labels
    assert any("min-available left out" in warning and "minAvailable" in warning for warning in mutation.warnings)


def test_an_explicit_scheduler_name_wins_and_another_scheduler_is_a_conflict() -> None:
    _, output, _ = admit("job", policy("volcano", schedulerName="volcano-gpu"))
    assert output["spec"]["template"]["spec"]["schedulerName"] == "volcano-gpu"
    given = read_yaml(OBJECTS / "job.yaml")
    given["spec"]["template"]["spec"]["schedulerName"] = "my-scheduler"
    snapshot = snapshot_of(policy("yunikorn"), namespaces=[NAMESPACE])
    mutation = run(snapshot, review_for(given, namespace="team-a"))
    output = jsonpatch.apply_patch(given, mutation.patch)
    assert output["spec"]["template"]["spec"]["schedulerName"] == "my-scheduler"
    assert any("schedulerName" in warning and "kept" in warning for warning in mutation.warnings)


def test_yunikorn_min_resource_is_each_member_pods_requests() -> None:
    _, output, _ = admit("raycluster", policy("yunikorn"))
    annotations = output["spec"]["headGroupSpec"]["template"]["metadata"]["annotations"]
    groups = {g["name"]: g for g in json.loads(annotations["yunikorn.apache.org/task-groups"])}
    assert groups["headgroup"]["minResource"] == {"cpu": "1", "memory": "2Gi"}
    assert groups["gpu-group"]["minResource"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
    _, spark_output, _ = admit("sparkapplication", policy("yunikorn"))
    spark_groups = json.loads(spark_output["spec"]["driver"]["annotations"]["yunikorn.apache.org/task-groups"])
    # 512m of JVM heap + the 384Mi minimum overhead Spark adds to the pod's memory request.
    assert spark_groups[0] == {"name": "driver", "minMember": 1, "minResource": {"cpu": "1", "memory": "896Mi"}}


@pytest.mark.parametrize("text,problem", [
    (policy("coscheduling", queue="q"), "queue"),
    (policy("kubenexus", queue="q"), "queue"),
    (policy("slurm"), "scheduler"),
    (policy("volcano", minAvailable=0), "minAvailable"),
    (policy("volcano", groupName="-bad-"), "groupName"),
])
def test_bad_gang_parameters_are_refused_when_the_policy_loads(text: str, problem: str) -> None:
    errors = compile_errors(text)
    assert any(problem in error for error in errors), errors
