"""An Audit policy in the reports and the policy health: what it would change, per rule, for running workloads."""

import json
from typing import Any

import jsonpatch
import jsonschema
import yaml

from tests.conftest import REPO
from tests.helpers import snapshot_of
from webhook.admission.offline import load_policies
from webhook.cluster.health.policy_health import PolicyHealth, RuleCounts, healthy_condition, recent_status
from webhook.cluster.reports.compliance import as_create, evaluate
from webhook.cluster.reports.reports import RuleTally, counted, workload_report
from webhook.engine.value_drift import ValueCheck
from webhook.policy.snapshot import NamespaceInfo
from webhook.workloads import default_workload_table

EXAMPLES = REPO / "docs/examples/changing-policies/audit"
AUDIT = (EXAMPLES / "gpu-pool.yaml").read_text()
PROMOTED = (EXAMPLES / "promoted/gpu-pool.yaml").read_text()
ML = NamespaceInfo("ml", {"team": "ml"})
WORKLOADS = default_workload_table()


def stored_train() -> dict[str, Any]:
    """The example Deployment as the API server stores it: uid, status, defaults."""
    obj: dict[str, Any] = yaml.safe_load((EXAMPLES / "train.yaml").read_text())
    obj["metadata"].update(uid="0b5d7c55-3a63-4a0f-9d3a-2f2d6c0a1e11", resourceVersion="42", generation=1)
    obj["spec"]["template"]["spec"].update(restartPolicy="Always", dnsPolicy="ClusterFirst")
    obj["status"] = {"replicas": 2}
    return obj


def test_a_running_workload_shows_what_the_audit_policy_would_change_per_rule() -> None:
    verdict = evaluate(stored_train(), snapshot_of(AUDIT, namespaces=[ML]), WORKLOADS)
    assert [(r.policy, r.rule, r.result) for r in verdict.results] == [
        ("gpu-pool", "gpu-nodes", "warn"), ("gpu-pool", "gpu-taint", "warn")]
    assert not verdict.drifted and verdict.patch == [] and verdict.skipped is None
    result = verdict.results[0]
    assert [r.message for r in verdict.results] == ["audit: would add nodeSelector node-pool=gpu",
                                                    "audit: would add toleration nvidia.com/gpu:NoSchedule"]
    properties = dict(result.properties)
    assert properties["enforcement"] == "Audit"
    assert json.loads(properties["patch"]) == [
        {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"node-pool": "gpu"}}]


def test_promoted_the_same_workload_is_out_of_step_with_the_same_change() -> None:
    audit = evaluate(stored_train(), snapshot_of(AUDIT, namespaces=[ML]), WORKLOADS)
    promoted = evaluate(stored_train(), snapshot_of(PROMOTED, namespaces=[ML]), WORKLOADS)
    assert [r.result for r in promoted.results] == ["fail", "fail"] and promoted.drifted
    create = as_create(stored_train())
    for result in audit.results:  # each rule's part of the would-be patch, together: what promotion writes
        create = jsonpatch.apply_patch(create, json.loads(dict(result.properties)["patch"]))
    promoted_template = jsonpatch.apply_patch(as_create(stored_train()), promoted.patch)["spec"]["template"]
    assert create["spec"]["template"]["spec"] == promoted_template["spec"]


def test_a_workload_the_audit_policy_leaves_alone_passes_and_one_it_does_not_select_has_no_result() -> None:
    stored = stored_train()
    stored["spec"]["template"]["spec"].update(nodeSelector={"node-pool": "gpu"}, tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    verdict = evaluate(stored, snapshot_of(AUDIT, namespaces=[ML]), WORKLOADS)
    assert [(r.result, r.message) for r in verdict.results] == [
        ("pass", "audit: matches; applying it would change nothing")] * 2
    other = evaluate(stored_train(), snapshot_of(AUDIT, namespaces=[NamespaceInfo("ml", {"team": "web"})]),
                     WORKLOADS)
    assert other.results == ()


def test_the_report_holds_the_warn_results_with_their_patch_and_counts_them() -> None:
    verdict = evaluate(stored_train(), snapshot_of(AUDIT, namespaces=[ML]), WORKLOADS)
    report = workload_report(verdict, found=1_765_000_000)
    assert report["summary"] == {"pass": 0, "fail": 0, "warn": 2, "error": 0, "skip": 0}
    assert report["results"][0]["properties"]["enforcement"] == "Audit"
    assert json.loads(report["results"][0]["properties"]["patch"])[0]["path"] == "/spec/template/spec/nodeSelector"
    crd = yaml.safe_load((REPO / "deploy/components/policy-reports/policyreports.yaml").read_text())
    jsonschema.validate(report, crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    tally = RuleTally()
    tally.move("ml", (), counted(verdict.results))
    cluster = tally.report()
    assert cluster["summary"]["warn"] == 2 and cluster["results"][0]["result"] == "warn"
    assert "in step, 0 skipped, 1 the Audit rule would change;" in cluster["results"][0]["message"]


def test_health_counts_audited_evaluations_and_the_crd_keeps_them() -> None:
    health = PolicyHealth(900, 1, {"gpu-nodes": RuleCounts({"audit": 7, "not-matched": 3}),
                                   "gpu-taint": RuleCounts({"missing": 2, "audit": 1})})
    recent = recent_status(health)
    assert recent["audited"] == 8 and recent["applied"] == 0
    assert [rule.get("audited") for rule in recent["rules"]] == [7, 1]
    status, reason, _ = healthy_condition("gpu-pool", health, [])
    assert (status, reason) == ("True", "NoProblems"), "a rule that would apply is not a typo"
    crd = yaml.safe_load((REPO / "deploy/base/crd.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["recent"]
    assert "audited" in schema["properties"] and "audited" in schema["properties"]["rules"]["items"]["properties"]


STORED = sorted(path for path in (REPO / "tests/fixtures/requests").glob("*-update-*.json"))


def test_the_served_policies_results_are_the_same_with_audit_policies_beside_them() -> None:
    """Every stored object of the captured UPDATEs, judged by the example policies with and without the Audit
    policies of tests/fixtures/audit (one of which writes the served rules' fields first): the served
    policies' results and the patch are the same."""
    served = load_policies([str(REPO / "policies")], required=True)
    both = load_policies([str(REPO / "policies"), str(REPO / "tests/fixtures/audit/audit-policies.yaml")],
                         required=True)
    audited = {policy.name for policy in both.audited}
    compared = 0
    for path in STORED:
        stored = json.loads(path.read_text())["body"]["request"]["oldObject"]
        alone = evaluate(stored, served, WORKLOADS, ValueCheck(served))
        beside = evaluate(stored, both, WORKLOADS, ValueCheck(both))
        assert [r for r in beside.results if r.policy not in audited] == list(alone.results), path.name
        assert beside.patch == alone.patch and beside.skipped == alone.skipped, path.name
        compared += 1
    assert compared >= 4
