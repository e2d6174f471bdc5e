"""The runtime is handed only the fields the policies can observe (policy/cel/field_reads.py).

The engine cuts `pod`, `object`, `oldObject` and `request` down to what the snapshot's expressions can observe
before the runtime converts them (the conversion of a whole 8 KB Deployment cost more than evaluating 50
rules). Cutting away anything an expression observes would change a rule's outcome, so the main test
evaluates every expression below — the example policies' and a set written to catch each way a value can be
observed — on the captured API server objects whole and cut down, and requires the same result.
"""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import fixture_request
from tests.helpers import snapshot_of
from webhook.admission.review import parse_review
from webhook.engine.activation import pod_variable, workload_variable
from webhook.policy.cel import environment as cel
from webhook.policy.cel.field_reads import FieldTree, merged, prune
from webhook.policy.snapshot import NamespaceInfo
from webhook.workloads import default_workload_table

REPO = Path(__file__).resolve().parents[2]
FIXTURES = sorted(path.stem for path in (REPO / "tests" / "fixtures" / "requests").glob("*.json"))

OBSERVING = [
    # iterated: the list keeps its length, each element only what the loop looks at
    "pod.spec.containers.exists(c, true)",
    "pod.spec.containers.exists(c, c.image.startsWith('registry.k8s.io/'))",
    "pod.spec.containers.all(c, has(c.resources))",
    "pod.spec.containers.exists_one(c, c.name == 'app')",
    "pod.spec.containers.filter(c, has(c.ports)).size()",
    "pod.spec.containers.map(c, c.name)",
    "pod.spec.containers.map(c, c)",
    "pod.spec.containers.exists(c, c == pod.spec.containers[0])",
    "pod.spec.containers.exists(c, c.?env.orValue([]).exists(e, e.name == 'MODE'))",
    "pod.spec.containers.exists(pod, pod.image != '')",
    "pod.spec.containers.all(i, c, i >= 0 && c.name != '')",
    "pod.spec.containers.transformList(i, c, c.name)",
    "object.metadata.?labels.orValue({}).all(k, k != 'x')",
    "pod.metadata.labels.exists(k, pod.metadata.labels[k] == 'web')",
    "pod.metadata.labels.filter(k, k.startsWith('app')).size()",
    # whole values: sizes, membership, equality, literals, results, conversions, functions
    "pod.spec.containers.size()",
    "size(pod.spec.containers[0])",
    "'app' in pod.metadata.labels",
    "pod.metadata.labels.size() > 0",
    "pod.spec == pod.spec",
    "[pod.spec.containers[0]].size()",
    "{'a': pod.spec}.a.containers.size()",
    "dyn(pod.spec).containers.size()",
    "type(object.spec) == map",
    "pod.metadata.labels",
    "pod",
    "object.spec",
    "sets.contains(pod.spec.containers.map(c, c.name), ['app'])",
    "cel.bind(s, pod.spec, s.containers.size())",
    "cel.bind(s, pod.spec, s)",
    "cel.bind(s, pod.spec.containers, s.exists(c, c.name == 'app'))",
    # selections: present, absent, optional, indexed by a literal or by a computed value
    "has(pod.spec.nodeSelector)",
    "has(pod.spec.containers)",
    "has(object.spec.template)",
    "pod.spec.nodeName",
    "pod.?spec.?nodeName.orValue('none')",
    "pod.spec.?containers[?0].?name.orValue('')",
    "pod.spec.containers[0].image",
    "pod.spec.containers[0].resources.limits['cpu']",
    "pod.spec.containers[pod.spec.containers.size() - 1].name",
    "object.metadata.name",
    "object.spec.replicas",
    "object.spec.?template.?spec.?containers.orValue([]).size()",
    "object.spec.template.spec.containers[0].image",
    "object.metadata.labels['app']",
    "object.metadata[?'labels'].orValue({}).size()",
    "oldObject == null",
    "oldObject.metadata.name",
    "request.userInfo.username",
    "request.userInfo.groups.exists(g, g == 'system:authenticated')",
    "request.operation == 'CREATE' && request.?dryRun.orValue(false)",
    "pod.metadata.?labels.?tier.orValue('') == 'db' || workload.replicas > 2",
]


def example_expressions() -> list[str]:
    """Every condition, variable and computed parameter of the example policies and the golden cases."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("condition", "expression") and isinstance(value, str):
                    found.append(value)
                elif key == "parameterExpressions" and isinstance(value, dict):
                    found.extend(text for text in value.values() if isinstance(text, str))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for path in sorted([*(REPO / "policies").glob("*.yaml"), *(REPO / "tests" / "golden" / "cases").glob("*/*.yaml")]):
        for document in yaml.safe_load_all(path.read_text()):
            walk(document)
    return sorted(set(found))


def variables_of(fixture: str) -> dict[str, Any]:
    """The CEL variables of the fixture's first pod template, as the engine builds them."""
    request = parse_review(fixture_request(fixture))
    obj = request.object or {}
    kind = default_workload_table().lookup(request.group, request.kind)
    assert kind is not None, fixture
    slot = kind.templates(obj)[0]
    template = slot.view(obj, slot.read(obj))
    pod, resources, _ = pod_variable(template)
    return {
        "object": obj, "oldObject": request.old_object, "request": request.as_cel(),
        "namespaceObject": NamespaceInfo("team-a", {"environment": "production"}).as_cel(),
        "workload": workload_variable(request, kind, obj), "pod": pod, "resources": resources,
        "variables": {},
    }


