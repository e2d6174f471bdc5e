"""Every class of load-time error is reported with file, policy, rule and field."""

from typing import Any

import pytest
import yaml

from webhook.policy.compiler import PolicyCompiler


def compile_errors(spec_yaml: str, *, name: str = "org", api_version: str = "placer.dev/v1alpha1") -> list[str]:
    document: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "SchedulingPolicy",
        "metadata": {"name": name},
        "spec": yaml.safe_load(spec_yaml),
    }
    result = PolicyCompiler().compile(document, "policies/org.yaml")
    assert (result.policy is None) == bool(result.errors)
    return [str(error) for error in result.errors]


RULE = "rules:\n- name: r\n  action: {action}\n  parameters: {parameters}\n"


def test_the_design_example_message_is_exact() -> None:
    errors = compile_errors(
        "rules:\n- {name: multi-zone-ha, condition: 'replica >= 3', action: add-topology-spread,"
        " parameters: {topologyKey: zone}}"
    )
    assert errors == [
        "policies/org.yaml: policy org, rule multi-zone-ha, condition: <input>:1:1: undeclared reference to 'replica'"
    ]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("rules:\n- {name: r, action: add-magic}", "rule r, action: unknown action 'add-magic'"),
        ("rules:\n- {name: r, action: add-toleration, parameters: {colour: red}}",
         "rule r, parameters.colour: unknown parameter for add-toleration"),
        ("rules:\n- {name: r, action: add-topology-spread, parameters: {maxSkew: 1}}",
         "rule r, parameters.topologyKey: required parameter is missing"),
        ("rules:\n- {name: r, action: add-toleration, parameters: {key: a, effect: Sometimes}}",
         "rule r, parameters.effect: must be one of"),
        ("rules:\n- {name: r, action: add-node-affinity, "
         "parameters: {key: a, values: x, weight: 101, type: preferred}}",
         "rule r, parameters.weight: must be at most 100"),
        ("rules:\n- {name: r, action: add-topology-spread, parameters: {topologyKey: z, maxSkew: two}}",
         "rule r, parameters.maxSkew: must be an integer, not 'two'"),
        ("rules:\n- {name: r, action: add-node-selector, parameters: {a: x}}\n- {name: r, action: add-labels,"
         " parameters: {b: y}}", "rule r, name: duplicate rule name in this policy"),
        ("rules:\n- {name: R_1, action: add-labels, parameters: {b: y}}", "rule R_1, name: must consist of lower case"),
        ("rules:\n- {name: r, condition: '1 + 1', action: add-labels, parameters: {b: y}}",
         "rule r, condition: must return bool, not int"),
        ("rules:\n- {name: r, condition: 'object.x ==', action: add-labels, parameters: {b: y}}",
         "rule r, condition: <input>:1:12: Syntax error"),
        ("rules:\n- {name: r, condition: 'variables.nope', action: add-labels, parameters: {b: y}}",
         "undeclared variable variables.nope"),
        ("variables:\n- {name: a, expression: 'variables.b > 1'}\n- {name: b, expression: '1'}\n"
         "rules:\n- {name: r, action: add-labels, parameters: {b: y}}", "variables.a: <input>:1:1: variables.b is not"),
        ("rules:\n- {name: r, action: add-labels, parameters: {'bad key!': y}}", "parameters.bad key!: key name part"),
        ("rules:\n- {name: r, action: add-node-selector, parameters: {pool: 'not a label value'}}",
         "parameters.pool: value 'not a label value' must be empty or alphanumerics"),
        ("rules:\n- {name: r, action: add-toleration, parameters: {key: a, operator: Exists, value: v}}",
         "parameters.value: must be empty when operator is Exists"),
        ("rules:\n- {name: r, action: add-toleration, parameters: {key: a, value: v, tolerationSeconds: 5}}",
         "parameters.tolerationSeconds: only applies to effect NoExecute"),
        ("rules:\n- {name: r, action: add-node-affinity, parameters: {key: a, operator: Gt, values: 'x'}}",
         "parameters.values: operator Gt needs an integer value"),
        ("rules:\n- {name: r, action: add-node-affinity, parameters: {key: a, operator: Exists, values: x}}",
         "parameters.values: operator Exists takes no values"),
        ("rules:\n- {name: r, action: set-scheduler-name, parameters: {schedulerName: My_Scheduler}}",
         "parameters.schedulerName: 'My_Scheduler' must be lower case"),
        ("rules:\n- {name: r, action: add-annotations, parameters: {placer.dev/applied: x}}",
         "parameters.placer.dev/applied: is reserved for Placer"),
        ("rules:\n- {name: r, action: add-topology-spread, parameters: {topologyKey: z, minDomains: 2,"
         " whenUnsatisfiable: ScheduleAnyway}}", "parameters.minDomains: requires whenUnsatisfiable DoNotSchedule"),
        ("rules:\n- {name: r, action: add-labels, parameterExpressions: {b: '1 +'}}",
         "rule r, parameterExpressions.b: <input>:1:4: Syntax error"),
        ("rules:\n- {name: r, action: add-toleration, parameterExpressions: {colour: \"'red'\"}}",
         "parameterExpressions.colour: unknown parameter for add-toleration"),
        ("rules:\n- {name: r, action: add-labels, parameters: {b: y}, overide: true}",
         "rule r, overide: unknown field"),
        ("priority: high\nrules:\n- {name: r, action: add-labels, parameters: {b: y}}",
         "policy org, spec.priority: must be an integer"),
        ("failurePolicy: Sometimes\nrules:\n- {name: r, action: add-labels, parameters: {b: y}}",
         "spec.failurePolicy: must be Ignore or Fail"),
        ("namespaceSelector: {matchExpressions: [{key: a, operator: Maybe}]}\nrules:\n- {name: r, action: add-labels,"
         " parameters: {b: y}}", "spec.namespaceSelector.matchExpressions[0]: operator must be"),
        ("rules: []", "spec.rules: at least one rule is required"),
    ],
)
def test_load_time_errors_are_located(spec: str, expected: str) -> None:
    errors = compile_errors(spec)
    assert any(expected in error for error in errors), errors
    assert all(error.startswith("policies/org.yaml: policy org") for error in errors)


