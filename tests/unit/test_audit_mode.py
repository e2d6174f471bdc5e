"""`enforcement: Audit` in the engine and the response: evaluated as Advisory, never applied, recorded."""

import hashlib
import json
import re
from typing import Any

import jsonpatch
import pytest

from tests.helpers import decode_patch, review_for, snapshot_of
from webhook.admission.audit import mutate_audited
from webhook.admission.audit_annotations import SUMMARY_LIMIT, TOTAL_LIMIT, VALUE_LIMIT, audit_annotations, audit_key
from webhook.admission.patch_words import patch_words
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.admission.sibling_cache import SiblingCache, memoisable, rule_counts
from webhook.engine.outcome import AuditRecord, Mutation
from webhook.pods.capacity_share import CapacityClass, ShareCounts
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.workloads import default_workload_table

ML = NamespaceInfo("ml", {"team": "ml"})


def policy(name: str, rules: str, *, enforcement: str = "Audit", priority: int = 100, extra: str = "") -> str:
    return (f"apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: {name}}}\nspec:\n"
            f"  priority: {priority}\n  enforcement: {enforcement}\n{extra}  rules:\n{rules}")


GPU_POOL = policy("gpu-pool", "  - {name: gpu-nodes, action: add-node-selector, parameters: {node-pool: gpu}}\n"
                              "  - {name: gpu-taint, action: add-toleration, parameters: "
                              "{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}\n")
TEAM_LABEL = policy("team-label", "  - {name: team, action: add-labels, parameters: {team: ml}}\n",
                    enforcement="Advisory")


def deployment(template_spec: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "train", "namespace": "ml", **({"labels": labels} if labels else {})},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "train"}}, "template": {
                "metadata": {"labels": {"app": "train"}},
                "spec": {"containers": [{"name": "c", "image": "registry.example/train:1"}],
                         **(template_spec or {})}}}}


def run(snapshot: PolicySnapshot, body: dict[str, Any]) -> Mutation:
    return mutate_audited(parse_review(body), snapshot, default_workload_table())


def answer(*texts: str, obj: dict[str, Any] | None = None) -> dict[str, Any]:
    admission = admit(parse_review(review_for(obj or deployment())), snapshot_of(*texts, namespaces=[ML]),
                      default_workload_table())
    response: dict[str, Any] = admission.response["response"]
    return response


def test_an_audit_policy_alone_changes_nothing_and_says_what_it_would_write() -> None:
    response = answer(GPU_POOL)
    assert response["allowed"] is True and "patch" not in response and "warnings" not in response
    value = json.loads(response["auditAnnotations"]["audit-gpu-pool"])
    assert value == {"verdict": "would-change", "rules": ["gpu-nodes", "gpu-taint"], "patch": [
        {"op": "add", "path": "/spec/template/metadata/annotations",
         "value": {"placer.dev/applied": "gpu-pool/gpu-nodes,gpu-pool/gpu-taint"}},
        {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"node-pool": "gpu"}},
        {"op": "add", "path": "/spec/template/spec/tolerations",
         "value": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}]}
    assert set(response["auditAnnotations"]) == {"audit-gpu-pool"}


def test_beside_a_served_policy_the_applied_annotation_stays_and_the_audit_patch_is_what_it_adds() -> None:
    response = answer(GPU_POOL, TEAM_LABEL)
    assert response["auditAnnotations"]["applied"] == "team-label/team"
    served = jsonpatch.apply_patch(deployment(), decode_patch({"response": response}))
    value = json.loads(response["auditAnnotations"]["audit-gpu-pool"])
    promoted = answer(GPU_POOL.replace("enforcement: Audit", "enforcement: Advisory"), TEAM_LABEL)
    assert jsonpatch.apply_patch(served, value["patch"]) == jsonpatch.apply_patch(
        deployment(), decode_patch({"response": promoted}))
    assert "audit-gpu-pool" not in promoted["auditAnnotations"]


def test_the_served_answer_is_the_same_with_and_without_the_audit_policy() -> None:
    with_audit = answer(GPU_POOL, TEAM_LABEL)
    without = answer(TEAM_LABEL)
    with_audit["auditAnnotations"] = {key: value for key, value in with_audit["auditAnnotations"].items()
                                      if not key.startswith("audit-")}
    assert json.dumps(with_audit) == json.dumps(without)


def test_an_audit_policy_that_runs_first_shows_the_value_it_would_take_and_one_after_changes_nothing() -> None:
    served = policy("pool", "  - {name: pool, action: add-node-selector, parameters: {node-pool: general}}\n",
                    enforcement="Advisory", priority=50)
    first = policy("gpu-first", "  - {name: gpu, action: add-node-selector, parameters: {node-pool: gpu}}\n",
                   priority=10)
    after = policy("gpu-after", "  - {name: gpu, action: add-node-selector, parameters: {node-pool: gpu}}\n",
                   priority=90)
    mutation = run(snapshot_of(served, first, after, namespaces=[ML]), review_for(deployment()))
    assert {"op": "add", "path": "/spec/template/spec/nodeSelector",
            "value": {"node-pool": "general"}} in mutation.patch
    records = {record.policy: record for record in mutation.audits}
    assert {"op": "replace", "path": "/spec/template/spec/nodeSelector/node-pool", "value": "gpu"} in (
        records["gpu-first"].patch)
    assert records["gpu-after"].verdict == "no-change" and records["gpu-after"].patch == []
    assert any("node-pool" in warning for warning in records["gpu-after"].warnings)
    assert not any("gpu" in warning for warning in mutation.warnings)  # what it would warn is never sent


