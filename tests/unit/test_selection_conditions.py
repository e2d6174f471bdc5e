"""A selection's conditions evaluated as one list (webhook.policy.selection_conditions): the same answer,
rule by rule, as each policy evaluating its own batch, whatever the requests, and the same fallback when an
element fails."""

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.bench.bench_engine import policies as bench_policies
from tests.conftest import REPO, fixture_request
from tests.helpers import review_for, run, snapshot_of
from webhook.engine.outcome import Mutation
from webhook.policy import selection_conditions
from webhook.policy.cel import stepwise
from webhook.policy.selection_conditions import FAILURES_ALLOWED, SelectionConditions
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot

EXAMPLES = sorted(path.read_text() for path in (REPO / "policies").glob("*.yaml"))
REQUESTS = sorted(path.stem for path in (Path(__file__).parents[1] / "fixtures" / "requests").glob("*.json"))
LABEL_SETS = [
    {"environment": "production", "team": "ml", "cost-profile": "spot-friendly", "gang-scheduler": "native"},
    {"team": "data-eng", "gang-scheduler": "volcano", "tenant": "team-a"},
    {},
]
SHARED = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: %(name)s}
spec:
  priority: %(priority)d
  variables:
  - {name: team, expression: "namespaceObject.metadata.labels['team']"}
  rules:
  - name: ml-pool
    condition: "namespaceObject.metadata.?labels.?team.orValue('') == 'ml'"
    action: add-node-selector
    parameters: {pool-%(name)s: ml}
  - name: big
    condition: "workload.replicas >= 2"
    action: add-labels
    parameters: {big-%(name)s: "yes"}
  - name: by-variable
    condition: "variables.team == 'ml'"
    action: add-annotations
    parameters: {team-%(name)s: ml}
"""


def shared(name: str, priority: int) -> str:
    return SHARED % {"name": name, "priority": priority}


def answer(mutation: Mutation) -> tuple[Any, ...]:
    return (mutation.patch, mutation.warnings, mutation.notes, mutation.traces, mutation.denial, mutation.applied,
            mutation.passed_through)


def selections(snapshot: PolicySnapshot) -> list[SelectionConditions]:
    return [found.conditions for found in snapshot.policy_sets.values()]


def first_and_again(texts: list[str], labels: dict[str, str], body: dict[str, Any]) -> tuple[Any, Any, PolicySnapshot]:
    """The answer with each policy evaluating its own batch (the list never compiled), and on a snapshot whose
    selection has been used twice already (its conditions are then one list)."""
    namespace = NamespaceInfo(body["request"].get("namespace") or "team-a", labels)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(selection_conditions, "COMPILE_AT_USE", 10**9)
        first = answer(run(snapshot_of(*texts, namespaces=[namespace]), copy.deepcopy(body)))
    used = snapshot_of(*texts, namespaces=[namespace])
    for _ in range(2):
        run(used, copy.deepcopy(body))
    return first, answer(run(used, copy.deepcopy(body))), used


@pytest.mark.parametrize("labels", LABEL_SETS, ids=["production-ml", "data-eng", "unlabelled"])
@pytest.mark.parametrize("name", REQUESTS)
def test_every_example_policy_on_every_captured_request_is_answered_alike(name: str, labels: dict[str, str]) -> None:
    body = fixture_request(name)
    first, again, used = first_and_again([*EXAMPLES, *bench_policies(30)], labels, body)
    assert again == first
    if labels is LABEL_SETS[0] and name in ("pod-bare-create-dryrun", "deployment-create-dryrun"):
        assert all(selection.tried[0] > 0 for selection in selections(used)), "answered from the list"


def test_policies_sharing_conditions_are_one_call_with_each_distinct_condition_once() -> None:
    body = fixture_request("deployment-create-dryrun")
    texts = [shared("a", 1), shared("b", 2), shared("c", 3)]
    first, again, used = first_and_again(texts, {"team": "ml"}, body)
    assert again == first
    assert [trace.outcome for trace in again[3]] == ["applied"] * 9
    (selection,) = selections(used)
    assert selection.size == 3, "nine conditions, three distinct (the variable written in)"
    assert selection.tried == (2, 0), "compiled at its second use; used at the second and the third"


def test_a_failing_condition_falls_back_to_each_policy_and_gives_up_on_the_list() -> None:
    """`namespaceObject.metadata.labels['team']` on a namespace without the label is an error: the list fails
    as a whole; each policy's own batch, then each rule, is evaluated as before."""
    body = fixture_request("deployment-create-dryrun")
    texts = [shared("a", 1), shared("b", 2)]
    first, again, used = first_and_again(texts, {"environment": "production"}, body)
    assert again == first
    outcomes = {(trace.policy, trace.rule): trace.outcome for trace in again[3]}
    assert outcomes[("a", "big")] == "applied" and outcomes[("b", "ml-pool")] == "not-matched"
    assert outcomes[("a", "by-variable")] == "missing"
    (selection,) = selections(used)
    assert selection.tried == (0, 2)
    for _ in range(2 * FAILURES_ALLOWED):
        assert answer(run(used, body)) == first
    assert selection.tried == (0, FAILURES_ALLOWED + 1), "given up: not evaluated again"


def test_a_selection_with_one_batched_policy_keeps_its_own_batch() -> None:
    body = fixture_request("deployment-create-dryrun")
    first, again, used = first_and_again([shared("a", 1)], {"team": "ml"}, body)
    assert again == first
    (selection,) = selections(used)
    assert selection.tried == (0, 0)


