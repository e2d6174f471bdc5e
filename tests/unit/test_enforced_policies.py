"""Enforced policies in the engine: refusals at the Pod and the workload, the opt-out label, nodeName,
exemptions, UPDATEs, and Advisory left as it was."""

from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import REPO
from tests.helpers import compile_errors, review_for, run, snapshot_of
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.cluster.health.policy_health import PolicyHealth, RuleCounts, recent_status
from webhook.commands.cli import main
from webhook.policy.snapshot import NamespaceInfo
from webhook.workloads import default_workload_table

TEAM_A = NamespaceInfo("team-a", {"tenant": "team-a"})


def policy(*, enforcement: str = "Enforced", rules: str = "", exemptions: str = "") -> str:
    rules = rules or "  - {name: pool, action: add-node-selector, parameters: {node-pool: general}}\n"
    return ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: boundary}\nspec:\n"
            f"  enforcement: {enforcement}\n  namespaceSelector: {{matchLabels: {{tenant: team-a}}}}\n"
            f"{exemptions}  rules:\n{rules}")


def pod(spec: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web", "namespace": "team-a"}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}], **(spec or {})}}


def deployment(template_spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "team-a"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}], **template_spec}}}}


def review(obj: dict[str, Any], *, user: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    body = review_for(obj, **options)
    if user is not None:
        body["request"]["userInfo"] = user
    return body


SHARED = {"nodeSelector": {"node-pool": "shared-premium"}}


def test_a_pod_with_its_own_conflicting_node_selector_is_refused_like_pod_node_selector() -> None:
    mutation = run(snapshot_of(policy(), namespaces=[TEAM_A]), review(pod(SHARED)))
    assert mutation.denial == ('pods "web" is forbidden: policy boundary, rule pool: spec.nodeSelector[node-pool]: '
                               'wanted "general", found "shared-premium" (enforcement: Enforced)')
    assert mutation.refused and mutation.patch == []
    assert [trace.outcome for trace in mutation.traces] == ["denied"]


def test_the_workload_is_refused_so_no_controller_loops_on_refused_pods() -> None:
    mutation = run(snapshot_of(policy(), namespaces=[TEAM_A]), review(deployment(SHARED)))
    assert mutation.denial is not None
    assert "deployments \"web\" is forbidden: policy boundary, rule pool: spec.template.spec.nodeSelector[node-pool]" \
        in mutation.denial


def test_advisory_keeps_the_value_with_a_warning_as_before() -> None:
    mutation = run(snapshot_of(policy(enforcement="Advisory"), namespaces=[TEAM_A]), review(pod(SHARED)))
    assert mutation.denial is None and mutation.patch == []
    assert mutation.warnings == ["boundary/pool: nodeSelector node-pool is 'shared-premium', kept (wanted 'general')"]


def test_a_compliant_pod_is_placed_and_a_replaced_value_is_no_refusal() -> None:
    snapshot = snapshot_of(policy(), namespaces=[TEAM_A])
    placed = run(snapshot, review(pod()))
    assert placed.denial is None
    assert {"op": "add", "path": "/spec/nodeSelector", "value": {"node-pool": "general"}} in placed.patch
    override = policy(rules="  - {name: pool, action: add-node-selector, parameters: {node-pool: general}, "
                            "override: true}\n")
    replaced = run(snapshot_of(override, namespaces=[TEAM_A]), review(pod(SHARED)))
    assert replaced.denial is None and replaced.patch, "override: the rule's value holds, nothing to refuse"


@pytest.mark.parametrize(("rules", "spec", "field"), [
    ("  - {name: s, action: set-scheduler-name, parameters: {schedulerName: team-scheduler}}\n",
     {"schedulerName": "volcano"}, 'spec.schedulerName: wanted "team-scheduler", found "volcano"'),
    ("  - {name: s, action: set-priority-class, parameters: {priorityClassName: tenant-low}}\n",
     {"priorityClassName": "system-cluster-critical"},
     'spec.priorityClassName: wanted "tenant-low", found "system-cluster-critical"'),
    ("  - {name: s, action: add-node-affinity, parameters: {key: node-pool, operator: In, values: [general]}}\n",
     {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
         {"matchExpressions": [{"key": "node-pool", "operator": "In", "values": ["shared-premium"]}]}]}}}},
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: wanted \"node-pool In ['general']\""
     ", found \"node-pool In ['shared-premium']\""),
])
def test_scheduler_priority_class_and_contradicting_required_affinity_are_refused(
        rules: str, spec: dict[str, Any], field: str) -> None:
    mutation = run(snapshot_of(policy(rules=rules), namespaces=[TEAM_A]), review(pod(spec)))
    assert mutation.denial is not None and field in mutation.denial


