"""`scheduler: native` on operator resources: the resource is marked, every pod its operator makes names the
PodGroup the controller keeps for it, and the names on both sides agree.

The pods are built as the operators build them: JobSet makes one Job per replica of each replicated job
(`<jobset>-<replicatedJob>-<index>`) and labels every pod with `jobset.sigs.k8s.io/replicatedjob-name` and
`jobset.sigs.k8s.io/job-index` (kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go); every operator
copies the template's annotations onto its pods and sets itself (or its Job) as the controller owner.
"""

import copy
import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest

from tests.conftest import REPO
from tests.helpers import read_yaml, review_for, run, snapshot_of
from tests.unit.test_gang_capacity import gpu_nodes, publish
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.cluster.podgroups.native_operators import desired_groups
from webhook.gang.native_operators import marked_groups
from webhook.placement.feasibility import PlacementCheck
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.workloads import default_workload_table

GOLDEN = Path(__file__).parents[1] / "golden" / "cases"
POLICY = (REPO / "policies" / "gang-native-operators.yaml").read_text()
TABLE = default_workload_table()
JOBSET = TABLE.lookup("jobset.x-k8s.io", "JobSet")


def served(version: str | None) -> PolicySnapshot:
    snapshot = snapshot_of(POLICY, namespaces=[NamespaceInfo("training", {"gang-scheduler": "native"})])
    return dataclasses.replace(snapshot, native_gang_version=version)


def admitted(obj: dict[str, Any], snapshot: PolicySnapshot) -> tuple[dict[str, Any], Any]:
    mutation = run(snapshot, review_for(obj, namespace="training"))
    return jsonpatch.apply_patch(obj, mutation.patch), mutation


def jobset() -> dict[str, Any]:
    obj: dict[str, Any] = read_yaml(GOLDEN / "gang-native-jobset" / "input.yaml")
    return obj


def stored(obj: dict[str, Any], uid: str = "jobset-uid") -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["uid"] = uid
    return obj


