"""What the engine works out from a namespace alone (webhook.policy.namespace_facts): the policies that select
it, `namespaceObject`, and every expression that reads nothing else are worked out once per namespace and
snapshot, give the answers they gave when worked out for each request, and are worked out again when the
namespace changes."""

import copy
from typing import Any

import pytest

from tests.conftest import fixture_request
from tests.helpers import snapshot_of
from webhook.admission.review import parse_review
from webhook.engine.mutate import mutate
from webhook.engine.outcome import Mutation
from webhook.policy import namespace_facts
from webhook.policy.cel import environment as cel
from webhook.policy.namespace_facts import FactsByNamespace, NamespaceFacts
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.workloads import default_workload_table

POOL = "namespaceObject.metadata.labels['pool']"
ZONE = "namespaceObject.metadata.labels['zone']"
POLICY = f"""apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: from-namespace}}
spec:
  namespaceSelector: {{matchLabels: {{placer: "on"}}}}
  rules:
  - name: pool
    condition: "'pool' in namespaceObject.metadata.labels"
    action: add-node-selector
    parameterExpressions: {{pool: "{POOL}"}}
  - name: zone
    action: add-node-selector
    parameterExpressions: {{zone: "{ZONE}"}}
  - name: replicas
    action: add-labels
    parameterExpressions: {{workers: "string(int(namespaceObject.metadata.labels['workers']) * 2)"}}
"""


def namespace(**labels: str) -> NamespaceInfo:
    return NamespaceInfo("team-a", {"placer": "on", **labels})


def admit(snapshot: PolicySnapshot, info: NamespaceInfo) -> Mutation:
    body = copy.deepcopy(fixture_request("pod-bare-create-dryrun"))
    body["request"]["namespace"] = info.name
    return mutate(parse_review(body), snapshot, default_workload_table(), namespace=info)


def answer(mutation: Mutation) -> tuple[Any, ...]:
    return (mutation.patch, mutation.warnings, mutation.notes, [
        (trace.policy, trace.rule, trace.outcome, trace.detail) for trace in mutation.traces],
        mutation.passed_through)


def test_a_parameter_read_from_the_namespace_is_evaluated_once_per_namespace(evaluated: list[str]) -> None:
    snapshot = snapshot_of(POLICY)
    ml = namespace(pool="ml", workers="3")
    first = answer(admit(snapshot, ml))
    assert {"op": "add", "path": "/spec/nodeSelector", "value": {"pool": "ml"}} in first[0]
    assert ("from-namespace", "replicas", "applied", "") in first[3]
    for _ in range(3):
        assert answer(admit(snapshot, ml)) == first
    assert evaluated.count(POOL) == 1

    gpu = namespace(pool="gpu", workers="3")
    assert {"op": "add", "path": "/spec/nodeSelector", "value": {"pool": "gpu"}} in admit(snapshot, gpu).patch
    assert evaluated.count(POOL) == 2, "another namespace (or the same one changed): worked out again"


def test_each_request_gets_the_answer_it_got_when_every_expression_was_evaluated_for_it() -> None:
    infos = [namespace(pool="ml", workers="3"), namespace(zone="a"), namespace(workers="many"), namespace()]
    for info in infos:
        fresh = [answer(admit(snapshot_of(POLICY), info)) for _ in range(2)]
        used = snapshot_of(POLICY)
        again = [answer(admit(used, info)) for _ in range(2)]
        assert again == fresh


def test_a_missing_key_is_kept_and_an_error_is_evaluated_each_time(evaluated: list[str]) -> None:
    snapshot = snapshot_of(POLICY)
    info = namespace(workers="many")
    first = admit(snapshot, info)
    outcomes = {trace.rule: (trace.outcome, trace.detail) for trace in first.traces}
    assert outcomes["zone"] == ("missing", 'parameterExpressions.zone: Key not found in map : "zone"')
    assert outcomes["replicas"][0] == "error"
    assert answer(admit(snapshot, info)) == answer(first)
    assert evaluated.count(ZONE) == 1
    assert sum("workers" in source for source in evaluated) == 2, "an error may be the deadline's: not kept"


def test_the_policies_a_namespace_selects_follow_its_labels() -> None:
    snapshot = snapshot_of(POLICY)
    assert admit(snapshot, namespace(pool="ml")).patch
    left = admit(snapshot, NamespaceInfo("team-a", {"pool": "ml"}))
    assert left.patch == [] and left.passed_through == "no policy selects this namespace"


@pytest.mark.parametrize(("source", "only"), [
    (POOL, True),
    ("has(namespaceObject.metadata.labels.pool) ? namespaceObject.metadata.name : 'none'", True),
    ("'fixed'", True),
    ("namespaceObject.metadata.labels['pool'] + object.metadata.name", False),
    ("namespaceObject.metadata.labels.exists(key, key == pod.metadata.labels['app'])", False),
    ("resources.limits['cpu'] > 2.0", False),
])
def test_an_expression_reads_only_the_namespace_when_it_reads_no_other_variable(source: str, only: bool) -> None:
    assert cel.compile_expression(cel.new_environment(), source).reads_only_namespace is only


def test_a_policy_variable_is_not_the_namespace_even_when_it_reads_only_the_namespace() -> None:
    environment = cel.new_environment()
    assert not cel.compile_expression(environment, "variables.pool == 'ml'").reads_only_namespace


def test_facts_are_kept_per_namespace_object_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(namespace_facts, "NAMESPACES_KEPT", 2)
    monkeypatch.setattr(namespace_facts, "FACTS_KEPT", 2)
    by_namespace = FactsByNamespace()
    first, same = namespace(pool="ml"), namespace(pool="ml")
    facts = by_namespace.of(first)
    assert by_namespace.of(first) is facts
    assert by_namespace.of(same) is not facts, "an equal namespace read again is a change: worked out afresh"
    by_namespace.of(namespace())
    assert by_namespace.of(first) is not facts, "past NAMESPACES_KEPT: every namespace's are dropped"

    kept = NamespaceFacts()
    keys = [object(), object(), object()]
    kept.remember(keys[0], "a")
    kept.remember(keys[1], "b")
    assert (kept.recall(keys[0]), kept.recall(keys[1]), kept.recall(keys[2])) == ("a", "b", None)
    kept.remember(keys[2], "c")
    assert (kept.recall(keys[0]), kept.recall(keys[2])) == (None, "c"), "past FACTS_KEPT: dropped first"


BY_NAMESPACE = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: by-namespace}
spec:
  rules:
  - name: pooled
    condition: "'pool' in namespaceObject.metadata.labels"
    action: add-labels
    parameters: {pooled: "yes"}
  - name: zoned
    condition: "'zone' in namespaceObject.metadata.labels"
    action: add-labels
    parameters: {zoned: "yes"}
"""


def test_a_batch_of_conditions_that_read_only_the_namespace_is_evaluated_once_per_namespace(
        evaluated: list[str]) -> None:
    snapshot = snapshot_of(BY_NAMESPACE)
    info = namespace(pool="ml")
    first = answer(admit(snapshot, info))
    assert [(rule, outcome) for _, rule, outcome, _ in first[3]] == [("pooled", "applied"), ("zoned", "not-matched")]
    for _ in range(3):
        assert answer(admit(snapshot, info)) == first
    assert len(evaluated) == 1, evaluated