def test_required_affinity_that_can_hold_with_the_rule_is_narrowed_not_refused() -> None:
    rules = "  - {name: s, action: add-node-affinity, parameters: {key: node-pool, operator: In, values: [general]}}\n"
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node-pool", "operator": "In", "values": ["general", "shared"]}]}]}}}}
    mutation = run(snapshot_of(policy(rules=rules), namespaces=[TEAM_A]), review(pod(spec)))
    assert mutation.denial is None and mutation.patch


def test_the_opt_out_label_exempts_nothing_under_enforced_and_everything_under_advisory() -> None:
    disabled = pod(SHARED, labels={"placer.dev/inject": "disabled"})
    enforced = run(snapshot_of(policy(), namespaces=[TEAM_A]), review(disabled))
    assert enforced.denial is not None and "found \"shared-premium\"" in enforced.denial
    advisory = run(snapshot_of(policy(enforcement="Advisory"), namespaces=[TEAM_A]), review(disabled))
    assert advisory.denial is None and advisory.passed_through == "labelled placer.dev/inject=disabled"
    template = deployment(SHARED)
    template["spec"]["template"]["metadata"]["labels"]["placer.dev/inject"] = "disabled"
    assert run(snapshot_of(policy(), namespaces=[TEAM_A]), review(template)).denial is not None


def test_exemptions_are_written_in_the_policy_and_make_it_advisory_for_that_request() -> None:
    exempt = policy(exemptions="  exemptions: {groups: [platform-admins], namespaces: [ops]}\n")
    snapshot = snapshot_of(exempt, namespaces=[TEAM_A])
    admin = run(snapshot, review(pod(SHARED), user={"username": "alice", "groups": ["platform-admins"]}))
    assert admin.denial is None and any("kept (wanted 'general')" in warning for warning in admin.warnings)
    labelled = run(snapshot, review(pod(SHARED, labels={"tier": "system", "placer.dev/exempt": "v1.x"})))
    assert labelled.denial is not None, "nothing the pod's author writes exempts it"
    tenant = run(snapshot, review(pod(SHARED), user={"username": "bob", "groups": ["team-a"]}))
    assert tenant.denial is not None


def test_a_pod_naming_its_node_is_refused_unless_a_node_creates_it() -> None:
    snapshot = snapshot_of(policy(), namespaces=[TEAM_A])
    bound = pod({"nodeName": "worker-7"})
    tenant = run(snapshot, review(bound, user={"username": "bob", "groups": ["system:authenticated"]}))
    assert tenant.denial is not None and 'spec.nodeName: wanted unset (the scheduler places pods), found "worker-7"' \
        in tenant.denial
    kubelet = run(snapshot, review(bound, user={"username": "system:node:worker-7", "groups": ["system:nodes"]}))
    assert kubelet.denial is None, "a mirror pod of a static pod"
    advisory = run(snapshot_of(policy(enforcement="Advisory"), namespaces=[TEAM_A]), review(bound))
    assert advisory.denial is None
    owned = pod({"nodeName": "worker-7"})
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                                             "uid": "1", "controller": True}]
    owned["metadata"]["annotations"] = {"placer.dev/applied": "boundary/pool"}
    assert run(snapshot, review(owned)).denial is not None, "a forged owner does not let a Pod name its node"



def test_a_pod_carrying_placers_marks_is_judged_on_its_own_content() -> None:
    snapshot = snapshot_of(policy(), namespaces=[TEAM_A])
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "1", "controller": True}]
    forged = pod(SHARED)
    forged["metadata"] |= {"ownerReferences": owner, "annotations": {"placer.dev/applied": "boundary/pool"}}
    refused = run(snapshot, review(forged))
    assert refused.denial is not None and 'found "shared-premium"' in refused.denial, "copied marks exempt nothing"
    genuine = pod({"nodeSelector": {"node-pool": "general"}})
    genuine["metadata"] |= {"ownerReferences": owner, "annotations": {"placer.dev/applied": "boundary/pool"}}
    passed = run(snapshot, review(genuine))
    assert passed.denial is None and passed.patch == [], "a pod made from a placed template needs nothing"
    unplaced = pod()
    unplaced["metadata"] |= {"ownerReferences": owner, "annotations": {"placer.dev/applied": "boundary/pool"}}
    placed = run(snapshot, review(unplaced))
    assert placed.denial is None
    assert {"op": "add", "path": "/spec/nodeSelector", "value": {"node-pool": "general"}} in placed.patch, \
        "what the marks claim the template gave, the pod gets"
    affinity = pod({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "node-pool", "operator": "In",
                                                     "values": ["shared-premium"]}]}]}}}})
    affinity["metadata"] |= {"ownerReferences": owner, "annotations": {"placer.dev/applied": "boundary/pool"}}
    held = run(snapshot, review(affinity))  # the escape of issue 48: the marks used to pass it with no selector
    assert {"op": "add", "path": "/spec/nodeSelector", "value": {"node-pool": "general"}} in held.patch, \
        "its own affinity can no longer take it to another pool: it gets the pool's selector as well"


