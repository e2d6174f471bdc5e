"""No policy expression can crash a worker: every value shape CEL produces, as a variable, a condition and a
computed parameter, in any nesting.

cel-expr-python 0.1.3 raises converting a top-level optional and kills the process (SIGSEGV) converting a
list or map that holds one. The fuzz runs in a child process, so a crash is seen as the child's exit status
instead of taking the test run down with it.
"""

import gc
import subprocess
import sys
import textwrap

from tests.conftest import REPO, fixture_request
from tests.helpers import run, snapshot_of
from webhook.policy.snapshot import NamespaceInfo

SHAPES = [
    "object.metadata.?labels", "optional.of(1)", "optional.none()", "type(1)", "b'bytes'", "duration('90s')",
    "timestamp('2026-01-01T00:00:00Z')", "null", "18446744073709551615u", "9223372036854775807",
    "'ünïcødé ✓'", "1.5", "object.metadata", "pod.spec.containers",
    "pod.spec.containers.map(c, {'name': c.name, 'sc': c.?securityContext})",
]


def policy_with_variable(expression: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: placer.dev/v1alpha1
        kind: SchedulingPolicy
        metadata: {{name: shapes}}
        spec:
          variables:
          - {{name: v, expression: {expression!r}}}
          rules:
          - {{name: reads, condition: "has(variables.v) || true", action: add-labels, parameters: {{a: b}}}}
          - {{name: plain, action: add-annotations, parameters: {{c: d}}}}
        """)


def test_every_value_shape_as_a_variable_is_an_outcome_not_a_crash() -> None:
    for shape in SHAPES:
        for wrapped in (shape, f"[{shape}]", f"{{'k': [{shape}]}}"):
            snapshot = snapshot_of(policy_with_variable(wrapped), namespaces=[NamespaceInfo("team-a")])
            mutation = run(snapshot, fixture_request("pod-bare-create-dryrun"))
            assert mutation.denial is None
            assert "shapes/plain" in mutation.applied, (wrapped, mutation.warnings)


FUZZ = """
import sys
from hypothesis import HealthCheck, given, settings, strategies as st
from tests.conftest import fixture_request
from tests.helpers import run
from tests.unit.test_cel_value_shapes import SHAPES, policy_with_variable
from tests.helpers import snapshot_of
from webhook.policy.compiler import PolicyCompiler

shape = st.sampled_from(SHAPES)
expression = st.recursive(shape, lambda inner: st.one_of(
    st.lists(inner, min_size=1, max_size=3).map(lambda items: "[" + ", ".join(items) + "]"),
    st.tuples(inner, inner).map(lambda pair: "{'a': " + pair[0] + ", 'b': " + pair[1] + "}"),
    inner.map(lambda e: "[" + e + "].map(x, x)"),
    inner.map(lambda e: "true ? " + e + " : " + e),
), max_leaves=6)
# a third of the examples run past the runtime's iteration budget, so the step-wise evaluation carries the shapes
# (each of the 2 outer steps runs 5,001 inner ones, then hands its value to the next step)
large = expression.map(lambda e: "lists.range(2).map(i, lists.range(5001).all(x, x >= i) ? " + e + " : " + e + ")[1]")
examples = st.one_of(expression, expression, large)

@settings(max_examples=int(sys.argv[1]), deadline=None, suppress_health_check=list(HealthCheck))
@given(examples)
def fuzz(text):
    try:
        snapshot = snapshot_of(policy_with_variable(text))
    except AssertionError:
        return  # does not compile: a load-time error, never evaluated
    mutation = run(snapshot, fixture_request("pod-bare-create-dryrun"))
    assert "shapes/plain" in mutation.applied

fuzz()
print("survived")
"""


def test_fuzzed_expressions_never_crash_the_process() -> None:
    result = subprocess.run([sys.executable, "-c", FUZZ, "300"], cwd=REPO, capture_output=True, text=True,
                            timeout=600, check=False)
    assert result.returncode == 0 and "survived" in result.stdout, (result.returncode, result.stderr[-3000:])


def lazy_policy(variables: str, condition: str) -> str:
    return ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: lazy}\nspec:\n"
            f"  variables:\n{variables}  rules:\n"
            f"  - {{name: r, condition: {condition!r}, action: add-labels, parameters: {{matched: 'yes'}}}}\n")


def outcome(text: str) -> tuple[str, str]:
    mutation = run(snapshot_of(text, namespaces=[NamespaceInfo("team-a")]), fixture_request("pod-bare-create-dryrun"))
    trace = mutation.traces[0]
    return trace.outcome, trace.detail


def test_variables_are_lazy_and_errors_in_branches_that_do_not_decide_are_absorbed() -> None:
    """As in Kubernetes: `variables.a || variables.b...` is true when `a` is true, even if `b` fails."""
    variables = ("  - {name: a, expression: 'true'}\n"
                 "  - {name: b, expression: 'object.spec.containers.map(c, c.workingDir)'}\n")
    assert outcome(lazy_policy(variables, "variables.a || variables.b.all(x, x == '1')"))[0] == "applied"
    failing = variables.replace("'true'", "'false'")
    assert outcome(lazy_policy(failing, "variables.a || variables.b.all(x, x == '1')"))[0] == "missing"


def test_variables_can_hold_what_cannot_leave_cel() -> None:
    """An optional, a timestamp or a type as a variable is used as Kubernetes uses it."""
    variables = ("  - {name: labels, expression: 'object.metadata.?labels'}\n"
                 "  - {name: when, expression: \"timestamp('2026-01-01T00:00:00Z')\"}\n"
                 "  - {name: kind, expression: 'type(object)'}\n")
    condition = ("variables.labels.hasValue() && variables.when < timestamp('2027-01-01T00:00:00Z')"
                 " && variables.kind == map")
    assert outcome(lazy_policy(variables, condition)) == ("applied", "")


def test_converting_nulls_does_not_use_up_references_to_none() -> None:
    """cel-expr-python 0.1.3 hands out None without a reference: a variable holding `object.metadata` of an
    object with a null creationTimestamp would abort the worker (none_dealloc) after some thousands of
    admissions on Python 3.11. Placer never asks it to convert a null (the value's type is checked first). The
    count of references to None must not fall as admissions go by."""
    snapshot = snapshot_of(policy_with_variable("[object.metadata, null, {'a': [null]}]"))
    review = fixture_request("pod-bare-create-dryrun")
    review["request"]["object"]["metadata"]["creationTimestamp"] = None
    run(snapshot, review)
    gc.collect()
    before = sys.getrefcount(None)
    admissions = 1500
    for _ in range(admissions):
        mutation = run(snapshot, review)
    assert "shapes/plain" in mutation.applied
    # each admission meets three nulls: converting them would make the count fall by 4,500
    assert before - sys.getrefcount(None) < admissions / 3, "admissions lose references to None"
