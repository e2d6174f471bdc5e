"""A value a rule wrote under an earlier version of its policy, judged against the rule as it is now.

Each case admits a Deployment under the rule's first version with the engine (as the webhook did), then
judges the stored result against the second version: a value Placer wrote that differs is `fail`, with a
message saying what differs and a patch that replaces it; once patched the workload passes, and the
webhook's UPDATE admission of the patched object changes nothing more. A value the user wrote stays `pass`.
"""

import copy
import json
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.helpers import review_for, run, snapshot_of
from webhook.cluster.reports.compliance import Verdict, evaluate
from webhook.engine.value_drift import LAST_APPLIED, ValueCheck
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.workloads import default_workload_table

WORKLOADS = default_workload_table()
TEAM_A = NamespaceInfo("team-a", {"team": "ml"})
ZONE = "topology.kubernetes.io/zone"


def snapshot(*rules: dict[str, Any]) -> PolicySnapshot:
    policy = {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "placement"},
              "spec": {"rules": list(rules)}}
    return snapshot_of(yaml.safe_dump(policy), namespaces=[TEAM_A])


def deployment(**template_spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team-a", "labels": {"app": "web"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}], **template_spec}}}}


def admitted(obj: dict[str, Any], policies: PolicySnapshot) -> dict[str, Any]:
    """The object as stored after the webhook admitted its CREATE under `policies`."""
    stored: dict[str, Any] = jsonpatch.apply_patch(obj, run(policies, review_for(obj)).patch)
    stored["metadata"].update(uid="3b1f6a52", resourceVersion="48213", generation=1)
    stored["status"] = {"replicas": 3}
    return stored


def judged(stored: dict[str, Any], policies: PolicySnapshot) -> tuple[str, str, Verdict]:
    verdict = evaluate(stored, policies, WORKLOADS)
    (result,) = verdict.results
    return result.result, result.message, verdict


def template_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def rule(name: str, action: str, **parameters: Any) -> dict[str, Any]:
    return {"name": name, "action": action, "parameters": parameters}


SPREAD = {"topologyKey": ZONE, "labelSelector": {"app": "web"}}
CASES = [
    pytest.param(
        rule("zone", "add-topology-spread", **SPREAD),
        rule("zone", "add-topology-spread", **SPREAD, matchLabelKeys=["pod-template-hash"]),
        f'topologySpreadConstraints[{ZONE}] lacks matchLabelKeys ["pod-template-hash"], which the rule now adds',
        ("topologySpreadConstraints", [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                        "labelSelector": {"matchLabels": {"app": "web"}},
                                        "matchLabelKeys": ["pod-template-hash"]}]),
        id="spread-gains-matchLabelKeys"),
    pytest.param(
        rule("zone", "add-topology-spread", **SPREAD, whenUnsatisfiable="DoNotSchedule"),
        rule("zone", "add-topology-spread", **SPREAD, whenUnsatisfiable="ScheduleAnyway", maxSkew=2),
        f'topologySpreadConstraints[{ZONE}] has maxSkew 1, the rule now writes 2; has whenUnsatisfiable '
        '"DoNotSchedule", the rule now writes "ScheduleAnyway"',
        ("topologySpreadConstraints", [{"maxSkew": 2, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
                                        "labelSelector": {"matchLabels": {"app": "web"}}}]),
        id="spread-softened-replaces-not-adds"),
    pytest.param(
        rule("pool", "add-node-selector", **{"node-pool": "general"}),
        rule("pool", "add-node-selector", **{"node-pool": "general-v2"}),
        'nodeSelector[node-pool] is "general"; the rule now writes "general-v2"',
        ("nodeSelector", {"node-pool": "general-v2"}),
        id="node-selector-value"),
    pytest.param(
        rule("gpu", "add-toleration", key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
        rule("gpu", "add-toleration", key="nvidia.com/gpu", operator="Exists", effect="NoExecute"),
        'tolerations[nvidia.com/gpu] has effect "NoSchedule", the rule now writes "NoExecute"',
        ("tolerations", [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]),
        id="toleration-effect"),
    pytest.param(
        rule("disk", "add-node-affinity", key="disk", values=["ssd"], type="preferred", weight=20),
        rule("disk", "add-node-affinity", key="disk", values=["ssd"], type="preferred", weight=80),
        "nodeAffinity.preferred[disk] has weight 20, the rule now writes 80",
        ("affinity", {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 80, "preference": {"matchExpressions": [
                {"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}),
        id="node-affinity-preferred-weight"),
    pytest.param(
        rule("zones", "add-node-affinity", key=ZONE, values=["a"]),
        rule("zones", "add-node-affinity", key=ZONE, values=["a", "b"]),
        f'nodeAffinity.required.nodeSelectorTerms[0][{ZONE}] has values ["a"], the rule now writes ["a","b"]',
        ("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a", "b"]}]}]}}}),
        id="node-affinity-required-values"),
    pytest.param(
        rule("apart", "add-pod-anti-affinity", topologyKey="kubernetes.io/hostname", labelSelector={"app": "web"}),
        rule("apart", "add-pod-anti-affinity", topologyKey="kubernetes.io/hostname", labelSelector={"app": "web"},
             weight=100),
        "podAntiAffinity.preferred[kubernetes.io/hostname] has weight 50, the rule now writes 100",
        ("affinity", {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}},
                                                "topologyKey": "kubernetes.io/hostname"}}]}}),
        id="pod-anti-affinity-weight"),
    pytest.param(
        rule("priority", "set-priority-class", priorityClassName="batch-low"),
        rule("priority", "set-priority-class", priorityClassName="batch-high"),
        'priorityClassName is "batch-low"; the rule now writes "batch-high"',
        ("priorityClassName", "batch-high"),
        id="priority-class"),
    pytest.param(
        rule("scheduler", "set-scheduler-name", schedulerName="volcano"),
        rule("scheduler", "set-scheduler-name", schedulerName="kai-scheduler"),
        'schedulerName is "volcano"; the rule now writes "kai-scheduler"',
        ("schedulerName", "kai-scheduler"),
        id="scheduler-name"),
]


