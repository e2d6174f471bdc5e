"""CEL error semantics, ordering, conflicts and pass-through rules of the engine."""

import time
from typing import Any
from unittest import mock

from tests.conftest import fixture_request
from tests.helpers import run, snapshot_of
from webhook.admission.review import parse_review
from webhook.engine.mutate import mutate
from webhook.policy.cel import environment as cel
from webhook.policy.snapshot import NamespaceInfo
from webhook.workloads import default_workload_table

TEAM_A = NamespaceInfo("team-a", {"environment": "production", "team": "ml"})


def policy(rules: str, *, name: str = "p", extra: str = "") -> str:
    return (f"apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: {name}}}\nspec:\n"
            f"{extra}  rules:\n{rules}")


def rule(condition: str, *, name: str = "r", action: str = "add-node-selector", parameters: str = "{pool: x}") -> str:
    return f"  - name: {name}\n    condition: {condition!r}\n    action: {action}\n    parameters: {parameters}\n"


def test_missing_key_is_false_silently() -> None:
    snapshot = snapshot_of(policy(rule("resources.limits['nvidia.com/gpu'] > 0")), namespaces=[TEAM_A])
    mutation = run(snapshot, fixture_request("pod-no-resources-create-dryrun"))
    assert mutation.patch == [] and mutation.warnings == []
    assert [t.outcome for t in mutation.traces] == ["missing"]


def test_gpu_condition_matches_pods_with_gpus() -> None:
    snapshot = snapshot_of(policy(rule("resources.limits['nvidia.com/gpu'] > 0")), namespaces=[TEAM_A])
    mutation = run(snapshot, fixture_request("pod-bare-create-dryrun"))
    assert {"op": "add", "path": "/spec/nodeSelector", "value": {"pool": "x"}} in mutation.patch


def test_other_errors_skip_the_rule_with_a_warning_and_later_rules_still_run() -> None:
    rules = rule("workload.replicas / 0 > 1", name="broken") + rule("true", name="fine", parameters="{zone: a}")
    mutation = run(snapshot_of(policy(rules), namespaces=[TEAM_A]), fixture_request("deployment-create-dryrun"))
    assert mutation.denial is None
    assert any("p/broken: condition: divide by zero" in w for w in mutation.warnings)
    assert [t.outcome for t in mutation.traces] == ["error", "applied"]
    assert mutation.applied == ["p/fine"]


def test_failure_policy_fail_denies_naming_policy_rule_and_error() -> None:
    snapshot = snapshot_of(policy(rule("workload.replicas / 0 > 1", name="broken"), extra="  failurePolicy: Fail\n"))
    mutation = run(snapshot, fixture_request("deployment-create-dryrun"))
    assert mutation.denial == "policy p, rule broken: condition: divide by zero"
    assert mutation.patch == []


def test_error_value_is_never_read_as_true_and_non_bool_is_an_error() -> None:
    """What the load-time type check cannot know (a `dyn` value) still errors at admission, never as true."""
    rules = (rule("!(dyn(object.spec.replicas) + 'x' == 'x')", name="err")
             + rule("dyn(object.spec.replicas)", name="int"))
    mutation = run(snapshot_of(policy(rules)), fixture_request("deployment-create-dryrun"))
    assert [t.outcome for t in mutation.traces] == ["error", "error"]
    assert mutation.patch == []
    assert any("condition returned int, not bool" in w for w in mutation.warnings)


def test_an_evaluation_past_the_step_wise_limit_is_a_rule_error_not_a_hang() -> None:
    heavy = rule("lists.range(200000).all(x, true)")
    started = time.monotonic()
    mutation = run(snapshot_of(policy(heavy)), fixture_request("pod-bare-create-dryrun"))
    assert time.monotonic() - started < 10
    assert [t.outcome for t in mutation.traces] == ["error"]
    assert any("Iteration budget exceeded: an evaluation may take 100,000 outer comprehension steps, each loop "
               "inside them 10,000; see docs/cel.md" in w for w in mutation.warnings)


def test_priority_then_name_order_and_first_writer_wins() -> None:
    late = policy(rule("true", parameters="{pool: late}"), name="a-late", extra="  priority: 200\n")
    early = policy(rule("true", parameters="{pool: early}"), name="z-early", extra="  priority: 10\n")
    mutation = run(snapshot_of(late, early), fixture_request("pod-bare-create-dryrun"))
    assert {"op": "add", "path": "/spec/nodeSelector", "value": {"pool": "early"}} in mutation.patch
    assert mutation.applied == ["z-early/r", "a-late/r"]
    assert any("a-late/r: nodeSelector pool is 'early', kept" in w for w in mutation.warnings)