def test_a_workload_with_a_forged_controller_is_judged_not_passed() -> None:
    snapshot = snapshot_of(policy(rules=(
        "  - {name: pool, action: add-node-selector, parameters: {node-pool: general}}\n"
        "  - {name: gpu, action: restrict-tolerations, parameters: {allowed: [{key: dedicated, operator: Equal, "
        "value: gpu, effect: NoSchedule}]}}\n")), namespaces=[TEAM_A])
    replicaset = deployment({**SHARED, "tolerations": [{"operator": "Exists"}]})
    replicaset["kind"] = "ReplicaSet"
    replicaset["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "mine",
                                                  "uid": "2", "controller": True}]
    refused = run(snapshot, review(replicaset))
    assert refused.denial is not None and refused.patch == []
    assert 'replicasets "web" is forbidden' in refused.denial and 'found "shared-premium"' in refused.denial
    assert 'found "*"' in refused.denial
    genuine = deployment({"nodeSelector": {"node-pool": "general"}})
    genuine["kind"] = "ReplicaSet"
    genuine["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                               "uid": "3", "controller": True}]
    passed = run(snapshot, review(genuine))
    assert passed.denial is None and passed.patch == [] and passed.passed_through is not None


def test_a_controllers_workload_is_checked_by_boundary_rules_cut_from_a_batched_policy() -> None:
    """The boundary rules are cut from the policy to check a controller's ReplicaSet; the policy's condition
    batch also decided a rule left out, and taking it along made the policy fail to build (KeyError): the
    namespace's ReplicaSets were all refused."""
    snapshot = snapshot_of(policy(rules=(
        "  - {name: pool, condition: \"object.metadata.name != 'x'\", action: add-node-selector, "
        "parameters: {node-pool: general}}\n"
        "  - {name: lab, condition: \"object.metadata.name != 'y'\", action: add-labels, parameters: {x: y}}\n")),
        namespaces=[TEAM_A])
    genuine = deployment({"nodeSelector": {"node-pool": "general"}})
    genuine["kind"] = "ReplicaSet"
    genuine["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                               "uid": "3", "controller": True}]
    passed = run(snapshot, review(genuine))
    assert passed.denial is None and passed.patch == [] and passed.passed_through is not None
    escaping = deployment(SHARED)
    escaping["kind"] = "ReplicaSet"
    escaping["metadata"]["ownerReferences"] = genuine["metadata"]["ownerReferences"]
    refused = run(snapshot, review(escaping))
    assert refused.denial is not None and 'found "shared-premium"' in refused.denial


def test_a_pod_with_placers_marks_or_an_update_is_judged_by_rules_cut_from_a_batched_policy() -> None:
    """The same cut judges a Pod that carries Placer's marks (its controller's, or a user's copy of them) and
    a Pod UPDATE (a controller relabelling its Pods): neither may fail on the batch of a rule left out."""
    snapshot = snapshot_of(policy(rules=(
        "  - {name: pool, condition: \"object.metadata.name != 'x'\", action: add-node-selector, "
        "parameters: {node-pool: general}}\n"
        "  - {name: lab, condition: \"object.metadata.name != 'y'\", action: add-labels, parameters: {x: y}}\n")),
        namespaces=[TEAM_A])
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "1", "controller": True}]
    marked = pod({"nodeSelector": {"node-pool": "general"}})
    marked["metadata"] |= {"ownerReferences": owner, "annotations": {"placer.dev/applied": "boundary/pool"}}
    passed = run(snapshot, review(marked))
    assert passed.denial is None and passed.patch == []
    forged = pod(SHARED)
    forged["metadata"] |= {"ownerReferences": owner, "annotations": {"placer.dev/applied": "boundary/pool"}}
    refused = run(snapshot, review(forged))
    assert refused.denial is not None and 'found "shared-premium"' in refused.denial
    relabelled = pod({"nodeSelector": {"node-pool": "general"}}, labels={"app": "web", "tier": "front"})
    updated = run(snapshot, review(relabelled, operation="UPDATE", old=marked))
    assert updated.denial is None and updated.patch == []


