"""`restrict-tolerations`: PodTolerationRestriction's whitelist semantics, and what always passes."""

from typing import Any

import pytest

from tests.helpers import compile_errors, review_for, run, snapshot_of
from webhook.actions.restrictions import covers
from webhook.admission.review import parse_review
from webhook.admission.validation import validate_policy_review
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.snapshot import NamespaceInfo

TEAM_A = NamespaceInfo("team-a", {"tenant": "team-a"})
GPU = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


# The cases of pkg/util/tolerations/merge (IsSuperset): (allowed entry, pod toleration, covered).
@pytest.mark.parametrize(("entry", "toleration", "covered"), [
    (GPU, GPU, True),
    (GPU, {**GPU, "value": "batch"}, False),
    (GPU, {**GPU, "effect": "NoExecute"}, False),
    ({**GPU, "effect": ""}, {**GPU, "effect": "NoExecute"}, True),  # an empty effect covers every effect
    ({"key": "dedicated", "operator": "Exists"}, {**GPU, "value": "anything"}, True),
    (GPU, {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}, False),  # Equal never covers Exists
    ({"key": "", "operator": "Exists"}, {"key": "x", "operator": "Exists"}, True),  # empty key + Exists: all
    ({"key": "", "operator": "Equal"}, {"key": "x", "operator": "Equal"}, False),
    ({"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
     {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}, True),
    ({"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
     {"key": "k", "operator": "Exists", "effect": "NoExecute"}, False),  # unbounded is more than 60 s
    ({"key": "k", "value": "v"}, {"key": "k", "value": "v"}, True),  # no operator means Equal
])
def test_coverage_is_is_superset(entry: dict[str, Any], toleration: dict[str, Any], covered: bool) -> None:
    assert covers(entry, toleration) is covered


def policy(enforcement: str, extra_rule: str = "") -> str:
    return ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: gpu-only}\nspec:\n"
            f"  enforcement: {enforcement}\n  namespaceSelector: {{}}\n  rules:\n{extra_rule}"
            "  - name: only-gpu\n    action: restrict-tolerations\n    parameters:\n      allowed:\n"
            "      - {key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}\n")


def pod(tolerations: list[dict[str, Any]], owner: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "team-a"}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": "o", "uid": "1",
                                        "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [{"name": "c", "image": "i"}], "tolerations": tolerations}}


DEFAULTS = [{"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300} for key in ("not-ready", "unreachable")]


def test_a_toleration_outside_the_list_is_refused_under_enforced_and_warned_under_advisory() -> None:
    other = pod([*DEFAULTS, {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}])
    refused = run(snapshot_of(policy("Enforced"), namespaces=[TEAM_A]), review_for(other))
    assert refused.denial == ('pods "p" is forbidden: policy gpu-only, rule only-gpu: spec.tolerations: wanted one of '
                              '"dedicated=gpu:NoSchedule", found "dedicated=batch:NoSchedule" (enforcement: Enforced)')
    warned = run(snapshot_of(policy("Advisory"), namespaces=[TEAM_A]), review_for(other))
    assert warned.denial is None
    assert warned.warnings == ["gpu-only/only-gpu: toleration dedicated=batch:NoSchedule is not allowed "
                               "(allowed: dedicated=gpu:NoSchedule)"]


def test_the_api_servers_defaults_and_placers_own_tolerations_always_pass() -> None:
    own = "  - {name: spot, action: add-toleration, parameters: {key: spot, operator: Exists, effect: NoSchedule}}\n"
    snapshot = snapshot_of(policy("Enforced", own), namespaces=[TEAM_A])
    allowed = pod([*DEFAULTS, GPU, {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}])
    mutation = run(snapshot, review_for(allowed))
    assert mutation.denial is None and mutation.warnings == []
    added = run(snapshot, review_for(pod(list(DEFAULTS))))
    assert added.denial is None and added.patch, "the toleration Placer adds itself passes"


def test_a_daemon_pod_keeps_the_tolerations_its_controller_adds() -> None:
    daemon = [{"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": "NoSchedule"}
              for key in ("disk-pressure", "memory-pressure", "pid-pressure", "unschedulable")]
    snapshot = snapshot_of(policy("Enforced"), namespaces=[TEAM_A])
    assert run(snapshot, review_for(pod([*DEFAULTS, *daemon], owner="DaemonSet"))).denial is None
    assert run(snapshot, review_for(pod([*DEFAULTS, *daemon]))).denial is not None


def test_a_deployment_template_is_checked_too() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "team-a"},
                  "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                      "metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}],
                                                                   "tolerations": [{"operator": "Exists"}]}}}}
    mutation = run(snapshot_of(policy("Enforced"), namespaces=[TEAM_A]), review_for(deployment))
    assert mutation.denial is not None and 'spec.template.spec.tolerations' in mutation.denial
    assert 'found "*"' in mutation.denial, "a toleration of every taint"


@pytest.mark.parametrize(("allowed", "message"), [
    ("[]", "parameters.allowed: must be a non-empty list"),
    ("[{key: a, operator: Near}]", "[0].operator must be Equal or Exists"),
    ("[{key: a, operator: Exists, value: b}]", "[0].value must be empty when operator is Exists"),
    ("[{value: b}]", "[0]: an empty key requires operator Exists"),
    ("[{key: a, effect: Sometimes}]", "[0].effect must be one of"),
    ("[{key: a, colour: red}]", "[0]: unknown field 'colour'"),
])
def test_bad_allowed_lists_are_load_time_errors(allowed: str, message: str) -> None:
    text = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: p}\nspec:\n  rules:\n"
            f"  - {{name: r, action: restrict-tolerations, parameters: {{allowed: {allowed}}}}}\n")
    errors = compile_errors(text)
    assert any(message in error for error in errors), errors


def test_the_validating_webhook_refuses_a_bad_enforcement_at_its_field() -> None:
    document = {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "p"},
                "spec": {"enforcement": "Always", "rules": [
                    {"name": "r", "action": "add-labels", "parameters": {"a": "b"}}]}}
    body = review_for(document)
    body["request"]["kind"] = {"group": "placer.dev", "version": "v1alpha1", "kind": "SchedulingPolicy"}
    response = validate_policy_review(parse_review(body), PolicyCompiler())["response"]
    assert response["allowed"] is False and response["status"]["code"] == 422
    assert response["status"]["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": "spec.enforcement",
         "message": "must be Advisory, Enforced or Audit, not 'Always'"}]
