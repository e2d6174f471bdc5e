"""What Placer writes must stay right once controllers, the scheduler and in-tree admission act on it.

One test (or group) per failure seen on a living cluster: selectors broken by labels, the cluster's default
PriorityClass, second passes that were not empty, per-pod labels in own-pod selectors, gang names shared by
`generateName` objects, pod-level resources, template opt-out, half-mutated objects past the deadline.
"""

import time
from typing import Any

import jsonpatch
import pytest

from tests.conftest import fixture_request
from tests.helpers import review_for, run, snapshot_of
from webhook.admission.review import parse_review
from webhook.engine.mutate import DEADLINE_WARNING, mutate
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.workloads import default_workload_table

TEAM_A = NamespaceInfo("team-a", {"environment": "production", "team": "ml"})


def policy(rules: str, name: str = "p") -> str:
    return (f"apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: {name}}}\nspec:\n"
            f"  rules:\n{rules}")


def rule(name: str, action: str, parameters: str, condition: str = "true") -> str:
    return f"  - {{name: {name}, action: {action}, condition: {condition!r}, parameters: {parameters}}}\n"


def admitted(snapshot: PolicySnapshot, obj: dict[str, Any], **kwargs: Any) -> tuple[dict[str, Any], Any]:
    mutation = run(snapshot, review_for(obj, namespace="team-a", **kwargs))
    return (jsonpatch.apply_patch(obj, mutation.patch) if mutation.patch else obj), mutation


# -- item 3: any label key the selector reads is protected ---------------------------------------------------

@pytest.mark.parametrize("operator", ["In", "NotIn", "Exists", "DoesNotExist"])
def test_labels_used_by_match_expressions_are_never_added_or_changed(operator: str) -> None:
    deployment = fixture_request("deployment-create-dryrun")["request"]["object"]
    requirement: dict[str, Any] = {"key": "track", "operator": operator}
    if operator in ("In", "NotIn"):
        requirement["values"] = ["web"] if operator == "In" else ["cache"]
    deployment["spec"]["selector"]["matchExpressions"] = [requirement]
    if operator in ("In", "Exists"):
        deployment["spec"]["template"]["metadata"]["labels"]["track"] = "web"
    snapshot = snapshot_of(policy(rule("l", "add-labels", "{track: cache, team: ml}")), namespaces=[TEAM_A])
    stored, mutation = admitted(snapshot, deployment)
    labels = stored["spec"]["template"]["metadata"]["labels"]
    assert labels.get("track") == ("web" if operator in ("In", "Exists") else None)
    assert labels["team"] == "ml"
    assert any("label track is used by the workload's selector, kept" in w for w in mutation.warnings)


def test_a_job_with_a_manual_selector_keeps_its_selector_labels() -> None:
    job = fixture_request("job-create-dryrun")["request"]["object"]
    job["spec"]["manualSelector"] = True
    job["spec"]["selector"] = {"matchLabels": {"app": "train"}}
    job["spec"]["template"]["metadata"].setdefault("labels", {})["app"] = "train"
    snapshot = snapshot_of(policy(rule("l", "add-labels", "{app: other}")), namespaces=[TEAM_A])
    stored, _ = admitted(snapshot, job)
    assert stored["spec"]["template"]["metadata"]["labels"]["app"] == "train"


# -- item 4: the cluster's globalDefault PriorityClass counts as unset on a Pod ------------------------------

def test_set_priority_class_replaces_the_cluster_default_on_a_bare_pod() -> None:
    pod = fixture_request("pod-bare-create-dryrun")["request"]["object"]
    pod["spec"].update(priorityClassName="cluster-default", priority=1000, preemptionPolicy="PreemptLowerPriority")
    snapshot = snapshot_of(policy(rule("prio", "set-priority-class", "{priorityClassName: high}")),
                           namespaces=[TEAM_A])
    without_default, mutation = admitted(snapshot, pod)
    assert without_default["spec"]["priorityClassName"] == "cluster-default"
    assert any("priorityClassName is 'cluster-default', kept" in w for w in mutation.warnings)
    snapshot = snapshot_of(policy(rule("prio", "set-priority-class", "{priorityClassName: high}")),
                           namespaces=[TEAM_A], default_priority_class="cluster-default")
    stored, mutation = admitted(snapshot, pod)
    assert stored["spec"]["priorityClassName"] == "high" and mutation.warnings == []
    assert "priority" not in stored["spec"] and "preemptionPolicy" not in stored["spec"]