def test_failure_policy_fail_on_an_audit_policy_never_denies() -> None:
    failing = policy("strict", "  - {name: bad, condition: \"int(object.metadata.name) > 0\", "
                               "action: add-labels, parameters: {a: b}}\n", extra="  failurePolicy: Fail\n")
    response = answer(failing, TEAM_LABEL)
    assert response["allowed"] is True and "status" not in response
    value = json.loads(response["auditAnnotations"]["audit-strict"])
    assert value["verdict"] == "would-deny" and "policy strict, rule bad" in value["message"]
    assert not any("strict" in warning for warning in response.get("warnings", []))


def test_an_audit_policy_honours_the_opt_out_label_as_advisory_does() -> None:
    mutation = run(snapshot_of(GPU_POOL, namespaces=[ML]), review_for(deployment(labels={
        "placer.dev/inject": "disabled"})))
    assert mutation.patch == [] and [record.verdict for record in mutation.audits] == ["no-change"]


def test_an_audit_policy_not_selecting_the_namespace_is_not_evaluated() -> None:
    scoped = GPU_POOL.replace("  rules:", "  namespaceSelector: {matchLabels: {team: data}}\n  rules:")
    assert run(snapshot_of(scoped, namespaces=[ML]), review_for(deployment())).audits == []


def test_a_denied_request_is_not_audited_and_says_so() -> None:
    enforced = policy("boundary", "  - {name: pool, action: add-node-selector, parameters: {node-pool: general}}\n",
                      enforcement="Enforced", extra="  namespaceSelector: {}\n")
    mutation = run(snapshot_of(enforced, GPU_POOL, namespaces=[ML]),
                   review_for(deployment({"nodeSelector": {"node-pool": "other"}})))
    assert mutation.denial is not None
    assert [(record.verdict, record.detail) for record in mutation.audits] == [
        ("not-evaluated", "the served policies deny the request")]


def test_gang_labels_of_an_audit_policy_reach_no_pod_group() -> None:
    gang = policy("gang", "  - {name: gang, action: add-gang-labels, parameters: {scheduler: coscheduling}}\n")
    mutation = run(snapshot_of(gang, namespaces=[ML]), review_for(deployment()))
    assert mutation.patch == [] and mutation.gang is None
    assert any("scheduling.x-k8s.io~1pod-group" in op["path"] or "scheduling.x-k8s.io/pod-group" in json.dumps(op)
               for op in mutation.audits[0].patch)


class Ledger:
    """A spot-share ledger that counts what it is asked and told."""

    def __init__(self) -> None:
        self.reads = 0
        self.entries: list[tuple[str, str, CapacityClass]] = []
        self.released = 0

    def counts(self, namespace: str, owner_uid: str) -> ShareCounts:
        self.reads += 1
        return ShareCounts(spot=3, on_demand=1, complete=True)

    def admitted(self, namespace: str, owner_uid: str, capacity_class: CapacityClass) -> None:
        self.entries.append((namespace, owner_uid, capacity_class))

    def release(self) -> None:
        self.released += 1


def owned_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": "train-", "namespace": "ml", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-1", "uid": "rs-uid", "controller": True}]},
        "spec": {"containers": [{"name": "c", "image": "registry.example/train:1"}]}}


def test_an_audit_spot_share_takes_no_ledger_entry_and_reads_the_counts_the_served_run_read() -> None:
    share = policy("spot", "  - {name: share, action: spot-share, parameters: {capacity: karpenter, "
                           "maxSpotPercentage: 50}}\n")
    ledger = Ledger()
    admission = admit(parse_review(review_for(owned_pod())), snapshot_of(share, TEAM_LABEL, namespaces=[ML]),
                      default_workload_table(), ledger=ledger)
    assert ledger.entries == [] and ledger.released == 1 and ledger.reads == 1
    assert admission.mutation.share is None
    record = admission.mutation.audits[0]
    assert record.verdict == "would-change" and "karpenter.sh/capacity-type" in json.dumps(record.patch)


def test_metrics_count_an_audited_rule_that_matched_as_audit() -> None:
    mutation = run(snapshot_of(GPU_POOL, TEAM_LABEL, namespaces=[ML]), review_for(deployment()))
    rules, _ = rule_counts(mutation)
    assert ("gpu-pool", "gpu-nodes", "audit") in rules and ("team-label", "team", "applied") in rules
    assert not any(outcome == "applied" for policy, _, outcome in rules if policy == "gpu-pool")


