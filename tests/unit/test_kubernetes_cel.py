"""Kubernetes CEL in Placer: the reference examples that run give the documented value; the libraries that
do not run are refused when the policy loads, naming the library and what to write instead."""

import pytest

from tests.conftest import REPO
from webhook.policy import cel, kubernetes_cel

ENV = cel.new_environment()
SELF = {
    "minReplicas": 1, "replicas": 3, "maxReplicas": 5, "stateCounts": {"Available": 2}, "list1": [], "list2": [1],
    "envars": [{"name": "MY_ENV", "value": "abc"}, {"name": "OTHER", "value": "1"}], "health": "ok: fine",
    "widgets": [{"key": "x", "foo": 3}], "metadata": {"name": "singleton"}, "set1": [1, 2], "set2": [3],
    "created": "2026-01-01T00:00:00Z", "ttl": "1h", "expired": "2026-01-02T00:00:00Z",
}

# From "Common Expression Language in Kubernetes" (language overview and libraries), with `self` as `object`
# (and, as the objects Placer sees are JSON, date-time and duration fields converted where they are read).
EXAMPLES = [
    ("object.minReplicas <= object.replicas && object.replicas <= object.maxReplicas", True),
    ("'Available' in object.stateCounts", True),
    ("(object.list1.size() == 0) != (object.list2.size() == 0)", True),
    ("object.envars.filter(e, e.name == 'MY_ENV').all(e, e.value.matches('^[a-zA-Z]*$'))", True),
    ("has(object.expired) && timestamp(object.created) + duration(object.ttl) < timestamp(object.expired)", True),
    ("object.health.startsWith('ok')", True),
    ("object.widgets.exists(w, w.key == 'x' && w.foo < 10)", True),
    ("type(object) == map ? object.metadata.name == 'singleton' : object == 42", True),
    ("object.set1.all(e, !(e in object.set2))", True),
    ("object != null", True),
    ("'hello'.charAt(1)", "e"),
    ("'hello mellow'.indexOf('ello')", 1),
    ("'hello mellow'.lastIndexOf('ello')", 7),
    ("'TacoCat'.lowerAscii()", "tacocat"),
    ("'TacoCat'.upperAscii()", "TACOCAT"),
    ("'hello hello'.replace('he', 'we')", "wello wello"),
    ("'hello hello hello'.split(' ')", ["hello", "hello", "hello"]),
    ("'tacocat'.substring(4)", "cat"),
    ("'  \\ttrim\\n    '.trim()", "trim"),
    ("['hello', 'mellow'].join(' ')", "hello mellow"),
    ("sets.contains([1, 2, 3, 4], [2, 3])", True),
    ("sets.equivalent([1, 2, 3], [3, 2, 1])", True),
    ("sets.intersects([1], [1, 2])", True),
    ("{'a': 1, 'b': 2}.all(k, v, k != '' && v > 0)", True),
    ("[1, 2, 3].exists(i, v, i == 1 && v == 2)", True),
    ("[1, 2, 3].existsOne(i, v, v == 2)", True),
    ("[1, 2, 3].transformList(i, v, v * 2)", [2, 4, 6]),
    ("[1, 2, 2, 3].distinct()", [1, 2, 3]),
    ("[[1, 2], [3]].flatten()", [1, 2, 3]),
    ("[3, 1, 2].sort()", [1, 2, 3]),
    ("lists.range(3)", [0, 1, 2]),
    ("object.?metadata.?name.orValue('none')", "singleton"),
    ("object.?metadata.?namespace.orValue('none')", "none"),
    ("optional.of(1).hasValue()", True),
    ("cel.bind(n, object.metadata.name, n + n)", "singletonsingleton"),
]


@pytest.mark.parametrize(("expression", "expected"), EXAMPLES)
def test_reference_examples_evaluate_to_the_documented_value(expression: str, expected: object) -> None:
    program = cel.compile_expression(ENV, expression)
    assert cel.evaluate(program, cel.activation(ENV, {"object": SELF})).value == expected


@pytest.mark.parametrize(("expression", "library"), [
    ("quantity('1Gi').isGreaterThan(quantity('1Mi'))", "quantity"),
    ("object.names.isSorted()", "lists (Kubernetes)"),
    ("[1, 2].sum() == 3", "lists (Kubernetes)"),
    ("object.name.find('[0-9]+') == '1'", "regex"),
    ("isURL('https://example.com')", "URLs"),
    ("ip('10.0.0.1').family() == 4", "IP and CIDR"),
    ("cidr('10.0.0.0/8').containsIP(ip('10.1.1.1'))", "IP and CIDR"),
    ("isSemver('1.2.3')", "semver"),
    ("!format.dns1123Label().validate('x').hasValue()", "format"),
    ("[1, 2].indexOf(2) == 1", "lists (Kubernetes): indexOf"),
])
def test_unsupported_libraries_are_refused_at_load_naming_the_library(expression: str, library: str) -> None:
    with pytest.raises(cel.CelCompileError) as refused:
        cel.compile_expression(ENV, expression)
    assert f"from Kubernetes' {library}" in str(refused.value)


def test_functions_that_compile_but_cannot_run_are_refused_at_load() -> None:
    with pytest.raises(cel.CelCompileError, match="transformMap compiles but the runtime cannot build its map"):
        cel.compile_expression(ENV, "{'a': 1}.transformMap(k, v, v * 2) == {'a': 2}")


def test_the_conformance_table_in_the_docs_is_the_table_in_the_code() -> None:
    assert kubernetes_cel.conformance_table() in (REPO / "docs" / "cel.md").read_text()
