"""Conditions, variables and parameter expressions are type-checked when a policy loads, with the declared type
of every variable; what is only known when evaluated stays dynamic, and nothing Kubernetes' own compiler
accepts is refused."""

from typing import Any

import pytest
import yaml

from webhook.policy.compiler import PolicyCompiler
from webhook.policy.fields.field_check import FieldChecks


@pytest.fixture(scope="module")
def compiler() -> PolicyCompiler:
    return PolicyCompiler(fields=FieldChecks("1.36"))


def errors_of(compiler: PolicyCompiler, spec: str) -> list[str]:
    document: dict[str, Any] = {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy",
                                "metadata": {"name": "p"}, "spec": yaml.safe_load(spec)}
    result = compiler.compile(document, "p.yaml")
    assert (result.policy is None) == bool(result.errors)
    return [str(error) for error in result.errors]


def condition(text: str, *, variables: str = "", action: str = "add-labels", parameters: str = "{a: b}") -> str:
    quoted = text.replace("'", "''")
    return f"{variables}rules:\n- name: r\n  condition: '{quoted}'\n  action: {action}\n  parameters: {parameters}\n"


@pytest.mark.parametrize(("text", "expected"), [
    ("workload.replicas", "condition: must return bool, not int"),
    ("pod.spec.containers", "condition: must return bool, not list<Container>"),
    ("workload.replicas >= '2'", "condition: <input>:1:19: found no matching overload for '_>=_' applied to "
                                 "'(int, string)'"),
    ("workload.replicas == 2.0", "found no matching overload for '_==_' applied to '(int, double)'"),
    ("pod.spec.containers.exists(c, c.image.startsWith(1))",
     "<input>:1:49: found no matching overload for 'startsWith' applied to '(dyn, int)'"),
    ("pod.spec.containers.exists(c, c.image.contains('a') && c.image.size() == 'x')",
     "<input>:1:71: found no matching overload for '_==_' applied to '(int, string)'"),
    ("pod.spec.containers.size() > '1'", "found no matching overload for '_>_' applied to '(int, string)'"),
    ("namespaceObject.metadata.labels['tier'] > 2",
     "found no matching overload for '_>_' applied to '(string, int)'"),
    ("request.userInfo.groups.exists(g, g == 1)", "found no matching overload for '_==_' applied to '(string, int)'"),
    ("object.spec.replicas > '2'", "<input>:1:22: found no matching overload for '_>_' applied to '(int, string)' "
                                   "(object as Deployment, ReplicaSet, StatefulSet and 1 more)"),
    ("object.spec.template.spec.containers.all(c, c.name > 1)",
     "found no matching overload for '_>_' applied to '(string, int)' (object as Deployment, ReplicaSet, "
     "StatefulSet"),
    ("object.spec.pytorchReplicaSpecs.Worker.replicas == 'two'",
     "found no matching overload for '_==_' applied to '(int, string)' (object as PyTorchJob)"),
])
def test_a_type_error_is_refused_at_load(compiler: PolicyCompiler, text: str, expected: str) -> None:
    errors = errors_of(compiler, condition(text))
    assert len(errors) == 1 and expected in errors[0], errors