def test_a_template_naming_the_default_class_explicitly_keeps_it() -> None:
    deployment = fixture_request("deployment-create-dryrun")["request"]["object"]
    deployment["spec"]["template"]["spec"]["priorityClassName"] = "cluster-default"
    snapshot = snapshot_of(policy(rule("prio", "set-priority-class", "{priorityClassName: high}")),
                           namespaces=[TEAM_A], default_priority_class="cluster-default")
    stored, _ = admitted(snapshot, deployment)
    assert stored["spec"]["template"]["spec"]["priorityClassName"] == "cluster-default"


# -- item 5: a second pass over Placer's own output is empty -------------------------------------------------

def test_a_spread_on_a_pod_without_labels_uses_the_labels_an_earlier_rule_added() -> None:
    pod = fixture_request("pod-bare-create-dryrun")["request"]["object"]
    pod["metadata"].pop("labels", None)
    rules = rule("label", "add-labels", "{app: web}") + rule("spread", "add-topology-spread",
                                                             "{topologyKey: topology.kubernetes.io/zone}")
    snapshot = snapshot_of(policy(rules), namespaces=[TEAM_A])
    stored, mutation = admitted(snapshot, pod)
    assert stored["spec"]["topologySpreadConstraints"][0]["labelSelector"] == {"matchLabels": {"app": "web"}}
    assert mutation.applied == ["p/label", "p/spread"]
    assert admitted(snapshot, stored)[1].patch == []