def jobset_pods(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod of every child Job, as the JobSet and Job controllers create them from the stored JobSet."""
    pods = []
    name = obj["metadata"]["name"]
    for job in obj["spec"]["replicatedJobs"]:
        template = job["template"]["spec"]["template"]
        for index in range(job.get("replicas", 1)):
            job_name = f"{name}-{job['name']}-{index}"
            for pod_index in range(job["template"]["spec"]["parallelism"]):
                metadata = copy.deepcopy(template.get("metadata") or {})
                metadata.update(name=f"{job_name}-{pod_index}-abcde", namespace="training", ownerReferences=[
                    {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": f"{job_name}-uid",
                     "controller": True, "blockOwnerDeletion": True}])
                metadata.setdefault("labels", {}).update({
                    "batch.kubernetes.io/job-name": job_name, "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": job["name"],
                    "jobset.sigs.k8s.io/job-index": str(index)})
                pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                             "spec": copy.deepcopy(template["spec"])})
    return pods


@pytest.mark.parametrize("version", ["v1alpha2", "v1beta1", None])
def test_every_pod_of_a_jobset_names_its_child_jobs_pod_group_and_each_gang_fills_its_min_count(
        version: str | None) -> None:
    marked, mutation = admitted(jobset(), served(version))
    assert marked["metadata"]["labels"]["placer.dev/pod-group"] == "tpu-train"
    assert marked["metadata"]["annotations"]["placer.dev/pod-group-api"] == "native"
    assert mutation.warnings == []
    wanted = desired_groups(JOBSET, "v1alpha2", stored(marked))  # type: ignore[arg-type]
    assert isinstance(wanted, tuple)
    sizes = {group.name: group.min_member for group in wanted}
    assert sizes == {"tpu-train-leader-0": 1, "tpu-train-workers-0": 4, "tpu-train-workers-1": 4}
    named: Counter[str] = Counter()
    for pod in jobset_pods(marked):
        result, pod_mutation = admitted(pod, served(version))
        named[result["spec"]["schedulingGroup"]["podGroupName"]] += 1
        assert pod_mutation.passed_through is None and pod_mutation.warnings == []
        assert run(served(version), review_for(result, namespace="training")).patch == [], "set once"
    assert dict(named) == sizes, "each child Job's pods fill exactly its PodGroup"


def test_explain_says_which_group_a_pod_gets_and_why() -> None:
    marked, mutation = admitted(jobset(), served("v1alpha2"))
    assert mutation.notes == [
        "native gang: one PodGroup per child Job, kept by Placer's controller and owned by the JobSet: "
        "tpu-train-leader-0 (minCount 1), tpu-train-workers-0 (minCount 4), tpu-train-workers-1 (minCount 4); "
        "each pod names its own at its creation"]
    pod = jobset_pods(marked)[-1]
    _, pod_mutation = admitted(pod, served("v1alpha2"))
    assert pod_mutation.notes == [
        "native gang: spec.schedulingGroup names PodGroup tpu-train-workers-1 (placer.dev/native-pod-group of its "
        "template, jobset.sigs.k8s.io/replicatedjob-name=workers and jobset.sigs.k8s.io/job-index=1: one PodGroup "
        "per child Job); no rule ran: created by Job/tpu-train-workers-1 from a template Placer already mutated"]


@pytest.mark.parametrize("case, kind, size", [
    ("gang-native-pytorchjob", ("kubeflow.org", "PyTorchJob"), 9),  # Master 1 + Worker 8
    ("gang-native-raycluster", ("ray.io", "RayCluster"), 6),  # head + 3 + 2
    ("gang-native-raycluster-autoscaling", ("ray.io", "RayCluster"), 2),  # head + minReplicas 1 + 0
    ("gang-native-sparkapplication", ("sparkoperator.k8s.io", "SparkApplication"), 10),  # the executors
    ("gang-native-spark-dynamic-allocation", ("sparkoperator.k8s.io", "SparkApplication"), 2),  # minExecutors
    ("gang-native-mpijob-at-startup", ("kubeflow.org", "MPIJob"), 5),  # launcher + 4 workers
    ("gang-native-mpijob-wait-for-workers", ("kubeflow.org", "MPIJob"), 4),  # the workers
])
def test_one_gang_per_resource_counts_the_pods_made_together(case: str, kind: tuple[str, str], size: int) -> None:
    """The controller's PodGroup counts what the admission marked: the pods that exist before any must run."""
    expected = read_yaml(GOLDEN / case / "expected.yaml")
    workload = TABLE.lookup(*kind)
    assert workload is not None
    assert marked_groups(workload, expected) == [(expected["metadata"]["name"], size)]


def test_where_no_pod_group_api_is_served_the_resource_and_its_pods_are_left_as_they_are() -> None:
    given = jobset()
    result, mutation = admitted(copy.deepcopy(given), served(""))
    assert result == given
    assert len(mutation.warnings) == 1 and "serves no PodGroup API" in mutation.warnings[0]
    marked, _ = admitted(jobset(), served("v1alpha2"))
    pod = jobset_pods(marked)[0]
    result, pod_mutation = admitted(copy.deepcopy(pod), served(""))
    assert result == pod, "a pod of a JobSet marked earlier never names a group that cannot exist"
    assert pod_mutation.warnings == [
        "native gang: the API server serves no PodGroup API: no group named; the pod schedules by itself"]


def test_a_pod_that_names_a_group_is_left_alone_and_one_without_owner_still_joins_its_gang() -> None:
    marked, _ = admitted(jobset(), served("v1alpha2"))
    pod = jobset_pods(marked)[0]
    naming = copy.deepcopy(pod)
    naming["spec"]["schedulingGroup"] = {"podGroupName": "mine"}
    result, mutation = admitted(copy.deepcopy(naming), served("v1alpha2"))
    assert result == naming and mutation.notes == [
        "native gang: spec.schedulingGroup already names mine: left alone"]
    orphan = copy.deepcopy(pod)  # e.g. a Spark driver where the Spark operator's webhook is off
    del orphan["metadata"]["ownerReferences"]
    result, mutation = admitted(copy.deepcopy(orphan), served("v1alpha2"))
    assert result["spec"]["schedulingGroup"] == {"podGroupName": "tpu-train-leader-0"}


@pytest.mark.parametrize("case, change, reason", [
    ("gang-native-sparkapplication", {"batchScheduler": "volcano"},
     "the Spark operator's batch scheduler volcano keeps its group (spec.batchScheduler)"),
    ("gang-native-pytorchjob", {"runPolicy": {"schedulingPolicy": {"minAvailable": 9}}},
     "the training operator's gang scheduling keeps its group (spec.runPolicy.schedulingPolicy)"),
])
def test_a_resource_whose_operator_keeps_its_group_is_left_alone(case: str, change: dict[str, Any],
                                                                   reason: str) -> None:
    given = read_yaml(GOLDEN / case / "input.yaml")
    given["metadata"]["namespace"] = "training"
    given["spec"].update(change)
    result, mutation = admitted(copy.deepcopy(given), served("v1alpha2"))
    assert result == given
    assert any(f"native gang: {reason}: left alone" in warning for warning in mutation.warnings)


def test_a_template_naming_its_own_group_leaves_the_whole_resource_alone() -> None:
    """One template's pods naming another group would never join the gang: no template is marked."""
    given = jobset()
    given["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["schedulingGroup"] = {
        "podGroupName": "own"}
    result, mutation = admitted(copy.deepcopy(given), served("v1alpha2"))
    assert result == given
    assert any("template workers already names spec.schedulingGroup own: the whole JobSet left alone" in warning
               for warning in mutation.warnings)


def test_a_rayjobs_cluster_wants_no_pod_group_of_its_own() -> None:
    """A RayCluster made by a RayJob, carrying the RayJob's marks (were KubeRay to copy them): the RayJob keeps
    the one PodGroup, the cluster none (two owners of one name would fight)."""
    cluster = read_yaml(GOLDEN / "gang-native-raycluster" / "expected.yaml")
    cluster["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "batch",
                                               "uid": "u", "controller": True}]
    kind = TABLE.lookup("ray.io", "RayCluster")
    assert kind is not None
    assert marked_groups(kind, cluster) == "made by RayJob batch, which keeps the PodGroup"


