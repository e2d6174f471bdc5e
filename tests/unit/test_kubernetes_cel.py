"""Kubernetes CEL in Placer: the reference examples that run give the documented value; the libraries that
do not run are refused when the policy loads, naming the library and what to write instead."""

import pytest

from tests.conftest import REPO
from webhook.policy.cel import environment as cel
from webhook.policy.cel import kubernetes_cel

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
    # Kubernetes' libraries, from the examples of k8s.io/apiserver/pkg/cel/library (Go semantics where the
    # comment and the code disagree: `find('[0-9]*')` is the empty leftmost match, so '+' is used).
    ("quantity('50k').isInteger()", True),
    ("quantity('9999999999999999999999999999999999999G').isInteger()", False),
    ("quantity('50k').asInteger() == 50000", True),
    ("quantity('50k').sub(20000).asApproximateFloat() == 30000.0", True),
    ("quantity('50k').add(quantity('20k')) == quantity('70k')", True),
    ("quantity('50k').add(20) == quantity('50020')", True),
    ("quantity('50k').sub(quantity('20k')) == quantity('30k')", True),
    ("quantity('50k').add(20).sub(quantity('100k')).sub(-50000) == quantity('20')", True),
    ("quantity('200M').compareTo(quantity('0.2G'))", 0),
    ("quantity('50M').compareTo(quantity('50Mi'))", -1),
    ("quantity('50Mi').compareTo(quantity('50M'))", 1),
    ("quantity('150Mi').isGreaterThan(quantity('100Mi'))", True),
    ("quantity('50M').isLessThan(quantity('100M'))", True),
    ("quantity('-3').sign()", -1),
    ("quantity('1.5G').mul(2) == quantity('3G')", True),
    ("isQuantity('1.3Gi') && isQuantity('10000k') && !isQuantity('1,3G') && !isQuantity('200K')", True),
    ("[1, 2, 3].isSorted() && ['a', 'b', 'b', 'c'].isSorted() && ![2.0, 1.0].isSorted()", True),
    ("[].isSorted()", True),
    ("[1, 3].sum()", 4),
    ("[1.0, 3.0].sum()", 4.0),
    ("[].sum()", 0),
    ("[1, 3].min()", 1),
    ("[1, 3].max()", 3),
    ("([0] + object.list1).min()", 0),
    ("[1, 2, 2, 3].indexOf(2)", 1),
    ("['a', 'b', 'b', 'c'].lastIndexOf('b')", 2),
    ("[1.0].indexOf(1.1)", -1),
    ("[].indexOf('string')", -1),
    ("[1, 2, 3].includes(2) && !'model-a'.includes('model-b')", True),
    ("'abc 123'.find('[0-9]+')", "123"),
    ("'abc 123'.find('xyz')", ""),
    ("'123 abc 456'.findAll('[0-9]+')", ["123", "456"]),
    ("'123 abc 456'.findAll('[0-9]+', 1)", ["123"]),
    ("'123 abc 456'.findAll('xyz')", []),
    ("isURL('https://user:pass@example.com:80/path?query=val#fragment') && isURL('/absolute-path')", True),
    ("isURL('https://a:b:c/') || isURL('../relative-path')", False),
    ("url('/path').getScheme()", ""),
    ("url('https://example.com/').getScheme()", "https"),
    ("url('https://example.com:80/').getHost()", "example.com:80"),
    ("url('https://[::1]:80/').getHost()", "[::1]:80"),
    ("url('https://[::1]/').getHost()", "[::1]"),
    ("url('https://127.0.0.1:80/').getHostname()", "127.0.0.1"),
    ("url('https://[::1]:80/').getHostname()", "::1"),
    ("url('https://example.com:80/').getPort()", "80"),
    ("url('https://example.com/').getPort()", ""),
    ("url('https://example.com/path with spaces/').getEscapedPath()", "/path%20with%20spaces/"),
    ("url('https://example.com').getEscapedPath()", ""),
    ("url('https://example.com/path?k1=a&k2=b&k2=c').getQuery()", {"k1": ["a"], "k2": ["b", "c"]}),
    ("url('https://example.com/path?key with spaces=value with spaces').getQuery()",
     {"key with spaces": ["value with spaces"]}),
    ("url('https://example.com/path?').getQuery()", {}),
    ("isIP('127.0.0.1') && isIP('::1') && !isIP('127.0.0.256') && !isIP(':::1')", True),
    ("ip.isCanonical('2001:db8::abcd') && !ip.isCanonical('2001:DB8::ABCD')", True),
    ("!ip.isCanonical('2001:db8::0:0:0:abcd')", True),
    ("ip('127.0.0.1').family() == 4 && ip('::1').family() == 6", True),
    ("ip('0.0.0.0').isUnspecified() && ip('::').isUnspecified() && !ip('::1').isUnspecified()", True),
    ("ip('127.0.0.1').isLoopback() && !ip('192.168.0.1').isLoopback() && ip('::1').isLoopback()", True),
    ("ip('224.0.0.1').isLinkLocalMulticast() && !ip('224.0.1.1').isLinkLocalMulticast()", True),
    ("ip('ff02::1').isLinkLocalMulticast() && !ip('fd00::1').isLinkLocalMulticast()", True),
    ("ip('169.254.169.254').isLinkLocalUnicast() && ip('fe80::1').isLinkLocalUnicast()", True),
    ("ip('192.168.0.1').isLinkLocalUnicast() || ip('fd80::1').isLinkLocalUnicast()", False),
    ("ip('192.168.0.1').isGlobalUnicast() && ip('2001:db8::abcd').isGlobalUnicast()", True),
    ("ip('255.255.255.255').isGlobalUnicast() || ip('ff00::1').isGlobalUnicast()", False),
    ("isCIDR('192.168.0.0/16') && isCIDR('::1/128') && !isCIDR('192.168.0.0/33') && !isCIDR('::1/129')", True),
    ("cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))", True),
    ("cidr('192.168.0.0/24').containsIP(ip('192.168.1.1'))", False),
    ("cidr('192.168.0.0/24').containsIP('192.168.0.1')", True),
    ("cidr('192.168.0.0/16').containsCIDR(cidr('192.168.10.0/24'))", True),
    ("cidr('192.168.1.0/24').containsCIDR(cidr('192.168.2.0/24'))", False),
    ("cidr('192.168.0.0/16').containsCIDR('192.168.10.0/24')", True),
    ("cidr('192.168.0.1/24').ip() == ip('192.168.0.1')", True),
    ("cidr('::1/128').ip().family()", 6),
    ("cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')", True),
    ("cidr('192.168.0.0/24') == cidr('192.168.0.0/24').masked()", True),
    ("cidr('192.168.0.1/24') == cidr('192.168.0.1/24').masked()", False),
    ("cidr('192.168.0.0/16').prefixLength()", 16),
    ("string(ip('2001:db8::0:0:0:abcd'))", "2001:db8::abcd"),
    ("isSemver('1.0.0') && !isSemver('hello') && !isSemver('v1.0') && isSemver('v1.0', true)", True),
    ("semver('v1.0.0', true) == semver('1.0.0')", True),
    ("semver('1.0', true) == semver('1.0.0')", True),
    ("semver('01.01.01', true) == semver('1.1.1')", True),
    ("semver('1.2.3').major()", 1),
    ("semver('1.2.3').compareTo(semver('1.2.3'))", 0),
    ("semver('1.2.3').compareTo(semver('2.0.0'))", -1),
    ("semver('1.2.3').compareTo(semver('0.1.2'))", 1),
    ("semver('1.0.0-alpha').isLessThan(semver('1.0.0-alpha.1'))", True),
    ("semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))", True),
    ("format.dns1123Label().validate('my-label-name').hasValue()", False),
    ("format.dns1123Subdomain().validate('apiextensions.k8s.io').hasValue()", False),
    ("format.dns1035Label().validate('my-label-name').hasValue()", False),
    ("format.qualifiedName().validate('apiextensions.k8s.io/v1beta1').hasValue()", False),
    ("format.dns1123LabelPrefix().validate('my-label-prefix-').hasValue()", False),
    ("format.uri().validate('http://example.com').hasValue()", False),
    ("format.uuid().validate('123e4567-e89b-12d3-a456-426614174000').hasValue()", False),
    ("format.byte().validate('aGVsbG8=').hasValue()", False),
    ("format.date().validate('2021-01-01').hasValue()", False),
    ("format.datetime().validate('2021-01-01T00:00:00Z').hasValue()", False),
    ("format.dns1123Label().validate('Not_A_Label').hasValue()", True),
    ("format.named('dns1123Label').value().validate('Not_A_Label').value().size()", 1),
    ("format.named('no-such-format').hasValue()", False),
]


