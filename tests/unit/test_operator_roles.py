"""Each operator template shows the role label its operator writes on the pods made from it.

A SparkApplication's driver and executor, a RayCluster's head and worker groups, a Kubeflow job's replica
types, an MPIJob's launcher and workers: `pod.metadata.labels` carries the operator's own role label, so a
condition written against the template holds on the Pod the operator makes from it later, and the label is
never written into the object (the operator writes it).
"""

from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.helpers import read_yaml, review_for, run, snapshot_of
from webhook.policy.snapshot import NamespaceInfo

OBJECTS = Path(__file__).parents[1] / "gang" / "objects"
NAMESPACE = NamespaceInfo("team-a")


def policy(key: str, value: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "roles"},
        "spec": {"rules": [{"name": "by-role", "condition": f"pod.metadata.labels[?'{key}'].orValue('') == '{value}'",
                            "action": "add-node-selector", "parameters": {"capacity": "on-demand"}}]}})


def mutated(obj: dict[str, Any], key: str, value: str) -> dict[str, Any]:
    mutation = run(snapshot_of(policy(key, value), namespaces=[NAMESPACE]), review_for(obj, namespace="team-a"))
    result: dict[str, Any] = jsonpatch.apply_patch(obj, mutation.patch)
    return result


def at(obj: Any, *path: str | int) -> Any:
    for key in path:
        obj = obj[key]
    return obj


@pytest.mark.parametrize(("name", "key", "value", "chosen", "others"), [
    ("sparkapplication", "spark-role", "driver", ("spec", "driver"), [("spec", "executor")]),
    ("sparkapplication", "spark-role", "executor", ("spec", "executor"), [("spec", "driver")]),
    ("raycluster", "ray.io/node-type", "head", ("spec", "headGroupSpec", "template", "spec"),
     [("spec", "workerGroupSpecs", 0, "template", "spec"), ("spec", "workerGroupSpecs", 1, "template", "spec")]),
    ("raycluster", "ray.io/group", "cpu-group", ("spec", "workerGroupSpecs", 1, "template", "spec"),
     [("spec", "headGroupSpec", "template", "spec"), ("spec", "workerGroupSpecs", 0, "template", "spec")]),
    ("pytorchjob", "training.kubeflow.org/replica-type", "master",
     ("spec", "pytorchReplicaSpecs", "Master", "template", "spec"),
     [("spec", "pytorchReplicaSpecs", "Worker", "template", "spec")]),
    ("mpijob", "training.kubeflow.org/job-role", "launcher",
     ("spec", "mpiReplicaSpecs", "Launcher", "template", "spec"),
     [("spec", "mpiReplicaSpecs", "Worker", "template", "spec")]),
])
def test_a_condition_on_the_operators_role_label_picks_its_template(
        name: str, key: str, value: str, chosen: tuple[Any, ...], others: list[tuple[Any, ...]]) -> None:
    obj = read_yaml(OBJECTS / f"{name}.yaml")
    result = mutated(obj, key, value)
    assert at(result, *chosen)["nodeSelector"] == {"capacity": "on-demand"}
    for other in others:
        assert "nodeSelector" not in at(result, *other)
    # The role label is the operator's to write: never copied into the object.
    assert key not in yaml.safe_dump(result)


def test_the_driver_pod_the_operator_makes_agrees_with_its_template() -> None:
    """The rule ran on `spec.driver`; the driver Pod Spark makes from it carries `spark-role: driver` and passes."""
    app = mutated(read_yaml(OBJECTS / "sparkapplication.yaml"), "spark-role", "driver")
    driver = app["spec"]["driver"]
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "spark-pi-driver", "namespace": "team-a",
        "labels": {**driver.get("labels", {}), "spark-role": "driver", "sparkoperator.k8s.io/app-name": "spark-pi"},
        "annotations": dict(driver.get("annotations", {})),
        "ownerReferences": [{"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                             "name": "spark-pi", "uid": "5f1c", "controller": True}]},
        "spec": {"nodeSelector": driver["nodeSelector"],
                 "containers": [{"name": "spark-kubernetes-driver", "image": "spark:3.5.3"}]}}
    snapshot = snapshot_of(policy("spark-role", "driver"), namespaces=[NAMESPACE])
    assert run(snapshot, review_for(pod, namespace="team-a")).patch == []
    bare = {**pod, "metadata": {key: value for key, value in pod["metadata"].items() if key != "annotations"}}
    assert run(snapshot, review_for(bare, namespace="team-a")).patch == []  # the Pod alone: the same rule holds