def test_create_pod_group_for_coscheduling_is_still_refused_on_an_operator_resource() -> None:
    policy = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: c}\nspec:\n  rules:\n"
              "  - {name: g, action: add-gang-labels, parameters: {scheduler: coscheduling, createPodGroup: true}}\n")
    result, mutation = admitted(jobset(), snapshot_of(policy))
    assert "labels" not in result["metadata"], "no mark the coscheduling keeper would never read"
    assert any("createPodGroup: a JobSet cannot own a PodGroup Placer keeps" in w for w in mutation.warnings)


def test_written_objects_validate_against_the_published_1_36_and_1_37_schemas() -> None:
    marked, _ = admitted(jobset(), served("v1alpha2"))
    wanted = desired_groups(JOBSET, "v1alpha2", stored(marked))  # type: ignore[arg-type]
    assert isinstance(wanted, tuple)
    pod, _ = admitted(jobset_pods(marked)[0], served("v1alpha2"))
    for kubernetes, version in (("1.36.0", "v1alpha2"), ("1.37.0", "v1beta1")):
        kubernetes_validate.validate(pod, kubernetes, strict=True)
        for group in wanted:
            kubernetes_validate.validate(group.body(version), kubernetes, strict=True)


def gpu_jobset_admission(reader: Any) -> Any:
    """The JobSet, every pod asking for one GPU and pinned to the GPU pool, through the whole admission."""
    given = jobset()
    for job in given["spec"]["replicatedJobs"]:
        spec = job["template"]["spec"]["template"]["spec"]
        spec["nodeSelector"] = {"node-pool": "gpu"}
        spec["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
    return admit(parse_review(review_for(given, namespace="training")), served("v1alpha2"), TABLE,
                 placement=PlacementCheck(reader))


def test_a_jobsets_gang_can_never_fit_counts_one_child_job_not_the_whole_jobset(tmp_path: Path) -> None:
    """Each child Job is its own gang: 4 one-GPU nodes hold any one worker Job (4 pods) though not both (8)."""
    assert gpu_jobset_admission(publish(tmp_path / "four", gpu_nodes(4, "1"))).over_capacity == 0
    result = gpu_jobset_admission(publish(tmp_path / "three", gpu_nodes(3, "1")))
    assert result.over_capacity == 1
    assert result.response["response"]["warnings"][-1] == (
        "placer: rule gang-native-operators/operator-gang: gang tpu-train: 4 pods of workers of nvidia.com/gpu 1 "
        "never fit, 3 matching nodes hold 3")