@pytest.mark.parametrize(("before", "after", "message", "field"), CASES)
def test_a_value_placer_wrote_under_the_rules_earlier_version_fails_and_is_replaced(
        before: dict[str, Any], after: dict[str, Any], message: str, field: tuple[str, Any]) -> None:
    earlier, now = snapshot(before), snapshot(after)
    stored = admitted(deployment(), earlier)
    assert judged(stored, earlier)[0] == "pass", "in step with the version it was admitted under"

    untouched = copy.deepcopy(stored)
    result, said, verdict = judged(stored, now)
    assert (result, said) == ("fail", f"rule placement/{after['name']}: {message} (written by Placer)")
    assert stored == untouched, "judging never changes the stored object"
    patched = jsonpatch.apply_patch(stored, verdict.patch)
    name, value = field
    assert template_spec(patched)[name] == value, "the stale value is replaced, not joined by a second one"
    assert {key: item for key, item in template_spec(patched).items() if key != name} == \
        {key: item for key, item in template_spec(stored).items() if key != name}, "nothing else changes"

    assert judged(patched, now)[:2] == ("pass", "applying the rule now changes nothing")
    update = review_for(patched, operation="UPDATE", old=stored)
    assert run(now, update).patch == [], "the webhook's admission of the fix leaves it as it is"


def test_the_users_own_differing_value_stays_pass_and_says_what_the_rule_would_write() -> None:
    policies = snapshot(rule("pool", "add-node-selector", **{"node-pool": "general"}))
    stored = admitted(deployment(nodeSelector={"node-pool": "team-a-own"}), policies)
    assert "placer.dev/applied" not in stored["spec"]["template"].get("metadata", {}).get("annotations", {})
    result, message, verdict = judged(stored, policies)
    assert (result, message) == ("pass", 'the workload keeps its own value: nodeSelector[node-pool] is '
                                         '"team-a-own"; the rule would write "general"')
    assert verdict.patch == [] and not verdict.drifted


