"""A native gang over a workload's life: never added to pods that already run, `minCount` following what can
still run, a group per CronJob run, and the newest PodGroup version the API server serves.

The rules come from kube-scheduler's source (`webhook.gang.native_lifecycle`): a gang counts the non-finished
pods it knows, so a pod that can never see `minCount` others waits forever. The cluster tier shows the same
on a living v1.36 cluster (`tests/cluster/test_native_gang_lifecycle.py`).
"""

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest

from tests.conftest import REPO
from tests.helpers import read_yaml, review_for, run, snapshot_of
from webhook.cluster.client.api import ApiError
from webhook.cluster.client.discovery import ServedApis, ServedGroup, ServedResource, read_features
from webhook.cluster.podgroups.native_gang import job_gangs_of, native_version_of
from webhook.cluster.reports.compliance import evaluate
from webhook.commands.cli import main
from webhook.gang.native import NOT_SERVED, min_count_mutable, newest_version, pods_still_to_run
from webhook.gang.native_lifecycle import joins_running
from webhook.gang.pod_groups import DesiredPodGroup, desired_pod_group
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.workloads import default_workload_table

GOLDEN = Path(__file__).parents[1] / "golden" / "cases"
TABLE = default_workload_table()
DEPLOYMENT_GANG = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: deployment-gang}
spec:
  namespaceSelector: {matchLabels: {gang-scheduler: native}}
  rules:
  - {name: gang, condition: "workload.kind == 'Deployment'", action: add-gang-labels, parameters: {scheduler: native}}