def test_a_kept_sibling_answer_carries_the_audit_annotations() -> None:
    snapshot = snapshot_of(GPU_POOL, TEAM_LABEL, namespaces=[ML])
    siblings = SiblingCache()
    first = admit(parse_review(review_for(owned_pod())), snapshot, default_workload_table(), siblings=siblings)
    again = review_for(owned_pod())
    again["request"]["uid"] = "another"
    second = admit(parse_review(again), snapshot, default_workload_table(), siblings=siblings)
    assert len(siblings) == 1
    assert second.response["response"]["auditAnnotations"] == first.response["response"]["auditAnnotations"]
    assert "audit-gpu-pool" in second.response["response"]["auditAnnotations"]
    assert rule_counts(second.mutation) == rule_counts(first.mutation)


def test_an_audit_policy_reading_a_name_keeps_sibling_answers_from_being_reused() -> None:
    reads_name = policy("named", "  - {name: n, condition: \"object.metadata.generateName.startsWith('t')\", "
                                 "action: add-labels, parameters: {a: b}}\n")
    assert memoisable(snapshot_of(TEAM_LABEL, namespaces=[ML]))
    assert not memoisable(snapshot_of(TEAM_LABEL, reads_name, namespaces=[ML]))


@pytest.mark.parametrize(("name", "key"), [
    ("gpu-pool", "audit-gpu-pool"),
    ("a" * 57, "audit-" + "a" * 57),
    ("a" * 58, "audit-" + "a" * 48 + "-" + hashlib.sha256(b"a" * 58).hexdigest()[:8]),
    ("team.pools-" + "x" * 37 + "-" + "y" * 30, "audit-team.pools-" + "x" * 37 + "-"
     + hashlib.sha256(("team.pools-" + "x" * 37 + "-" + "y" * 30).encode()).hexdigest()[:8]),
])
def test_audit_keys_are_qualified_name_parts_of_at_most_63_characters(name: str, key: str) -> None:
    """The API server drops a key that is not a qualified name's name part (attributes.go, checkKeyFormat); a
    long name is cut (no trailing `-` or `.`) and given a digest of the whole, so two long names never meet."""
    found = audit_key(name)
    assert found == key
    assert re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", found)
    assert audit_key(name + "b") != found


def test_a_long_patch_is_cut_with_a_marker_and_a_policy_past_the_total_is_never_dropped() -> None:
    ops = [{"op": "add", "path": f"/spec/template/metadata/labels/key-{index}", "value": "v" * 60}
           for index in range(200)]
    records = [AuditRecord(f"p{index}", "would-change", ops, ["r"]) for index in range(6)]
    found = audit_annotations(records)
    assert set(found) == {f"audit-p{index}" for index in range(6)}
    sizes = [len(value.encode()) for value in found.values()]
    assert sum(sizes) <= TOTAL_LIMIT + 2 * SUMMARY_LIMIT
    first = json.loads(found["audit-p0"])
    assert len(found["audit-p0"].encode()) <= VALUE_LIMIT
    assert first["patch"] == ops[:len(first["patch"])] and first["cut"].startswith(f"{len(first['patch'])} of 200")
    last = json.loads(found["audit-p5"])
    assert "patch" not in last and "left out" in last["cut"] and last["rules"] == ["r"]


def test_no_change_records_add_no_annotation() -> None:
    assert audit_annotations([AuditRecord("quiet", "no-change")]) == {}


def test_patch_words_say_what_would_be_written() -> None:
    record = run(snapshot_of(GPU_POOL, namespaces=[ML]), review_for(deployment())).audits[0]
    assert patch_words(record.patch) == ["add nodeSelector node-pool=gpu", "add toleration nvidia.com/gpu:NoSchedule"]
    assert patch_words([{"op": "replace", "path": "/spec/schedulerName", "value": "volcano"},
                        {"op": "remove", "path": "/spec/priority"},
                        {"op": "add", "path": "/metadata/labels/team", "value": "ml"}]) == [
        "set schedulerName volcano", "remove spec.priority", "add label team=ml"]


def test_each_rule_is_told_its_own_part_of_the_would_be_patch() -> None:
    rules = ("  - {name: pool, action: add-node-selector, parameters: {node-pool: gpu}}\n"
             "  - {name: zone, action: add-node-selector, parameters: {zone-class: fast}}\n"
             "  - {name: spread, action: add-pod-anti-affinity, parameters: {topologyKey: kubernetes.io/hostname}}\n"
             "  - {name: near, action: add-node-affinity, parameters: {key: disk, values: ssd}}\n")
    record = run(snapshot_of(policy("split", rules), namespaces=[ML]), review_for(deployment())).audits[0]
    assert record.rules == ["pool", "zone", "spread", "near"]
    assert record.by_rule["pool"] == [
        {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"node-pool": "gpu"}}]
    assert record.by_rule["zone"] == [
        {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"zone-class": "fast"}}]
    assert [set(op["value"]) for op in record.by_rule["spread"]] == [{"podAntiAffinity"}]
    assert [set(op["value"]) for op in record.by_rule["near"]] == [{"nodeAffinity"}]
    assert patch_words(record.by_rule["zone"]) == ["add nodeSelector zone-class=fast"]
