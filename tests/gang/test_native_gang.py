"""`scheduler: native`: the pods of a gang name kube-scheduler's PodGroup, only where that group will exist.

Inputs are kube-apiserver v1.36.2 captures (`tests/fixtures/kube-1.36/`): the Indexed Job CREATE (completions
and parallelism 4), the Job controller's pod for index 0, and a Pod that already names `pg-train`. What the
API server does with the field and the objects is captured there too: stored as sent with the gates on,
silently dropped with them off, immutable on UPDATE (`reactions/`).
"""

import copy
import dataclasses
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from tests.conftest import FIXTURES, REPO, fixture_request
from tests.helpers import compile_errors, review_for, run, snapshot_of
from tests.unit.test_gang_capacity import gang_policy, gpu_nodes, job_admission, publish
from webhook.commands.cli import main
from webhook.gang.native import pod_group_name
from webhook.gang.pod_groups import desired_pod_group
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.policy.sources.reloader import combine
from webhook.policy.state.cluster_state import ClusterState, ClusterStateSource, write_state
from webhook.support.names import dns1123_subdomain_error
from webhook.workloads import default_workload_table

CAPTURES = "kube-1.36/requests"
POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: native}
spec:
  rules:
  - {name: gang, action: add-gang-labels, parameters: {scheduler: native%s}}