@pytest.mark.parametrize(("expression", "expected"), EXAMPLES)
def test_reference_examples_evaluate_to_the_documented_value(expression: str, expected: object) -> None:
    program = cel.compile_expression(ENV, expression)
    assert cel.evaluate(program, cel.activation(ENV, {"object": SELF})).value == expected


@pytest.mark.parametrize(("expression", "library"), [
    ("quantity('1Gi').div(2).isInteger()", "quantity division"),
    ("authorizer.group('apps').resource('deployments').check('create').allowed()", "authorizer"),
])
def test_what_placer_lacks_is_refused_at_load_naming_the_library(expression: str, library: str) -> None:
    with pytest.raises(cel.CelCompileError) as refused:
        cel.compile_expression(ENV, expression)
    assert f"from Kubernetes' {library} CEL library, which Placer does not support yet" in str(refused.value)


def test_the_docs_conformance_table_is_the_one_the_code_declares() -> None:
    readme = (REPO / "docs/cel.md").read_text()
    assert kubernetes_cel.conformance_table() in readme
    for library in kubernetes_cel.LIBRARIES:
        if library.supported:  # every supported library has reference examples here
            tested = [name for name in library.functions if any(name.split("(")[0].split(".")[-1] in expression
                                                                for expression, _ in EXAMPLES)]
            assert tested, f"{library.name}: no reference example"
