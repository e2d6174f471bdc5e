"""Every action works on operator resources, evaluated once per pod template."""

import json
from typing import Any

import jsonpatch

from tests.gang.test_gang_matrix import NAMESPACE, OBJECTS
from tests.helpers import read_yaml, review_for, run, snapshot_of


def rules(*items: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy",
                       "metadata": {"name": "ops"}, "spec": {"rules": list(items)}})


def admit(obj: dict[str, Any], text: str) -> tuple[dict[str, Any], Any]:
    snapshot = snapshot_of(text, namespaces=[NAMESPACE])
    mutation = run(snapshot, review_for(obj, namespace="team-a"))
    output = jsonpatch.apply_patch(obj, mutation.patch)
    assert run(snapshot, review_for(output, namespace="team-a")).patch == []
    return output, mutation


GPU_TOLERATION = {"name": "gpu", "condition": "'nvidia.com/gpu' in resources.limits", "action": "add-toleration",
                  "parameters": {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}}


def test_a_condition_on_resources_is_evaluated_per_template() -> None:
    output, _ = admit(read_yaml(OBJECTS / "mpijob.yaml"), rules(GPU_TOLERATION))
    specs = output["spec"]["mpiReplicaSpecs"]
    assert "tolerations" not in specs["Launcher"]["template"]["spec"]
    assert specs["Worker"]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert specs["Worker"]["template"]["metadata"]["annotations"] == {"placer.dev/applied": "ops/gpu"}


def test_a_spark_executor_with_a_gpu_is_recognised_from_its_gpu_field() -> None:
    app = read_yaml(OBJECTS / "sparkapplication.yaml")
    app["spec"]["executor"]["gpu"] = {"name": "nvidia.com/gpu", "quantity": 1}
    output, _ = admit(app, rules(GPU_TOLERATION))
    assert "tolerations" not in output["spec"]["driver"]
    assert output["spec"]["executor"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_spark_fields_are_written_where_the_operator_reads_them() -> None:
    output, _ = admit(read_yaml(OBJECTS / "sparkapplication.yaml"), rules(
        {"name": "pool", "action": "add-node-selector", "parameters": {"pool": "spark"}},
        {"name": "zone", "action": "add-node-affinity",
         "parameters": {"key": "topology.kubernetes.io/zone", "values": "eu-west-1a,eu-west-1b"}},
        {"name": "prio", "action": "set-priority-class", "parameters": {"priorityClassName": "batch-low"}},
        {"name": "team", "action": "add-labels", "parameters": {"team": "data"}},
        {"name": "hosts", "action": "add-pod-anti-affinity", "parameters": {"topologyKey": "kubernetes.io/hostname"}},
    ))
    for role in ("driver", "executor"):
        spec = output["spec"][role]
        assert spec["nodeSelector"] == {"pool": "spark"}
        assert spec["priorityClassName"] == "batch-low"
        assert spec["labels"] == {"version": "3.5.3", "team": "data"}
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                                "values": ["eu-west-1a", "eu-west-1b"]}]}]
        anti = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
        selector = {"matchLabels": {"sparkoperator.k8s.io/app-name": "spark-pi"}}
        assert anti["podAffinityTerm"]["labelSelector"] == selector
        assert "containers" not in spec and "metadata" not in spec, "the pod-template view never leaks into the CR"


def test_an_application_level_spark_node_selector_is_merged_into_not_duplicated() -> None:
    app = read_yaml(OBJECTS / "sparkapplication.yaml")
    app["spec"]["nodeSelector"] = {"disk": "ssd"}
    output, _ = admit(app, rules({"name": "pool", "action": "add-node-selector", "parameters": {"pool": "spark"}}))
    assert output["spec"]["nodeSelector"] == {"disk": "ssd", "pool": "spark"}
    assert "nodeSelector" not in output["spec"]["driver"] and "nodeSelector" not in output["spec"]["executor"]


def test_topology_spread_goes_to_the_spark_pod_template() -> None:
    output, _ = admit(read_yaml(OBJECTS / "sparkapplication.yaml"), rules(
        {"name": "zones", "action": "add-topology-spread",
         "parameters": {"topologyKey": "topology.kubernetes.io/zone"}}))
    constraint = output["spec"]["executor"]["template"]["spec"]["topologySpreadConstraints"][0]
    assert constraint["topologyKey"] == "topology.kubernetes.io/zone"
    assert constraint["labelSelector"] == {"matchLabels": {"sparkoperator.k8s.io/app-name": "spark-pi"}}


def test_a_ray_job_submitter_gets_ordinary_actions_but_no_gang_keys() -> None:
    output, _ = admit(read_yaml(OBJECTS / "rayjob.yaml"), rules(
        {"name": "tol", "action": "add-toleration", "parameters": {"key": "batch", "operator": "Exists"}},
        {"name": "gang", "action": "add-gang-labels", "parameters": {"scheduler": "kubenexus"}}))
    submitter = output["spec"]["submitterPodTemplate"]
    assert submitter["spec"]["tolerations"] == [{"key": "batch", "operator": "Exists"}]
    assert submitter["metadata"]["annotations"] == {"placer.dev/applied": "ops/tol,ops/gang"}
    assert "labels" not in submitter["metadata"] and "schedulerName" not in submitter["spec"]
    head = output["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"]["labels"]
    assert head["pod-group.scheduling.kubenexus.io/min-available"] == "3"


def test_an_operator_update_that_leaves_the_templates_alone_gets_no_patch() -> None:
    old = read_yaml(OBJECTS / "pytorchjob.yaml")
    new = read_yaml(OBJECTS / "pytorchjob.yaml")
    new["spec"]["runPolicy"]["suspend"] = True
    snapshot = snapshot_of(rules(GPU_TOLERATION), namespaces=[NAMESPACE])
    mutation = run(snapshot, review_for(new, namespace="team-a", operation="UPDATE", old=old))
    assert mutation.patch == [] and mutation.passed_through == "the update does not change the pod template"


def test_workload_replicas_of_an_operator_resource_counts_every_pod() -> None:
    output, _ = admit(read_yaml(OBJECTS / "jobset.yaml"), rules(
        {"name": "big", "condition": "workload.replicas == 9 && workload.kind == 'JobSet'",
         "action": "add-labels", "parameters": {"size": "large"}}))
    for job in output["spec"]["replicatedJobs"]:
        assert job["template"]["spec"]["template"]["metadata"]["labels"] == {"size": "large"}
