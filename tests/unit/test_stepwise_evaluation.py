"""Large objects are evaluated to the same answer as small ones: the runtime's 10,000-step budget is not a limit
a legitimate Pod can reach (200 containers with 60 env vars each is 12,000 steps in a nested loop).

Each expression runs on a Pod far past the runtime's budget (so the step-wise evaluation does the work) and
its answer is checked against the same question asked in Python; error absorption, missing keys and the
step-wise evaluation's own limits are checked the same way.
"""

import copy
import time
from typing import Any

import pytest

from tests.conftest import fixture_request
from tests.helpers import run, snapshot_of
from webhook.policy.cel import environment as cel

ENVIRONMENT = cel.new_environment()
CONTAINERS, VARIABLES = 200, 60


def large_pod() -> dict[str, Any]:
    pod = copy.deepcopy(fixture_request("pod-bare-create-dryrun")["request"]["object"])
    template = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [
        {**template, "name": f"c{index}",
         "env": [{"name": f"VAR_{number}", "value": f"{index}-{number}"} for number in range(VARIABLES)]}
        for index in range(CONTAINERS)
    ]
    pod["spec"]["containers"][7]["env"][59]["value"] = "secret://db"
    return pod


POD = large_pod()
ENV = [(container, variable) for container in POD["spec"]["containers"] for variable in container["env"]]


def evaluate(source: str, data: dict[str, Any] | None = None, deadline: float | None = None) -> cel.Result:
    program = cel.compile_expression(ENVIRONMENT, source)
    return cel.evaluate(program, cel.activation(ENVIRONMENT, data or {"object": POD}, deadline))


def test_the_runtime_alone_stops_at_its_budget_on_this_pod() -> None:
    """The premise: without the step-wise evaluation these expressions could not be answered."""
    program = cel.compile_expression(ENVIRONMENT, "object.spec.containers.all(c, c.env.all(e, e.value != ''))")
    with pytest.raises(RuntimeError, match="Iteration budget exceeded"):
        program.expression.eval(data={"object": POD})


@pytest.mark.parametrize(("source", "expected"), [
    ("object.spec.containers.all(c, c.env.all(e, !e.value.startsWith('secret://')))",
     not any(v["value"].startswith("secret://") for _, v in ENV)),
    ("object.spec.containers.exists(c, c.env.exists(e, e.value.startsWith('secret://')))", True),
    ("object.spec.containers.exists_one(c, c.env.exists(e, e.value.startsWith('secret://')))", True),
    ("object.spec.containers.filter(c, c.env.exists(e, e.value.startsWith('secret://'))).map(c, c.name)", ["c7"]),
    ("object.spec.containers.map(c, c.env.filter(e, e.name.endsWith('9')).size()).sum()",
     sum(1 for _, v in ENV if v["name"].endswith("9"))),
    ("object.spec.containers.all(i, c, c.name == 'c' + string(i) && c.env.all(j, e, e.name == 'VAR_' + string(j)))",
     True),
    ("object.spec.containers.transformList(i, c, c.env.exists(e, e.value == '8-59'), i)", [8]),
    ("size(object.spec.containers.map(c, c.env.map(e, e.name)).flatten())", CONTAINERS * VARIABLES),
    ("object.spec.containers.size() == 200 && object.spec.containers.all(c, c.env.all(e, e.value != ''))", True),
    ("object.spec.containers.all(c, c.env.all(e, e.value != '')) ? 'long' : 'short'", "long"),
])
def test_a_large_pod_gets_the_answer_python_gives(source: str, expected: Any) -> None:
    result = evaluate(source)
    assert (result.value, result.missing, result.error) == (expected, None, None)


def test_errors_are_absorbed_exactly_as_in_the_runtime() -> None:
    # every element errors: the error is the result (a missing key reads as not matched)
    assert evaluate("object.spec.containers.all(c, c.env.all(e, e.missing == 'x'))").missing is not None
    # an element that decides absorbs the others' errors, whichever side of || or && it is on
    assert evaluate("object.spec.containers.exists(c, c.env.exists(e, e.missing == 'x')) || true").value is True
    assert evaluate("object.spec.containers.all(c, c.env.all(e, e.value != '0-0' && e.missing == 1))").value \
        is False
    assert evaluate("object.spec.containers.exists(c, c.env.exists(e, e.value == '8-59' || e.missing))").value \
        is True
    result = evaluate("object.spec.containers.all(c, c.env.all(e, e.value + 1 == 2))")
    assert result.error == "No matching overloads found : _+_(string, int64)"


def test_the_step_wise_evaluation_has_a_limit_and_a_deadline() -> None:
    started = time.monotonic()
    result = evaluate("lists.range(200000).all(x, x >= 0)")
    assert result.error is not None and result.error.startswith("Iteration budget exceeded: an evaluation may take "
                                                                "100,000 outer comprehension steps")
    assert time.monotonic() - started < 10
    result = evaluate("lists.range(50000).all(x, x >= 0)", deadline=time.monotonic() - 1)
    assert result.error == "the admission's deadline came during the evaluation"


def test_a_value_that_cannot_cross_steps_is_an_error_not_a_crash() -> None:
    result = evaluate("object.spec.containers.map(c, c.env.map(e, e.?valueFrom)).size() > 0")
    assert result.error is not None and "cannot be passed between the steps" in result.error


def test_a_rule_on_a_large_pod_applies_through_the_engine() -> None:
    rules = ("  - name: no-secrets-in-env\n"
             "    condition: \"pod.spec.containers.exists(c, c.env.exists(e, e.value.startsWith('secret://')))\"\n"
             "    action: add-node-selector\n    parameters: {pool: audited}\n")
    snapshot = snapshot_of(f"apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: p}}\n"
                           f"spec:\n  rules:\n{rules}")
    review = fixture_request("pod-bare-create-dryrun")
    review["request"]["object"] = POD
    mutation = run(snapshot, review)
    assert [t.outcome for t in mutation.traces] == ["applied"], mutation.warnings
    assert {"op": "add", "path": "/spec/nodeSelector", "value": {"pool": "audited"}} in mutation.patch


def test_loops_over_literal_ranges_are_counted_when_the_policy_loads() -> None:
    with pytest.raises(cel.CelCompileError, match=r"its loops over literal lists take 2,002,000 comprehension "
                                                  r"steps on any object; an expression may take 1,000,000"):
        cel.compile_expression(ENVIRONMENT, "lists.range(2000).all(x, lists.range(1000).all(y, x != y))")
    # a loop over the object's lists is not known at load time: bounded when it runs
    cel.compile_expression(ENVIRONMENT, "object.spec.containers.all(c, lists.range(900).all(y, c.name != ''))")
    cel.compile_expression(ENVIRONMENT, "lists.range(1000).all(x, [1, 2, 3].exists(y, y == x))")