@pytest.mark.parametrize("text", [
    "workload.replicas > 1.5",  # ordering across int and double, as Kubernetes' CrossTypeNumericComparisons
    "resources.limits['cpu'] > 2 && resources.limits['cpu'] == 2",  # numbers are dyn: int or double in JSON
    "resources.limits['nvidia.com/gpu'] >= 1.0",
    "object.spec.replicas > 2 || object.spec.parallelism > 1",  # each kind has one of them
    "object.kind == 'Job' && object.spec.completions > 1",
    "has(object.spec.replicas) ? object.spec.replicas > 1 : true",
    "object.?spec.?replicas.orValue(1) > 1",
    "object.metadata['labels']['tier'] == 'gpu'",  # an object indexed by name is dyn, as in Placer's values
    "object.metadata[?'labels'].orValue({}).size() > 0",
    "'nodeSelector' in pod.spec && pod.spec.exists(field, field != '')",  # an object used as a map: dyn
    "object.metadata.creationTimestamp != ''",  # a date-time is the JSON string in Placer: dyn
    "pod.spec.containers.exists(c, quantity(c.resources.limits['cpu']).isGreaterThan(quantity('1')))",
    "pod.spec.containers.exists(c, c.ports.exists(p, p.containerPort == 8080))",
    "object.spec.template.spec.containers.exists(c, c.env.exists(e, e.value.startsWith('a')))",
    "dyn(workload.replicas) == '2' || true",  # dyn() says the author wants the value's own type decided later
    "object.spec.elasticPolicy.anything.goes == 1",  # free-form below an operator's spec field
    "type(object) == map || object != null",
    "request.operation == 'CREATE' && request.dryRun != true",
    "workload.labels.all(k, v, k != '' && v != '')",
    "[workload.replicas, 1.5].exists(x, x > 1)",
])
def test_dynamic_values_stay_dynamic(compiler: PolicyCompiler, text: str) -> None:
    assert errors_of(compiler, condition(text)) == []


def test_a_variables_type_is_its_expressions() -> None:
    compiler = PolicyCompiler(fields=FieldChecks("1.36"))
    variables = "variables:\n- {name: count, expression: workload.replicas}\n"
    assert errors_of(compiler, condition("variables.count > 1", variables=variables)) == []
    assert errors_of(compiler, condition("variables.count > 'x'", variables=variables)) == [
        "p.yaml: policy p, rule r, condition: <input>:1:17: found no matching overload for '_>_' applied to "
        "'(int, string)'"]
    assert errors_of(compiler, condition("has(variables.count) && variables.count > 1", variables=variables)) == []


def test_a_variables_own_error_is_said_once_where_it_is_declared(compiler: PolicyCompiler) -> None:
    variables = "variables:\n- {name: broken, expression: \"workload.replicas + 'x'\"}\n"
    assert errors_of(compiler, condition("variables.broken == 'x'", variables=variables)) == [
        "p.yaml: policy p, variables.broken: <input>:1:19: found no matching overload for '_+_' applied to "
        "'(int, string)'"]


@pytest.mark.parametrize(("action", "parameter", "text", "expected"), [
    ("add-node-selector", "pool", "pod.spec.containers", "must return a string, not list<Container>"),
    ("add-topology-spread", "maxSkew", "pod.spec.containers.size() > 1", "must return an integer (or a string "
                                                                         "of one), not bool"),
    ("restrict-tolerations", "allowed", "'gpu'", "must return a list of tolerations, not string"),
])
def test_a_computed_parameter_must_return_what_the_parameter_takes(
        compiler: PolicyCompiler, action: str, parameter: str, text: str, expected: str) -> None:
    spec = (f"rules:\n- name: r\n  action: {action}\n  parameters: {{topologyKey: zone}}\n"
            f"  parameterExpressions: {{{parameter}: \"{text}\"}}\n")
    if action != "add-topology-spread":
        spec = spec.replace("  parameters: {topologyKey: zone}\n", "")
    errors = errors_of(compiler, spec)
    assert any(f"parameterExpressions.{parameter}: {expected}" in error for error in errors), errors


@pytest.mark.parametrize(("action", "parameter", "text"), [
    ("add-topology-spread", "maxSkew", "workload.replicas"),
    ("add-topology-spread", "maxSkew", "string(workload.replicas)"),
    ("add-node-selector", "pool", "workload.replicas > 1 ? 'big' : 'small'"),
    ("add-node-selector", "pool", "workload.replicas"),
    ("add-labels", "tier", "workload.labels['tier']"),
])
def test_a_computed_parameter_of_a_type_the_parameter_takes_loads(
        compiler: PolicyCompiler, action: str, parameter: str, text: str) -> None:
    parameters = "  parameters: {topologyKey: zone}\n" if action == "add-topology-spread" else ""
    spec = f"rules:\n- name: r\n  action: {action}\n{parameters}  parameterExpressions: {{{parameter}: \"{text}\"}}\n"
    assert errors_of(compiler, spec) == []