def test_a_condition_on_a_label_an_earlier_rule_adds_gives_template_and_pods_one_answer() -> None:
    rules = (rule("tier", "add-labels", "{tier: gpu}")
             + rule("pool", "add-node-selector", "{pool: gpu}", "pod.metadata.labels.?tier.orValue('') == 'gpu'"))
    snapshot = snapshot_of(policy(rules), namespaces=[TEAM_A])
    deployment = fixture_request("deployment-create-dryrun")["request"]["object"]
    stored, _ = admitted(snapshot, deployment)
    assert stored["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert stored["spec"]["template"]["metadata"]["annotations"]["placer.dev/applied"] == "p/tier,p/pool"
    assert admitted(snapshot, stored)[1].patch == []


def test_rules_that_undo_each_other_stop_after_a_bounded_number_of_passes() -> None:
    rules = ("  - {name: a, action: set-scheduler-name, override: true, parameters: {schedulerName: one},"
             " condition: \"pod.spec.?schedulerName.orValue('') != 'one'\"}\n"
             "  - {name: b, action: set-scheduler-name, override: true, parameters: {schedulerName: two},"
             " condition: \"pod.spec.?schedulerName.orValue('') == 'one'\"}\n")
    _, mutation = admitted(snapshot_of(policy(rules), namespaces=[TEAM_A]),
                           fixture_request("pod-bare-create-dryrun")["request"]["object"])
    assert any("did not settle" in w for w in mutation.warnings)


def test_a_pod_of_a_controller_is_one_replica_of_its_controllers_workload() -> None:
    """Pods of a 5-replica Deployment whose template no rule changed are evaluated as Pods: `workload` names
    their controller and has no replica count, so a rule for small workloads does not match them."""
    pod = fixture_request("pod-rs-owned-generatename-create-dryrun")["request"]["object"]
    rules = (rule("small", "add-node-selector", "{pool: small}", "workload.replicas < 3")
             + rule("owned", "add-labels", "{owned: 'yes'}", "workload.kind == 'ReplicaSet'"))
    _, mutation = admitted(snapshot_of(policy(rules), namespaces=[TEAM_A]), pod)
    assert [(t.rule, t.outcome) for t in mutation.traces] == [("small", "missing"), ("owned", "applied")]


# -- item 6: per-pod labels never enter a default own-pod selector ------------------------------------------

def test_default_selectors_leave_out_per_pod_labels() -> None:
    pod = fixture_request("pod-bare-create-dryrun")["request"]["object"]
    pod["metadata"]["labels"] = {"app": "db", "statefulset.kubernetes.io/pod-name": "db-0",
                                 "apps.kubernetes.io/pod-index": "0", "controller-revision-hash": "db-6d4f",
                                 "batch.kubernetes.io/job-completion-index": "0", "pod-template-hash": "x"}
    rules = (rule("spread", "add-topology-spread", "{topologyKey: topology.kubernetes.io/zone}")
             + rule("anti", "add-pod-anti-affinity", "{topologyKey: kubernetes.io/hostname}"))
    stored, _ = admitted(snapshot_of(policy(rules), namespaces=[TEAM_A]), pod)
    assert stored["spec"]["topologySpreadConstraints"][0]["labelSelector"] == {"matchLabels": {"app": "db"}}
    anti = stored["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["labelSelector"] == {"matchLabels": {"app": "db"}}


# -- item 7: generateName objects are gangs of their own -----------------------------------------------------

def test_jobs_from_one_generate_name_get_different_groups_and_keep_them() -> None:
    job = fixture_request("job-create-dryrun")["request"]["object"]
    job["metadata"].pop("name")
    job["metadata"]["generateName"] = "nightly-train-"
    snapshot = snapshot_of(policy(rule("gang", "add-gang-labels", "{scheduler: coscheduling}")),
                           namespaces=[TEAM_A])
    groups = []
    for uid in ("uid-one", "uid-two"):
        body = review_for(job, namespace="team-a")
        body["request"]["uid"] = uid
        mutation = run(snapshot, body)
        stored = jsonpatch.apply_patch(job, mutation.patch)
        groups.append(stored["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"])
        assert admitted(snapshot, stored)[1].patch == []  # reinvoked with another uid: the group stays
    assert groups[0] != groups[1] and all(group.startswith("nightly-train-") for group in groups)


# -- item 8: pod-level resources count --------------------------------------------------------------------

def test_pod_level_resources_are_what_the_resources_variable_shows() -> None:
    pod = fixture_request("pod-no-resources-create-dryrun")["request"]["object"]
    pod["spec"]["resources"] = {"requests": {"cpu": "8", "memory": "32Gi"}, "limits": {"cpu": "8"}}
    snapshot = snapshot_of(policy(rule("big", "add-node-selector", "{size: large}",
                                       "resources.requests['cpu'] >= 8.0 && resources.limits['cpu'] == 8.0")),
                           namespaces=[TEAM_A])
    stored, _ = admitted(snapshot, pod)
    assert stored["spec"]["nodeSelector"] == {"size": "large"}


# -- item 9: opt-out on the pod template -------------------------------------------------------------------

def test_a_template_labelled_inject_disabled_is_left_alone() -> None:
    deployment = fixture_request("deployment-create-dryrun")["request"]["object"]
    deployment["spec"]["template"]["metadata"]["labels"]["placer.dev/inject"] = "disabled"
    _, mutation = admitted(snapshot_of(policy(rule("n", "add-node-selector", "{pool: x}")), namespaces=[TEAM_A]),
                           deployment)
    assert mutation.patch == [] and mutation.passed_through == "pod template labelled placer.dev/inject=disabled"


# -- item 10: past the deadline, all or nothing --------------------------------------------------------------

def test_past_the_deadline_the_object_is_admitted_unchanged_with_one_warning() -> None:
    rules = "".join(rule(f"r{index}", "add-labels", f"{{k{index}: v}}") for index in range(20))
    snapshot = snapshot_of(policy(rules), namespaces=[TEAM_A])
    request = parse_review(fixture_request("deployment-create-dryrun"))
    mutation = mutate(request, snapshot, default_workload_table(), deadline=time.monotonic() - 1)
    assert mutation.patch == [] and mutation.warnings == [DEADLINE_WARNING]


def test_past_the_deadline_rules_that_all_come_out_false_still_admit_nothing_but_the_warning() -> None:
    """A deadline spent before the rules (a slow namespace lookup) is reached whatever the rules decide: with
    every condition false there is nothing to evaluate one by one, and the engine still stops there."""
    rules = "".join(rule(f"r{index}", "add-labels", f"{{k{index}: v}}", "object.metadata.name == 'nope'")
                    for index in range(3))
    snapshot = snapshot_of(policy(rules), namespaces=[TEAM_A])
    request = parse_review(fixture_request("deployment-create-dryrun"))
    mutation = mutate(request, snapshot, default_workload_table(), deadline=time.monotonic() - 1)
    assert mutation.patch == [] and mutation.warnings == [DEADLINE_WARNING]
    assert mutation.passed_through == "deadline reached"


def test_a_large_jobset_derives_its_gang_once_and_reports_each_warning_once() -> None:
    jobs = [{"name": f"w{index}", "replicas": 1, "template": {"spec": {"parallelism": 1, "template": {
        "spec": {"containers": [{"name": "c", "image": "x"}]}}}}} for index in range(300)]
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "big", "namespace": "team-a"}, "spec": {"replicatedJobs": jobs}}
    snapshot = snapshot_of(policy(rule("gang", "add-gang-labels", "{scheduler: kueue}")
                                  + rule("sched", "set-scheduler-name", "{schedulerName: other}")),
                           namespaces=[TEAM_A])
    stored, mutation = admitted(snapshot, jobset)
    groups = {job["template"]["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"]
              for job in stored["spec"]["replicatedJobs"]}
    assert groups == {"big"}
    assert len(mutation.warnings) == len(set(mutation.warnings))