"""


def captured(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = fixture_request(name, CAPTURES)["request"]["object"]
    obj["metadata"].pop("managedFields", None)
    return obj


def served(version: str | None, policy: str = POLICY % "") -> PolicySnapshot:
    return dataclasses.replace(snapshot_of(policy), native_gang_version=version)


def admitted(obj: dict[str, Any], snapshot: PolicySnapshot) -> tuple[dict[str, Any], Any]:
    mutation = run(snapshot, review_for(obj, namespace="team-a"))
    return jsonpatch.apply_patch(obj, mutation.patch), mutation


@pytest.mark.parametrize("version", ["v1alpha2", "v1beta1", None])
def test_an_indexed_job_names_one_group_and_is_marked_for_its_pod_group(version: str | None) -> None:
    job, mutation = admitted(captured("job-indexed-create-real"), served(version))
    assert job["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "indexed-train"}
    assert job["metadata"]["labels"]["placer.dev/pod-group"] == "indexed-train"
    assert job["metadata"]["annotations"]["placer.dev/pod-group-api"] == "native"
    assert mutation.warnings == []
    assert run(served(version), review_for(job, namespace="team-a")).patch == [], "a second pass changes nothing"

    stored = {**job, "metadata": {**job["metadata"], "uid": "0b5e-job"}}
    want = desired_pod_group(default_workload_table().lookup("batch", "Job"), stored)  # type: ignore[arg-type]
    assert not isinstance(want, str)
    assert (want.name, want.min_member, want.flavour) == ("indexed-train", 4, "native")
    body = want.body("v1alpha2")
    assert body["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "indexed-train", "uid": "0b5e-job", "controller": True}]


def test_the_mutated_job_and_its_pod_group_validate_against_the_published_schemas() -> None:
    """PodTemplateSpec holds a PodSpec, which has schedulingGroup in 1.36 and 1.37; the PodGroup is
    scheduling.k8s.io/v1alpha2 in 1.36's schemas and v1beta1 in 1.37's (kubernetes-validate 1.37.0)."""
    job, _ = admitted(captured("job-indexed-create-real"), served("v1alpha2"))
    stored = {**job, "metadata": {**job["metadata"], "uid": "0b5e-job"}}
    want = desired_pod_group(default_workload_table().lookup("batch", "Job"), stored)  # type: ignore[arg-type]
    assert not isinstance(want, str)
    for kubernetes, version in (("1.36.0", "v1alpha2"), ("1.37.0", "v1beta1")):
        kubernetes_validate.validate(job, kubernetes, strict=True)
        kubernetes_validate.validate(want.body(version), kubernetes, strict=True)
    with pytest.raises(kubernetes_validate.ValidationError):  # the schema does check the spec
        kubernetes_validate.validate({**want.body("v1alpha2"), "spec": {"minMember": 4}}, "1.36.0", strict=True)
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):  # 1.36 has no v1beta1 PodGroup
        kubernetes_validate.validate(want.body("v1beta1"), "1.36.0", strict=True)


def test_a_pod_that_already_names_a_group_is_left_alone_and_says_why() -> None:
    pod = captured("pod-podgroup-create-real")
    result, mutation = admitted(copy.deepcopy(pod), served("v1alpha2"))
    assert result == pod
    assert mutation.warnings == [
        "native/gang: native gang: spec.schedulingGroup already names pg-train: left alone (the pods keep the "
        "group they name)"]


def test_the_job_controllers_pod_of_a_mutated_template_passes_and_a_bare_pod_is_not_given_a_group() -> None:
    pod = captured("job-indexed-pod-create-real")
    result, mutation = admitted(copy.deepcopy(pod), served("v1alpha2"))
    assert result == pod, "Placer keeps no PodGroup for a Pod: it would wait for a group no one creates"
    assert any("this Pod is admitted unchanged" in warning for warning in mutation.warnings)

    from_template = copy.deepcopy(pod)
    from_template["metadata"].setdefault("annotations", {})["placer.dev/applied"] = "native/gang"
    from_template["spec"]["schedulingGroup"] = {"podGroupName": "indexed-train"}
    passed = run(served("v1alpha2"), review_for(from_template, namespace="team-a"))
    assert passed.patch == [] and passed.warnings == []


@pytest.mark.parametrize("managed, reason", [
    ({"spec": {"scheduling": {"schedulingPolicy": {"gang": {}}}}}, "the Job controller keeps its Workload"),
    ({"metadata": {"annotations": {"scheduling.k8s.io/group-template-name": "workers"}}},
     "the Job names a Workload template"),
])
def test_a_job_whose_controller_keeps_its_group_is_left_alone(managed: dict[str, Any], reason: str) -> None:
    job = captured("job-indexed-create-real")
    for part, fields in managed.items():
        job[part] = {**job.get(part, {}), **fields}
    result, mutation = admitted(copy.deepcopy(job), served("v1beta1"))
    assert result == job
    assert len(mutation.warnings) == 1 and reason in mutation.warnings[0]


def test_where_no_pod_group_api_is_served_the_job_is_admitted_unchanged_with_a_warning() -> None:
    job = captured("job-indexed-create-real")
    result, mutation = admitted(copy.deepcopy(job), served(""))
    assert result == job
    assert mutation.warnings == [
        "native/gang: native gang: the API server serves no PodGroup API (no version of scheduling.k8s.io serves "
        "PodGroup): admitted unchanged, pods schedule one by one; on 1.36: feature gates GenericWorkload and "
        "GangScheduling on kube-apiserver and kube-scheduler, and --runtime-config=scheduling.k8s.io/v1alpha2=true"]


def test_a_fixed_size_is_carried_and_a_group_name_becomes_a_valid_pod_group_name() -> None:
    job, _ = admitted(captured("job-indexed-create-real"), served("v1alpha2", POLICY % ", minAvailable: 3, "
                                                                                      "groupName: Train_Run"))
    name = job["spec"]["template"]["spec"]["schedulingGroup"]["podGroupName"]
    assert name.startswith("train-run-") and dns1123_subdomain_error(name) is None
    assert job["metadata"]["labels"]["placer.dev/pod-group"] == name
    assert job["metadata"]["annotations"]["placer.dev/pod-group-min-member"] == "3"
    assert pod_group_name("Train_Run") != pod_group_name("train-run"), "two names stay two groups"
    assert pod_group_name("indexed-train") == "indexed-train"


def test_the_captured_stored_pod_group_is_what_the_1_36_schema_describes() -> None:
    """The schema Placer's PodGroups are checked against agrees with what kube-apiserver v1.36.2 stored."""
    stored = yaml.safe_load((FIXTURES / "kube-1.36" / "objects" / "podgroup-stored.yaml").read_text())
    kubernetes_validate.validate(stored, "1.36.0", strict=True)
    assert stored["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}


@pytest.mark.parametrize("version, changed", [("", False), ("v1alpha2", True)])
def test_workers_learn_what_is_served_from_the_cluster_state(tmp_path: Path, version: str, changed: bool) -> None:
    """What the controller found reaches a worker's snapshot through `policies.json`."""
    compiler = PolicyCompiler()
    document = yaml.safe_load(POLICY % "")
    write_state(tmp_path, ClusterState(1, True, [document], native_gang_version=version))
    source = ClusterStateSource(tmp_path, compiler=compiler)
    assert source.refresh()
    snapshot = dataclasses.replace(combine([source.content()], compiler.environment),
                                   namespaces={"team-a": NamespaceInfo("team-a")})
    assert snapshot.native_gang_version == version
    mutation = run(snapshot, review_for(captured("job-indexed-create-real"), namespace="team-a"))
    assert bool(mutation.patch) is changed


def test_a_native_gang_that_can_never_fit_is_warned_about(tmp_path: Path) -> None:
    """The "gang can never fit" check covers native gangs: 3 one-GPU pods on 2 one-GPU nodes never start."""
    policy = gang_policy().replace("scheduler: coscheduling", "scheduler: native")
    result = job_admission(publish(tmp_path, {**gpu_nodes(2, "1"), **gpu_nodes(4, "0", pool="cpu")}), policy)
    assert result.response["response"]["allowed"] is True and result.over_capacity == 1
    assert result.response["response"]["warnings"][-1] == (
        "placer: rule training/gang: gang batch-train: 3 pods of nvidia.com/gpu 1 never fit, 2 matching nodes hold 2")
    assert job_admission(publish(tmp_path, gpu_nodes(3, "1")), policy).over_capacity == 0


def test_export_says_plainly_that_a_native_gang_creates_objects(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--policies", str(REPO / "policies" / "gang-native-jobs.yaml")]) != 0
    said = capsys.readouterr().err
    assert "gang-native-jobs/indexed-job-gang: not exported: " in said
    assert "it cannot create objects (kube-scheduler's PodGroup the pods name)" in said


def test_create_pod_group_is_refused_with_native_which_always_keeps_its_group() -> None:
    errors = compile_errors(POLICY % ", createPodGroup: true")
    assert any("createPodGroup: only for scheduler coscheduling (native: Placer always keeps the PodGroup)" in error
               for error in errors), errors