def test_every_error_of_a_policy_is_reported_not_only_the_first() -> None:
    errors = compile_errors(
        "rules:\n- {name: a, condition: 'x > 1', action: add-labels, parameters: {b: y}}\n"
        "- {name: b, action: nope}\n- {name: c, action: add-toleration, parameters: {effect: Bogus}}"
    )
    assert [error.split(",")[1].strip() for error in errors] == ["rule a", "rule b", "rule c"]


def test_wrong_api_version_and_missing_name() -> None:
    assert any("apiVersion: must be placer.dev/v1alpha1" in e for e in compile_errors(
        "rules:\n- {name: r, action: add-labels, parameters: {b: y}}", api_version="placer.dev/v1"))
    result = PolicyCompiler().compile({"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy"}, "f.yaml")
    assert [str(e) for e in result.errors] == ["f.yaml: metadata.name is required"]


def test_string_parameters_of_the_original_crd_are_accepted() -> None:
    document = yaml.safe_load("""
apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: org}
spec:
  priority: "10"
  rules:
  - name: spread
    action: add-topology-spread
    parameters: {maxSkew: "2", topologyKey: topology.kubernetes.io/zone, minDomains: "3"}
  - name: affinity
    action: add-node-affinity
    parameters: {key: pool, values: "a, b", weight: "10", type: preferred}
""")
    policy = PolicyCompiler().compile(document, "f").policy
    assert policy is not None and policy.priority == 10
    assert policy.rules[0].parameters["maxSkew"] == 2 and policy.rules[0].parameters["minDomains"] == 3
    assert policy.rules[1].parameters["values"] == ["a", "b"] and policy.rules[1].parameters["weight"] == 10