def test_namespace_selector_limits_policies() -> None:
    selected = policy(rule("true"), extra="  namespaceSelector: {matchLabels: {team: ml}}\n")
    assert run(snapshot_of(selected, namespaces=[TEAM_A]), fixture_request("pod-bare-create-dryrun")).patch
    other = NamespaceInfo("team-a", {"team": "web"})
    mutation = run(snapshot_of(selected, namespaces=[other]), fixture_request("pod-bare-create-dryrun"))
    assert mutation.patch == [] and mutation.passed_through == "no policy selects this namespace"


def test_variables_are_lazy_and_shared_by_rules() -> None:
    text = policy(
        rule("variables.gpus > 0", name="uses", parameters="{gpu: 'yes'}"),
        extra="  variables:\n  - {name: gpus, expression: \"resources.limits['nvidia.com/gpu']\"}\n"
        "  - {name: boom, expression: '1 / 0'}\n",
    )
    mutation = run(snapshot_of(text), fixture_request("pod-bare-create-dryrun"))
    assert mutation.warnings == []  # `boom` is never evaluated: no rule reads it
    assert mutation.applied == ["p/uses"]


def test_parameter_expressions_are_validated_at_admission() -> None:
    text = policy("  - name: r\n    action: add-node-selector\n    parameterExpressions:\n"
                  "      pool: \"'not a valid label value!'\"\n")
    mutation = run(snapshot_of(text), fixture_request("pod-bare-create-dryrun"))
    assert mutation.patch == []
    assert any("parameters.pool" in w for w in mutation.warnings)


def test_opt_out_label_and_job_update_and_pod_update_pass_through() -> None:
    snapshot = snapshot_of(policy(rule("true")))
    body = fixture_request("deployment-create-dryrun")
    body["request"]["object"]["metadata"]["labels"]["placer.dev/inject"] = "disabled"
    assert run(snapshot, body).passed_through == "labelled placer.dev/inject=disabled"
    assert run(snapshot, fixture_request("job-update-label-real")).passed_through == "UPDATE of Job is not mutated"
    assert run(snapshot, fixture_request("pod-bare-update-label-real")).passed_through == "UPDATE of Pod is not mutated"


def test_update_changing_the_template_is_mutated_and_one_that_does_not_is_not() -> None:
    snapshot = snapshot_of(policy(rule("true")))
    changed = run(snapshot, fixture_request("deployment-update-image-apply-real"))
    assert changed.passed_through is None and changed.patch
    unchanged = run(snapshot, fixture_request("deployment-update-label-real"))
    assert unchanged.passed_through == "the update does not change the pod template" and unchanged.patch == []


def test_pod_from_a_mutated_template_passes_through_unchanged() -> None:
    snapshot = snapshot_of(policy(rule("true")))
    deployment = run(snapshot, fixture_request("deployment-create-dryrun"))
    assert deployment.patch
    pod = fixture_request("pod-rs-owned-generatename-create-real")
    spec = pod["request"]["object"]["spec"]
    spec["nodeSelector"] = {"pool": "x"}
    pod["request"]["object"]["metadata"].setdefault("annotations", {})["placer.dev/applied"] = "p/r"
    assert run(snapshot, pod).patch == []


def test_deadline_stops_evaluation_and_says_so() -> None:
    mutation = run_with_deadline(snapshot_of(policy(rule("true"))), time.monotonic() - 1)
    assert any("deadline reached" in w for w in mutation.warnings)
    assert mutation.patch == []


def run_with_deadline(snapshot, deadline):  # type: ignore[no-untyped-def]
    return mutate(parse_review(fixture_request("pod-bare-create-dryrun")), snapshot, default_workload_table(),
                  deadline=deadline)


def test_conditions_evaluated_together_give_each_rule_its_own_outcome() -> None:
    """A policy's conditions run in one CEL call; a missing key in one must not change the others' results."""
    rules = (rule("workload.replicas >= 1", name="a", parameters="{a: x}")
             + rule("workload.kind == 'Pod'", name="b", parameters="{b: x}")
             + rule("pod.metadata.labels['no-such-label'] == 'x'", name="c", parameters="{c: x}")
             + rule("namespaceObject.metadata.labels['team'] == 'ml'", name="d", parameters="{d: x}"))
    snapshot = snapshot_of(policy(rules), namespaces=[TEAM_A])
    assert snapshot.policies[0].conditions
    mutation = run(snapshot, fixture_request("deployment-create-dryrun"))
    assert [(t.rule, t.outcome) for t in mutation.traces] == [
        ("a", "applied"), ("b", "not-matched"), ("c", "missing"), ("d", "applied")]
    assert mutation.warnings == []