LOOPING = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: %(name)s}
spec:
  rules:
  - name: env-a
    condition: "pod.spec.containers.all(c, c.env.all(e, e.name != '%(name)s-A'))"
    action: add-labels
    parameters: {checked-%(name)s-a: "yes"}
  - name: env-b
    condition: "pod.spec.containers.all(c, c.env.all(e, e.name != '%(name)s-B'))"
    action: add-labels
    parameters: {checked-%(name)s-b: "yes"}
"""


def test_a_list_past_the_iteration_budget_is_left_to_each_policy_not_evaluated_step_by_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime's 10,000 comprehension steps count a whole evaluation: two policies whose batches each
    take 6,200 steps fit one by one, not together. The list then fails and each policy's batch decides."""
    body = fixture_request("pod-bare-create-dryrun")
    body["request"]["object"]["spec"]["containers"] = [
        {"name": f"c{index}", "image": "registry.example/app:1",
         "env": [{"name": f"VAR_{item}", "value": "x"} for item in range(30)]} for index in range(100)]
    texts = [LOOPING % {"name": "one"}, LOOPING % {"name": "two"}]

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("evaluated step by step")

    monkeypatch.setattr(stepwise, "evaluate", refuse)
    first, again, used = first_and_again(texts, {}, body)
    assert again == first
    assert [trace.outcome for trace in again[3]] == ["applied"] * 4
    (selection,) = selections(used)
    assert selection.tried == (0, 2)


def tenant_policy(name: str, rules: list[tuple[str, str, str, str]], *, priority: int,
                  enforcement: str = "Advisory") -> str:
    """A policy of team-a's namespace: each rule (name, condition, action, parameters)."""
    text = "".join(f"  - {{name: {rule}, condition: {condition!r}, action: {action}, parameters: {parameters}}}\n"
                   for rule, condition, action, parameters in rules)
    return (f"apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: {name}}}\nspec:\n"
            f"  priority: {priority}\n  enforcement: {enforcement}\n"
            f"  namespaceSelector: {{matchLabels: {{tenant: team-a}}}}\n  rules:\n{text}")


def test_a_template_labelled_inject_disabled_gets_the_enforced_policys_own_values() -> None:
    """On a template labelled placer.dev/inject=disabled only the Enforced policies run: the list, made for
    the whole selection, must not hand them the values of the policies before them."""
    advisory = tenant_policy("adv", [("t1", "object.metadata.name == 'web'", "add-labels", "{t1: y}"),
                                     ("t2", "object.metadata.name != ''", "add-labels", "{t2: y}")], priority=1)
    enforced = tenant_policy("enf", [("f1", "object.metadata.name == 'nope'", "add-node-selector", "{pool: general}"),
                                     ("f2", "object.metadata.name == 'nope2'", "add-labels", "{f2: y}")],
                             priority=2, enforcement="Enforced")
    template = {"metadata": {"labels": {"app": "w"}},
                "spec": {"containers": [{"name": "m", "image": "r/a:1"}], "restartPolicy": "Never"}}
    disabled = copy.deepcopy(template)
    disabled["metadata"]["labels"]["placer.dev/inject"] = "disabled"
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "web", "namespace": "team-a"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                            "Worker": {"replicas": 2, "template": disabled}}}}
    first, again, used = first_and_again([advisory, enforced], {"tenant": "team-a"}, review_for(job))
    assert again == first
    assert not any("/Worker/" in op["path"] for op in again[0]), "no rule of either policy holds on Worker"
    assert all(selection.tried[0] > 0 for selection in selections(used))


def test_a_condition_that_is_not_a_bool_is_reported_by_its_rule_not_read_from_the_list() -> None:
    one = tenant_policy("one", [("r", "object.metadata.name == 'web'", "add-labels", "{r: y}"),
                                ("s", "[1, true][0]", "add-labels", "{s: y}")], priority=1)
    two = tenant_policy("two", [("r", "object.metadata.name == 'nope'", "add-labels", "{r2: y}"),
                                ("s", "object.metadata.name == 'web'", "add-labels", "{s2: y}")], priority=2)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "team-a"},
           "spec": {"containers": [{"name": "c", "image": "r/a:1"}]}}
    first, again, _ = first_and_again([one, two], {"tenant": "team-a"}, review_for(pod))
    assert again == first
    assert any("condition returned int, not bool" in warning for warning in again[1])


def test_two_policies_of_one_name_and_one_condition_with_different_variables_keep_their_own_values() -> None:
    condition = "variables.v == 'team-a'"
    texts = [tenant_policy(name, [("r", condition, "add-labels", f"{{r-{name}: y}}"),
                                  ("s", "object.metadata.name == 'web'", "add-labels", f"{{s-{name}: y}}")],
                           priority=priority).replace(
                               "  rules:", f"  variables:\n  - {{name: v, expression: {source!r}}}\n  rules:")
             for name, priority, source in (("same", 1, "namespaceObject.metadata.labels['tenant']"),
                                            ("same", 2, "object.metadata.name"),
                                            ("other", 3, "object.metadata.name"))]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "team-a"},
           "spec": {"containers": [{"name": "c", "image": "r/a:1"}]}}
    first, again, used = first_and_again(texts, {"tenant": "team-a"}, review_for(pod))
    assert again == first
    (selection,) = selections(used)
    assert selection.size == 2, "r's two texts once the variables are written in (s, alone, is no batch)"
    assert selection.tried == (2, 0)