"""


def snapshot(*texts: str) -> PolicySnapshot:
    return snapshot_of(*texts, namespaces=[NamespaceInfo("training", {"gang-scheduler": "native"})])


@pytest.mark.parametrize("versions, newest", [
    (["v1alpha2"], "v1alpha2"),
    (["v1alpha2", "v1beta1"], "v1beta1"),  # 1.37 serving the old alpha beside the beta
    (["v1beta1", "v1alpha3"], "v1beta1"),  # beta before alpha whatever the number
    (["v1beta1", "v1", "v1alpha3"], "v1"),  # 1.38's GA, written without a new Placer
    (["v2beta1", "v1"], "v1"),  # GA before beta
    (["v1beta1", "v1beta2"], "v1beta2"),
    (["v1", "v2"], "v2"),
    (["latest", "v1x"], None),
    ([], None),
])
def test_the_newest_version_follows_kubernetes_own_order(versions: list[str], newest: str | None) -> None:
    assert newest_version(versions) == newest


def served(kinds: dict[str, tuple[str, ...]]) -> ServedApis:
    group = ServedGroup(tuple(kinds), "v1", {version: {kind: ServedResource(kind.lower() + "s", True) for kind in names}
                                             for version, names in kinds.items()})
    return ServedApis("v1.38.0", 1, 38, {"scheduling.k8s.io": group}, known=True)


def test_the_pod_group_version_is_the_newest_that_serves_pod_groups() -> None:
    ga = served({"v1": ("PriorityClass", "PodGroup", "Workload"), "v1beta1": ("PodGroup",)})
    assert native_version_of(ga) == "v1"
    assert native_version_of(served({"v1": ("PriorityClass",), "v1alpha2": ("PodGroup", "Workload")})) == "v1alpha2"
    assert native_version_of(served({"v1": ("PriorityClass",), "v1alpha1": ("Workload",)})) == NOT_SERVED, \
        "1.35's v1alpha1 has Workloads, no PodGroup"
    assert native_version_of(ServedApis()) is None
    assert not min_count_mutable("v1alpha2") and min_count_mutable("v1beta1") and min_count_mutable("v1")


def job(completions: int | None, parallelism: int, **status: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"parallelism": parallelism}
    if completions is not None:
        spec["completions"] = completions
    return {"spec": spec, "status": status}


@pytest.mark.parametrize("given, size, expected", [
    (job(4, 4), 4, 4),  # nothing ran yet
    (job(4, 4, active=4), 4, 4),
    (job(4, 4, succeeded=3, active=1), 4, 1),  # a replacement of the fourth index runs alone
    (job(4, 4, succeeded=4), 4, 0),  # done
    (job(10, 4, succeeded=5, active=4), 4, 4),  # 5 still to run, 4 at a time
    (job(10, 4, succeeded=8, active=2), 4, 2),  # the last two
    (job(None, 4, active=4), 4, 4),  # a work queue that has not finished a pod
    (job(None, 4, succeeded=1, active=3), 4, 3),  # once one succeeded the Job makes no new pod
])
def test_a_jobs_gang_counts_only_the_pods_it_can_still_run(given: dict[str, Any], size: int, expected: int) -> None:
    assert pods_still_to_run("Job", given, size) == expected
    assert pods_still_to_run("Deployment", given, size) == size


def test_the_controller_sizes_a_jobs_pod_group_by_what_it_can_still_run() -> None:
    stored = read_yaml(GOLDEN / "gang-native-indexed-job" / "expected.yaml")
    stored["metadata"]["uid"] = "job-uid"
    kind = TABLE.lookup("batch", "Job")
    assert kind is not None
    fresh = desired_pod_group(kind, stored)
    assert isinstance(fresh, DesiredPodGroup) and fresh.min_member == 4
    stored["status"] = {"succeeded": 3, "active": 1, "failed": 1}
    assert isinstance(late := desired_pod_group(kind, stored), DesiredPodGroup) and late.min_member == 1
    stored["status"] = {"succeeded": 4}
    assert desired_pod_group(kind, stored) == "Job runs no pods now: no PodGroup needed"


def deployment(strategy: str = "RollingUpdate") -> dict[str, Any]:
    obj: dict[str, Any] = read_yaml(GOLDEN / "gang-native-deployment-update-rolling" / "old.yaml")
    obj["spec"]["strategy"] = {"type": strategy}
    return obj


@pytest.mark.parametrize("kind, obj, old, stored, refused", [
    (("apps", "Deployment"), deployment(), None, False, False),  # a creation: nothing runs yet
    (("apps", "Deployment"), deployment(), deployment(), False, True),  # a rolling update
    (("apps", "Deployment"), deployment("Recreate"), deployment("Recreate"), False, False),
    (("apps", "Deployment"), deployment(), None, True, True),  # drift of a stored Deployment
    (("apps", "Deployment"), deployment("Recreate"), None, True, False),
    (("apps", "StatefulSet"), read_yaml(GOLDEN / "gang-native-statefulset-update" / "old.yaml"),
     read_yaml(GOLDEN / "gang-native-statefulset-update" / "old.yaml"), False, True),
    (("apps", "StatefulSet"), read_yaml(GOLDEN / "gang-native-statefulset-update-ganged" / "old.yaml"),
     read_yaml(GOLDEN / "gang-native-statefulset-update-ganged" / "old.yaml"), False, False),  # already ganged
    (("batch", "CronJob"), read_yaml(GOLDEN / "gang-native-cronjob" / "input.yaml"),
     read_yaml(GOLDEN / "gang-native-cronjob" / "input.yaml"), False, False),  # the next runs are new Jobs
    (("ray.io", "RayCluster"), read_yaml(GOLDEN / "gang-native-raycluster" / "input.yaml"),
     read_yaml(GOLDEN / "gang-native-raycluster" / "input.yaml"), False, True),
    (("ray.io", "RayCluster"), read_yaml(GOLDEN / "gang-native-raycluster" / "expected.yaml"),
     read_yaml(GOLDEN / "gang-native-raycluster" / "expected.yaml"), False, False),  # its pods name the group
])
def test_a_gang_is_added_only_where_no_pod_runs_without_it(kind: tuple[str, str], obj: dict[str, Any],
                                                           old: dict[str, Any] | None, stored: bool,
                                                           refused: bool) -> None:
    row = TABLE.lookup(*kind)
    assert row is not None
    assert (joins_running(row, obj, old, stored=stored) is not None) == refused


def test_drift_leaves_the_gang_out_of_a_running_deployment_and_says_why() -> None:
    """`kubectl placer drift --apply` sends the verdict's patch: it must not carry the gang."""
    stored = deployment()
    verdict = evaluate(stored, snapshot(DEPLOYMENT_GANG), TABLE)
    assert verdict.patch == []
    [result] = verdict.results
    assert result.result == "skip"
    assert "native gang: the Deployment's pods already run without the gang" in result.message
    recreated = evaluate(deployment("Recreate"), snapshot(DEPLOYMENT_GANG), TABLE)
    assert [result.result for result in recreated.results] == ["fail"]
    patched = jsonpatch.apply_patch(deployment("Recreate"), recreated.patch)
    assert patched["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "inference"}


def test_each_cronjob_run_names_a_pod_group_of_its_own_kept_on_the_job() -> None:
    """Two runs that overlap (concurrencyPolicy Allow) are two gangs, each owned by its Job."""
    policies = snapshot((REPO / "policies" / "gang-native-jobs.yaml").read_text())
    run_job = read_yaml(GOLDEN / "gang-native-cronjob-run" / "input.yaml")
    kind = TABLE.lookup("batch", "Job")
    assert kind is not None
    groups = []
    for name in ("nightly-train-29415000", "nightly-train-29415060"):
        given = copy.deepcopy(run_job)
        given["metadata"]["name"] = name
        admitted = jsonpatch.apply_patch(given, run(policies, review_for(given, namespace="training")).patch)
        assert admitted["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": name}
        admitted["metadata"]["uid"] = f"uid-{name}"
        wanted = desired_pod_group(kind, admitted)
        assert isinstance(wanted, DesiredPodGroup)
        groups.append((wanted.name, wanted.min_member, wanted.owner["name"]))
    assert groups == [("nightly-train-29415000", 4, "nightly-train-29415000"),
                      ("nightly-train-29415060", 4, "nightly-train-29415060")]


def test_a_spark_driver_never_names_a_group_even_from_an_earlier_mark() -> None:
    """A driver created from an application marked before executors alone were counted still carries the
    group's annotation: it is left out, or it would wait for executors it has not created yet."""
    policies = snapshot((REPO / "policies" / "gang-native-operators.yaml").read_text())
    driver = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "spark-pi-driver", "namespace": "training",
        "labels": {"spark-role": "driver", "sparkoperator.k8s.io/app-name": "spark-pi"},
        "annotations": {"placer.dev/native-pod-group": "spark-pi"}},
        "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": "spark:3.5.3"}]}}
    mutation = run(policies, review_for(driver, namespace="training"))
    assert not any(op["path"] == "/spec/schedulingGroup" for op in mutation.patch)
    assert any("a Spark driver is not in its application's gang" in note for note in mutation.notes)
    executor = copy.deepcopy(driver)
    executor["metadata"]["labels"]["spark-role"] = "executor"
    executor_mutation = run(policies, review_for(executor, namespace="training"))
    assert {"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "spark-pi"}} in \
        executor_mutation.patch


def test_below_1_36_lint_says_native_rules_are_unavailable_and_apply_writes_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    """1.35 serves no PodGroup API (its scheduling.k8s.io/v1alpha1 has Workloads only): the webhook there admits
    the Job unchanged, and so do the offline tools aimed at it."""
    policy = str(REPO / "policies" / "gang-native-jobs.yaml")
    job = str(REPO / "docs" / "examples" / "native-gang" / "indexed-job.yaml")
    assert main(["lint", policy, "--kubernetes-version", "1.35"]) == 0
    said = capsys.readouterr().err.splitlines()
    assert said == [f"Warning: {policy}: rule gang-native-jobs/{rule}: native gang unavailable: Kubernetes 1.35 has "
                    "no PodGroup API (scheduling.k8s.io serves PodGroups from 1.36, with feature gates): the rule "
                    "changes nothing there; the webhook admits its workloads unchanged"
                    for rule in ("indexed-job-gang", "statefulset-gang", "cronjob-gang")] + [
                        "1 policy OK: gang-native-jobs"]
    assert main(["lint", policy, "--kubernetes-version", "1.36"]) == 0
    assert "unavailable" not in capsys.readouterr().err
    flags = ["apply", "--policies", policy, "-f", job, "--namespace-labels", "gang-scheduler=native", "-o", "patch"]
    assert main([*flags, "--kubernetes-version", "1.35"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"object": "Job training/indexed-train", "source": f"{job}:1",
                                                   "patch": []}]
    assert main([*flags, "--kubernetes-version", "1.36"]) == 0
    [written] = json.loads(capsys.readouterr().out)
    assert {"op": "add", "path": "/spec/template/spec/schedulingGroup", "value": {"podGroupName": "indexed-train"}} \
        in written["patch"]


METRICS = """# HELP kubernetes_feature_enabled [BETA] This metric records the data about the stage and enablement \
of a k8s feature.
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="GangScheduling",stage="ALPHA"} 1
kubernetes_feature_enabled{name="GenericWorkload",stage="ALPHA"} 1
kubernetes_feature_enabled{name="WorkloadWithJob",stage="ALPHA"} %s
"""
"""The lines of kube-apiserver v1.36.2's `/metrics` (read from the living cluster), the gate's value varied."""


class MetricsOnly:
    def __init__(self, text: str | None) -> None:
        self.text = text

    def get(self, path: str, query: Any = None, *, timeout: float | None = None) -> dict[str, Any]:
        raise AssertionError(path)

    def get_text(self, path: str) -> str:
        assert path == "/metrics"
        if self.text is None:
            raise ApiError(403, "Forbidden", 'forbidden: User "placer" cannot get path "/metrics"')
        return self.text


def test_feature_gates_come_from_the_api_servers_metrics() -> None:
    assert read_features(MetricsOnly(METRICS % "1"), ("WorkloadWithJob",)) == {"WorkloadWithJob": True}
    assert read_features(MetricsOnly(METRICS % "0"), ("WorkloadWithJob", "GangScheduling")) == {
        "WorkloadWithJob": False, "GangScheduling": True}
    assert read_features(MetricsOnly(None), ("WorkloadWithJob",)) == {}, "not readable: not known"


def job_api(minor: int, gate: bool | None, podgroups: str | None = "v1beta1") -> ServedApis:
    kinds: dict[str, tuple[str, ...]] = {"v1": ("PriorityClass",)}
    if podgroups:
        kinds[podgroups] = ("PodGroup", "Workload")
    served_apis = served(kinds)
    features = {} if gate is None else {"WorkloadWithJob": gate}
    return dataclasses.replace(served_apis, minor=minor, features=features)


@pytest.mark.parametrize("served_apis, handed", [
    (job_api(37, True), True),
    (job_api(38, True, "v1"), True),
    (job_api(37, False), False),  # the gate off: the API server drops spec.scheduling
    (job_api(37, None), False),  # /metrics not readable: not known, Placer keeps its own PodGroup
    (job_api(36, True, "v1alpha2"), False),  # 1.36's Job has no spec.scheduling
    (job_api(37, True, None), False),  # no PodGroup API served at all
])
def test_jobs_are_handed_to_the_job_controller_only_where_it_keeps_their_gang(served_apis: ServedApis,
                                                                            handed: bool) -> None:
    assert job_gangs_of(served_apis) is handed


def job_gangs_snapshot() -> PolicySnapshot:
    policies = snapshot((REPO / "policies" / "gang-native-jobs.yaml").read_text())
    return dataclasses.replace(policies, native_gang_version="v1beta1", job_gangs=True)


def indexed(**changes: Any) -> dict[str, Any]:
    job: dict[str, Any] = read_yaml(GOLDEN / "gang-native-indexed-job" / "input.yaml")
    job["spec"].update(changes)
    return job


def test_where_the_job_controller_keeps_gangs_a_job_gets_its_own_field_and_no_pod_group() -> None:
    given = indexed(backoffLimit=0)
    mutation = run(job_gangs_snapshot(), review_for(given, namespace="training"))
    admitted = jsonpatch.apply_patch(given, mutation.patch)
    assert admitted["spec"]["scheduling"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    assert "schedulingGroup" not in admitted["spec"]["template"]["spec"]
    assert "placer.dev/pod-group" not in (admitted["metadata"].get("labels") or {}), "no PodGroup of Placer's"
    assert admitted["metadata"]["annotations"]["placer.dev/pod-group-api"] == "job"
    assert mutation.warnings == []
    assert any("the Job controller keeps the gang (spec.scheduling, minCount 4)" in note for note in mutation.notes)
    kubernetes_validate.validate(admitted, "1.37.0", strict=True)
    again = run(job_gangs_snapshot(), review_for(admitted, namespace="training"))
    assert again.patch == [] and again.warnings == [], "reinvoked: Placer's own field is left as it is"
    kind = TABLE.lookup("batch", "Job")
    assert kind is not None
    assert desired_pod_group(kind, {**admitted, "metadata": {**admitted["metadata"], "uid": "u"}}) == \
        "not a marked workload", "the controller keeps no PodGroup for it"


@pytest.mark.parametrize("changes, why", [
    ({}, "backoffLimit 6 replaces a failed pod"),  # the API server's default
    ({"backoffLimit": 0, "completions": 8}, "completions 8 beyond parallelism 4"),
    ({"backoffLimit": 0, "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [
        {"type": "DisruptionTarget"}]}]}}, "action Ignore replaces the pod"),
])
def test_a_job_whose_pods_can_come_after_others_finished_keeps_placers_pod_group(changes: dict[str, Any],
                                                                                 why: str) -> None:
    """The Job controller's gang keeps the Job's minCount, which nothing lowers as pods finish: such a Job
    stays with Placer's PodGroup, which follows what it can still run (the Job controller stands aside for a
    template naming a group)."""
    given = indexed(**changes)
    mutation = run(job_gangs_snapshot(), review_for(given, namespace="training"))
    admitted = jsonpatch.apply_patch(given, mutation.patch)
    assert admitted["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "indexed-train"}
    assert "scheduling" not in admitted["spec"]
    assert any(why in note for note in mutation.notes), mutation.notes


def test_a_cronjob_hands_each_runs_gang_to_the_job_controller() -> None:
    given = read_yaml(GOLDEN / "gang-native-cronjob" / "input.yaml")
    given["spec"]["jobTemplate"]["spec"]["backoffLimit"] = 0
    mutation = run(job_gangs_snapshot(), review_for(given, namespace="training"))
    admitted = jsonpatch.apply_patch(given, mutation.patch)
    assert admitted["spec"]["jobTemplate"]["spec"]["scheduling"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    template = admitted["spec"]["jobTemplate"]["spec"]["template"]
    assert "placer.dev/native-pod-group-per" not in (template["metadata"].get("annotations") or {})
    kubernetes_validate.validate(admitted, "1.37.0", strict=True)
    assert run(job_gangs_snapshot(), review_for(admitted, namespace="training")).patch == []