def test_an_update_is_refused_only_when_it_introduces_the_conflict() -> None:
    snapshot = snapshot_of(policy(), namespaces=[TEAM_A])
    before = deployment({"nodeSelector": {"node-pool": "general"}})
    after = deployment(SHARED)
    introduced = run(snapshot, review(after, operation="UPDATE", old=before))
    assert introduced.denial is not None
    old = deployment(SHARED)
    new = deployment(SHARED)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/app:2"
    kept = run(snapshot, review(new, operation="UPDATE", old=old))
    assert kept.denial is None, "a conflict from before the policy was Enforced must not block every update"
    assert any("kept (wanted 'general')" in warning for warning in kept.warnings)


def test_the_review_answer_is_a_403_with_the_message() -> None:
    admission = admit(parse_review(review(pod(SHARED))), snapshot_of(policy(), namespaces=[TEAM_A]),
                      default_workload_table())
    response = admission.response["response"]
    assert admission.result == "denied" and response["allowed"] is False
    assert response["status"]["code"] == 403 and response["status"]["reason"] == "Forbidden"
    assert response["status"]["message"].startswith('pods "web" is forbidden: policy boundary, rule pool:')


@pytest.mark.parametrize(("spec", "message"), [
    ("enforcement: Strict", "spec.enforcement: must be Advisory, Enforced or Audit, not 'Strict'"),
    ("exemptions: {users: alice}", "spec.exemptions.users: must be a list of non-empty strings"),
    ("exemptions: {namespaces: [Bad_NS]}", "spec.exemptions.namespaces: 'Bad_NS'"),
    ("exemptions: {who: [x]}", "spec.exemptions.who: unknown field"),
    ("enforcement: Enforced", "spec.namespaceSelector: an Enforced policy must say which namespaces it holds"),
    ("exemptions: {objectSelector: {matchLabels: {tier: system}}}",
     "spec.exemptions.objectSelector: removed: it matched labels on the object, which the object's author writes"),
])
def test_bad_enforcement_and_exemptions_are_errors_at_the_field(spec: str, message: str) -> None:
    text = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: org}\nspec:\n"
            f"  {spec}\n  rules:\n  - {{name: r, action: add-labels, parameters: {{a: b}}}}\n")
    errors = compile_errors(text)
    assert any(message in error for error in errors), errors


def test_lint_says_which_rules_refuse(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    (tmp_path / "boundary.yaml").write_text(policy(rules=(
        "  - {name: pool, action: add-node-selector, parameters: {node-pool: general}}\n"
        "  - {name: mark, action: add-labels, parameters: {tenant: team-a}}\n")))
    (tmp_path / "advice.yaml").write_text(policy(enforcement="Advisory", exemptions="  exemptions: {users: [a]}\n")
                                          .replace("name: boundary", "name: advice"))
    assert main(["lint", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert ('boundary: Enforced in namespaces {"matchLabels": {"tenant": "team-a"}}: refuses a Pod or template '
            "naming its node, and a conflict with rule(s) pool; the opt-out label does not exempt") in err
    assert "policy advice: spec.exemptions has no effect under enforcement Advisory" in err


def test_refusals_count_in_the_policys_recent_status_and_fit_the_crd_schema() -> None:
    health = PolicyHealth(900, 1, {"pool": RuleCounts({"applied": 5, "denied": 2}), "mark": RuleCounts({"applied": 7})})
    recent = recent_status(health)
    assert recent["denied"] == 2 and recent["rules"][0]["denied"] == 2 and recent["rules"][0]["evaluated"] == 7
    assert "denied" not in recent["rules"][1], "a rule that refused nothing reads as before"
    crd = yaml.safe_load((REPO / "deploy/base/crd.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["recent"]
    jsonschema.validate(recent, {**schema, "additionalProperties": False})
    for rule in recent["rules"]:
        assert set(rule) <= set(schema["properties"]["rules"]["items"]["properties"]), "the API server would prune it"


def test_under_annotation_opt_in_an_enforced_namespace_counts_as_opted_in() -> None:
    enforced_ns = NamespaceInfo("team-a", {"tenant": "team-a", "placer.dev/enforce": "true"})
    snapshot = snapshot_of(policy(), namespaces=[enforced_ns])
    admission = admit(parse_review(review(pod(SHARED))), snapshot, default_workload_table(),
                      opt_in="label-or-annotation")
    assert admission.result == "denied"
    plain = snapshot_of(policy(), namespaces=[TEAM_A])
    skipped = admit(parse_review(review(pod(SHARED))), plain, default_workload_table(), opt_in="label-or-annotation")
    assert skipped.result == "skipped", "a namespace neither opted in nor enforced is passed through, as before"