def test_a_value_in_the_users_last_applied_manifest_is_theirs_even_where_the_rule_is_listed() -> None:
    """kubectl apply: the rule kept the user's value while another rule wrote, so both are listed in
    `placer.dev/applied`; the user's manifest (last-applied configuration) says whose value it is."""
    rules = (rule("pool", "add-node-selector", **{"node-pool": "general"}),
             rule("zone", "add-topology-spread", **SPREAD))
    manifest = deployment(nodeSelector={"node-pool": "team-a-own"})
    manifest["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(manifest)}
    stored = admitted(manifest, snapshot(*rules))
    applied = stored["spec"]["template"]["metadata"]["annotations"]["placer.dev/applied"]
    assert applied == "placement/pool,placement/zone"
    verdict = evaluate(stored, snapshot(*rules), WORKLOADS)
    results = {r.rule: (r.result, r.message) for r in verdict.results}
    assert results["pool"] == ("pass", 'the workload keeps its own value: nodeSelector[node-pool] is '
                                       '"team-a-own"; the rule would write "general"')
    assert results["zone"] == ("pass", "applying the rule now changes nothing")
    assert verdict.patch == []


def test_a_template_placer_never_marked_keeps_a_matching_value_as_its_own() -> None:
    """A constraint the user wrote on the rule's topologyKey (no `placer.dev/applied`): the rule differs,
    the workload keeps it, as admission keeps it."""
    own = {"maxSkew": 3, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
           "labelSelector": {"matchLabels": {"app": "web"}}}
    stored = deployment(topologySpreadConstraints=[own])
    result, message, _ = judged(stored, snapshot(rule("zone", "add-topology-spread", **SPREAD,
                                                      whenUnsatisfiable="ScheduleAnyway")))
    assert result == "pass"
    assert message == (f"the workload keeps its own value: topologySpreadConstraints[{ZONE}] has maxSkew 3, "
                       "the rule would write 1")


def test_a_rule_with_computed_parameters_is_compared_with_what_it_computes_now() -> None:
    before = {**rule("pool", "add-node-selector"), "parameterExpressions": {"node-pool": "'general'"}}
    after = {**rule("pool", "add-node-selector"), "parameterExpressions": {"node-pool": "'pool-' + string(3)"}}
    stored = admitted(deployment(), snapshot(before))
    result, message, _ = judged(stored, snapshot(after))
    assert (result, message) == ("fail", 'rule placement/pool: nodeSelector[node-pool] is "general"; the rule '
                                         'now writes "pool-3" (written by Placer)')


def test_one_value_check_serves_many_workloads_and_keeps_admission_snapshots_untouched() -> None:
    earlier = snapshot(rule("pool", "add-node-selector", **{"node-pool": "general"}))
    now = snapshot(rule("pool", "add-node-selector", **{"node-pool": "general-v2"}))
    check = ValueCheck(now)
    stored = admitted(deployment(), earlier)
    mine = admitted(deployment(nodeSelector={"node-pool": "mine"}), earlier)
    assert [r.result for r in evaluate(stored, now, WORKLOADS, check).results] == ["fail"]
    assert [r.result for r in evaluate(mine, now, WORKLOADS, check).results] == ["pass"]
    assert now.policies[0].rules[0].action is not check.snapshot.policies[0].rules[0].action
    untouched = copy.deepcopy(stored)
    assert run(now, review_for(untouched)).patch == [], "admission itself still keeps the value in place"


def test_a_gangs_queue_and_size_written_earlier_fail_with_the_keys_that_differ() -> None:
    def gang(**parameters: Any) -> PolicySnapshot:
        return snapshot(rule("gang", "add-gang-labels", scheduler="volcano", **parameters))

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "team-a"},
           "spec": {"parallelism": 4, "completions": 4, "template": {"spec": {
               "restartPolicy": "Never", "containers": [{"name": "train", "image": "trainer:1"}]}}}}
    stored = admitted(job, gang(queue="research"))
    result, message, verdict = judged(stored, gang(queue="prod", minAvailable=2))
    assert result == "fail"
    assert message == ('rule placement/gang: annotations[scheduling.volcano.sh/queue-name] is "research"; the rule '
                       'now writes "prod" (written by Placer); annotations[scheduling.volcano.sh/group-min-member] '
                       'is "4"; the rule now writes "2" (written by Placer)')
    annotations = jsonpatch.apply_patch(stored, verdict.patch)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["scheduling.volcano.sh/queue-name"] == "prod"
    assert annotations["scheduling.volcano.sh/group-min-member"] == "2"


def test_an_operator_resources_projected_templates_are_compared_and_patched_in_its_own_fields() -> None:
    """A SparkApplication's driver and executor are not pod templates: the engine sees them through a
    projection, and the replacement goes back into `spec.driver` and `spec.executor`."""
    spark = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
             "metadata": {"name": "pi", "namespace": "team-a"},
             "spec": {"type": "Scala", "mode": "cluster", "image": "spark:3.5", "mainClass": "Pi",
                      "driver": {"cores": 1}, "executor": {"instances": 2, "cores": 1}}}
    earlier = snapshot(rule("pool", "add-node-selector", **{"node-pool": "spark"}))
    now = snapshot(rule("pool", "add-node-selector", **{"node-pool": "spark-v2"}))
    stored = admitted(spark, earlier)
    result, message, verdict = judged(stored, now)
    assert result == "fail"
    assert message == ('rule placement/pool: template driver: nodeSelector[node-pool] is "spark"; the rule now '
                       'writes "spark-v2" (written by Placer); template executor: nodeSelector[node-pool] is '
                       '"spark"; the rule now writes "spark-v2" (written by Placer)')
    assert sorted(op["path"] for op in verdict.patch) == ["/spec/driver/nodeSelector/node-pool",
                                                          "/spec/executor/nodeSelector/node-pool"]
    assert judged(jsonpatch.apply_patch(stored, verdict.patch), now)[0] == "pass"


def test_a_rule_that_also_adds_a_key_says_so_and_its_patch_carries_both() -> None:
    earlier = snapshot(rule("pool", "add-node-selector", **{"node-pool": "general"}))
    now = snapshot(rule("pool", "add-node-selector", **{"node-pool": "general-v2", "disk": "ssd"}))
    stored = admitted(deployment(), earlier)
    result, message, verdict = judged(stored, now)
    assert (result, message) == ("fail", 'rule placement/pool: nodeSelector[node-pool] is "general"; the rule now '
                                         'writes "general-v2" (written by Placer); it also adds what the workload '
                                         'lacks (see the patch)')
    patched = jsonpatch.apply_patch(stored, verdict.patch)
    assert template_spec(patched)["nodeSelector"] == {"node-pool": "general-v2", "disk": "ssd"}