def test_a_field_no_kind_has_is_refused_with_the_closest_name_of_any_kind(compiler: PolicyCompiler) -> None:
    assert errors_of(compiler, condition("has(object.spec.replica) && object.spec.replica > 2")) == [
        "p.yaml: policy p, rule r, condition: <input>:1:5: `object.spec.replica`: no such field in any of the 15 "
        "kinds a policy sees; did you mean `replicas`?"]
    assert errors_of(compiler, condition("has(object.spec.replicatedJob)"))[0].endswith(
        "did you mean `replicatedJobs`?"), "operator kinds are described offline too"


def test_without_field_checks_nothing_is_type_checked() -> None:
    compiler = PolicyCompiler(fields=FieldChecks(enabled=False))
    assert errors_of(compiler, condition("workload.replicas >= '2'")) == []


KUBERNETES_VERDICTS = [
    # (expression, Kubernetes' compiler's error with object as a Deployment; None: it compiles)
    ("object.spec.replicas > 2", None),
    ("object.spec.replicas > 2.5", None),
    ("object.spec.replicas == 2.0", "found no matching overload for '_==_' applied to '(int, double)'"),
    ("object.spec.replicas > '2'", "found no matching overload for '_>_' applied to '(int, string)'"),
    ("object.spec.replicas + 1.0 > 2.0", "found no matching overload for '_+_' applied to '(int, double)'"),
    ("object.spec.paused == true", None),
    ("object.spec.paused > 1", "found no matching overload for '_>_' applied to '(bool, int)'"),
    ("object.metadata.name.startsWith('web')", None),
    ("object.metadata.name.startsWith(1)", "found no matching overload for 'startsWith' applied to 'string.(int)'"),
    ("object.metadata.labels.exists(k, k == 'tier')", None),
    ("object.metadata.labels['tier'] == 1", "found no matching overload for '_==_' applied to '(string, int)'"),
    ("size(object.spec.template.spec.containers) > 1", None),
    ("object.spec.template.spec.containers.map(c, c.name).exists(n, n == 'a')", None),
    ("object.spec.template.spec.containers.all(c, c.image.size() > 0)", None),
    ("object.spec.template.spec.containers.all(c, c.image > 0)",
     "found no matching overload for '_>_' applied to '(string, int)'"),
    ("object.spec.template.spec.nodeSelector.size() == 0", None),
    ("object.spec.template.spec.tolerations.exists(t, t.key == 'gpu' && t.effect == 'NoSchedule')", None),
    ("object.spec.strategy.type in ['Recreate', 'RollingUpdate']", None),
    ("object.spec.strategy.type in [1, 2]", "found no matching overload for '@in' applied to '(string, list(int))'"),
    ("object.spec.minReadySeconds * 2 > object.spec.replicas", None),
    ("object.spec.minReadySeconds * 2 > object.spec.revisionHistoryLimit + 'x'",
     "found no matching overload for '_+_' applied to '(int, string)'"),
    ("int(object.spec.replicas) + 1 > 0", None),
    ("string(object.spec.replicas) == '3'", None),
    ("object.spec.replicas == null", "found no matching overload for '_==_' applied to '(int, null"),
    ("object.spec.selector != null", None),
]
"""What Kubernetes' own compiler (k8s.io/apiserver v1.36.2, admission/plugin/cel compile.go with `object`
declared as the Deployment's schema, as policy/validating/typechecking.go declares it) says of each expression:
None when it compiles, else the start of its error. Recorded with that compiler (docs/cel.md, "Type errors",
tells how the comparison was made)."""


@pytest.mark.parametrize(("text", "kubernetes"), KUBERNETES_VERDICTS)
def test_the_check_agrees_with_kubernetes_compiler(compiler: PolicyCompiler, text: str, kubernetes: str | None
                                                   ) -> None:
    guarded = f"object.kind == 'Deployment' && ({text})"
    errors = errors_of(compiler, condition(guarded))
    assert bool(errors) == (kubernetes is not None), errors