def cut_down(data: dict[str, Any], program: cel.Program) -> dict[str, Any]:
    assert program.fields is not None, program.source
    return {name: prune(value, program.fields[name]) if name in program.fields else value
            for name, value in data.items()}


@pytest.fixture(scope="module")
def environment() -> Any:
    return cel.new_environment()


@pytest.fixture(scope="module")
def fixture_variables() -> dict[str, dict[str, Any]]:
    return {fixture: variables_of(fixture) for fixture in FIXTURES}


@pytest.mark.parametrize("source", OBSERVING + example_expressions())
def test_an_expression_answers_the_same_on_what_it_observes(
    source: str, environment: Any, fixture_variables: dict[str, dict[str, Any]]
) -> None:
    program = cel.compile_expression(environment, source)
    for fixture, data in fixture_variables.items():
        whole = cel.evaluate(program, cel.activation(environment, data))
        cut = cel.evaluate(program, cel.activation(environment, cut_down(data, program)))
        assert cut == whole, f"{fixture}: {source}"


POD = {
    "metadata": {"labels": {"app": "web", "tier": "db"}, "annotations": {"note": "x"}},
    "spec": {
        "containers": [
            {"name": "app", "image": "registry.corp/app:1", "env": [{"name": "MODE", "value": "a"}],
             "resources": {"limits": {"cpu": "2"}}},
            {"name": "sidecar", "image": "proxy:2", "ports": [{"containerPort": 80}]},
        ],
        "nodeSelector": {"pool": "a"},
        "volumes": [{"name": "data", "emptyDir": {}}],
    },
}


@pytest.mark.parametrize(("source", "kept"), [
    ("pod.spec.containers.exists(c, c.image.startsWith('registry.corp/'))",
     {"spec": {"containers": [{"image": "registry.corp/app:1"}, {"image": "proxy:2"}]}}),
    ("pod.spec.containers.exists(c, true)", {"spec": {"containers": [{}, {}]}}),
    ("pod.metadata.?labels.?tier.orValue('') == 'db'", {"metadata": {"labels": {"tier": "db"}}}),
    ("has(pod.spec.affinity)", {"spec": {}}),
    ("pod.spec.containers[0].resources.limits['cpu'] == '2'",
     {"spec": {"containers": [{"resources": {"limits": {"cpu": "2"}}}, {}]}}),
    ("'pool' in pod.spec.nodeSelector", {"spec": {"nodeSelector": {"pool": "a"}}}),
    ("pod.metadata.labels.exists(k, k == 'app')", {"metadata": {"labels": {"app": "web", "tier": "db"}}}),
    ("cel.bind(s, pod.spec, s.nodeSelector.pool == 'a')", {"spec": {"nodeSelector": {"pool": "a"}}}),
    ("pod.spec.containers.all(i, c, c.name != '')", {"spec": {"containers": POD["spec"]["containers"]}}),
    ("size(pod) > 0", POD),
])
def test_only_what_is_observed_is_kept(source: str, kept: dict[str, Any], environment: Any) -> None:
    program = cel.compile_expression(environment, source)
    assert program.fields is not None
    assert prune(POD, program.fields["pod"]) == kept


def test_variables_an_expression_does_not_read_are_not_listed(environment: Any) -> None:
    program = cel.compile_expression(environment, "workload.replicas > 2 && resources.limits.size() > 0")
    assert program.fields is not None
    assert set(program.fields) == {"workload", "resources"}


def test_a_snapshot_keeps_what_any_of_its_policies_observes() -> None:
    snapshot = snapshot_of(
        "apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: a}\nspec:\n  rules:\n"
        "  - name: images\n    condition: \"pod.spec.containers.exists(c, c.image.startsWith('registry.corp/'))\"\n"
        "    action: add-labels\n    parameters: {registry: corp}\n",
        "apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: b}\nspec:\n  variables:\n"
        "  - name: tier\n    expression: \"pod.metadata.?labels.?tier.orValue('')\"\n  rules:\n"
        "  - name: db\n    condition: \"variables.tier == 'db'\"\n    action: add-labels\n"
        "    parameterExpressions: {replicas: \"string(object.spec.replicas)\"}\n",
    )
    deployment = fixture_request("deployment-create-dryrun")["request"]["object"]
    namespace = {"metadata": {"name": "team-a"}}
    assert snapshot.observable({"pod": POD, "object": deployment, "namespaceObject": namespace}) == {
        "pod": {"metadata": {"labels": {"tier": "db"}},
                "spec": {"containers": [{"image": "registry.corp/app:1"}, {"image": "proxy:2"}]}},
        "object": {"spec": {"replicas": deployment["spec"]["replicas"]}},
    }  # namespaceObject, which no expression names, is left out; `variables`, bound by the engine, is kept
    assert snapshot.observable({"namespaceObject": namespace, "variables": {}}) == {"variables": {}}


def test_an_expression_that_cannot_be_analysed_observes_everything_whole() -> None:
    assert merged([{"pod": FieldTree(keys={"spec": FieldTree(whole=True)})}, None], ["pod", "object"]) == {
        "pod": FieldTree(whole=True), "object": FieldTree(whole=True)}


def test_cutting_down_leaves_the_object_alone(environment: Any) -> None:
    program = cel.compile_expression(environment, "pod.spec.containers.exists(c, c.name == 'app')")
    assert program.fields is not None
    original = json.loads(json.dumps(POD))
    cut = prune(original, program.fields["pod"])
    cut["spec"]["containers"][0]["name"] = "changed"
    assert original == POD