def test_a_variable_only_the_parameters_read_is_not_evaluated_for_a_rule_whose_condition_is_false() -> None:
    """Variables are evaluated lazily: `team` reads a label this Deployment's pods lack, and only
    the rules' parameters read it, in a form that cannot have it written in (`has(variables.team)`). The rule
    whose condition is false does not match, batched with another condition or alone; the one whose condition
    holds needs the variable and says it is missing."""
    extra = "  variables:\n  - name: team\n    expression: pod.metadata.labels['team']\n"
    parameters = "    parameterExpressions:\n      team: \"has(variables.team) ? 'yes' : 'no'\"\n"

    def computed(name: str, condition: str) -> str:
        return f"  - name: {name}\n    condition: {condition!r}\n    action: add-node-selector\n" + parameters

    together = (computed("pods-only", "workload.kind == 'Pod'")
                + computed("deployments", "workload.kind == 'Deployment'"))
    for rules, expected in [
        (together, [("pods-only", "not-matched"), ("deployments", "missing")]),
        (computed("pods-only", "workload.kind == 'Pod'"), [("pods-only", "not-matched")]),
    ]:
        snapshot = snapshot_of(policy(rules, extra=extra), namespaces=[TEAM_A])
        assert all(rule.inlined is None for rule in snapshot.policies[0].rules)  # nothing written in
        mutation = run(snapshot, fixture_request("deployment-create-dryrun"))
        assert [(t.rule, t.outcome) for t in mutation.traces] == expected
        assert mutation.patch == [] and mutation.warnings == []


def variables_and_plain_conditions() -> Any:
    """A policy with conditions that read variables (`team` reads a pod label) and plain ones."""
    extra = ("  variables:\n  - name: replicas\n    expression: workload.replicas\n"
             "  - name: team\n    expression: pod.metadata.labels['team']\n")
    rules = (rule("variables.replicas >= 1", name="a", parameters="{a: x}")
             + rule("variables.replicas > 100", name="b", parameters="{b: x}")
             + rule("variables.team == 'ml'", name="c", parameters="{c: x}")
             + rule("workload.kind == 'Deployment'", name="d", parameters="{d: x}")
             + rule("workload.kind == 'Pod'", name="e", parameters="{e: x}"))
    return snapshot_of(policy(rules, extra=extra), namespaces=[TEAM_A])


def test_conditions_reading_variables_are_decided_together_and_a_missing_variable_fails_only_its_own() -> None:
    """Conditions reading variables are batched with the variables written in, apart from the plain ones: the
    variable `team` reads a label this Deployment's pods lack, so its rules say so, and every other rule is
    unaffected."""
    snapshot = variables_and_plain_conditions()
    assert [batch.rules for batch in snapshot.policies[0].conditions] == [("d", "e"), ("a", "b", "c")]
    mutation = run(snapshot, fixture_request("deployment-create-dryrun"))
    assert [(t.rule, t.outcome) for t in mutation.traces] == [
        ("a", "applied"), ("b", "not-matched"), ("c", "missing"), ("d", "applied"), ("e", "not-matched")]
    assert mutation.warnings == []
    assert {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"a": "x", "d": "x"}} in mutation.patch


def test_a_policy_whose_batches_both_hold_is_decided_by_one_evaluation_with_the_same_outcomes() -> None:
    """Both batches in one program, tried first: where no condition fails (these pods carry `team`), the rules
    come out exactly as from the two batches."""
    snapshot = variables_and_plain_conditions()
    combined = snapshot.policies[0].combined
    assert combined is not None and combined.rules == ("d", "e", "a", "b", "c")
    body = fixture_request("deployment-create-dryrun")
    body["request"]["object"]["spec"]["template"]["metadata"].setdefault("labels", {})["team"] = "ml"
    evaluations = []
    real = cel.evaluate

    def counted(program: Any, bound: Any, **options: Any) -> Any:
        evaluations.append(program)
        return real(program, bound, **options)

    with mock.patch.object(cel, "evaluate", counted):
        mutation = run(snapshot, body)
    assert [(t.rule, t.outcome) for t in mutation.traces] == [
        ("a", "applied"), ("b", "not-matched"), ("c", "applied"), ("d", "applied"), ("e", "not-matched")]
    assert evaluations == [combined.program]
    assert {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"a": "x", "c": "x", "d": "x"}} in (
        mutation.patch)
