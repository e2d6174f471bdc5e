"""What an expression reads, which decides whether the engine needs a second pass (policy/reads.py).

Reading less than an expression reads would make Placer answer a second call differently from the first;
these cases pin the conservative direction.
"""

import pytest

from webhook.engine.mutate import pointer_tokens
from webhook.policy.cel import environment as cel
from webhook.policy.reads import Changes, Reads, reads_of


@pytest.mark.parametrize(("source", "template", "obj"), [
    ("pod.spec.containers.exists(c, c.image.startsWith('x'))", {("spec", "containers")}, set()),
    ("pod.metadata.?labels.?tier.orValue('') == 'db'", {("metadata", "labels", "tier")}, set()),
    ("pod.metadata.labels['app.kubernetes.io/name'] == 'x'", {("metadata", "labels", "app.kubernetes.io/name")},
     set()),
    ("has(pod.spec.nodeSelector)", {("spec", "nodeSelector")}, set()),
    ("size(pod) > 0", {()}, set()),
    ("pod.spec.containers[0].name == 'a'", {("spec", "containers")}, set()),
    ("object.spec.template.spec.tolerations.size() > 0", set(), {("spec", "template", "spec", "tolerations")}),
    ("workload.replicas > 3 && workload.kind == 'Pod'", set(), set()),
    ("workload.labels.team == 'ml'", set(), {("metadata", "labels", "team")}),
    ("workload.labels['team'] == 'ml'", set(), {("metadata", "labels", "team")}),
    ("namespaceObject.metadata.labels.pod == 'x' && resources.limits.cpu > 1.0", set(), set()),
    ("cel.bind(s, pod.spec, s.nodeName == 'a')", {("spec", "nodeName")}, set()),
    ("[pod][0].spec.nodeName == 'a'", {()}, set()),
    ("object.spec.template.spec.containers.map(c, c.name).size() > 1", set(),
     {("spec", "template", "spec", "containers")}),
])
def test_paths_read(source: str, template: set[tuple[str, ...]], obj: set[tuple[str, ...]]) -> None:
    assert read(source) == Reads(frozenset(template), frozenset(obj))


def read(source: str) -> Reads:
    return reads_of(cel.compile_expression(cel.new_environment(), source).fields)


def test_an_expression_that_could_not_be_analysed_reads_everything() -> None:
    assert reads_of(None) == Reads(frozenset({()}), frozenset({()}))


def test_a_change_inside_or_above_a_read_path_touches_it() -> None:
    reads = read("pod.metadata.labels.tier == 'db'")
    at = ("spec", "template")
    assert reads.touched_by(Changes([("spec", "template", "metadata", "labels", "tier")]), at)
    assert reads.touched_by(Changes([("spec", "template", "metadata", "labels")]), at)  # the map added whole
    assert reads.touched_by(Changes([("spec", "template", "metadata")]), at)
    assert not reads.touched_by(Changes([("spec", "template", "metadata", "labels", "team")]), at)
    assert not reads.touched_by(Changes([("spec", "template", "spec", "nodeSelector")]), at)
    assert read("size(pod) > 0").touched_by(Changes([("spec", "template", "spec", "x")]), at)


def test_list_indexes_in_template_paths_match_json_pointer_tokens() -> None:
    reads = read("pod.spec.nodeSelector.pool == 'a'")
    slot = ("spec", "replicatedJobs", 3, "template", "spec", "template")
    change = ("spec", "replicatedJobs", "3", "template", "spec", "template", "spec", "nodeSelector")
    assert reads.touched_by(Changes([change]), slot)


def test_one_pass_s_changes_answer_each_template_and_read_for_itself() -> None:
    """The answers are kept per read path from the object's root: a read asked again, or the same read under
    another template of the same object, gets its own answer."""
    changed = Changes([("spec", "replicatedJobs", "0", "template", "spec", "template", "spec", "nodeSelector")])
    reads = read("pod.spec.nodeSelector.pool == 'a'")
    first = ("spec", "replicatedJobs", 0, "template", "spec", "template")
    second = ("spec", "replicatedJobs", 1, "template", "spec", "template")
    assert [reads.touched_by(changed, at) for at in (first, second, first, second)] == [True, False, True, False]
    assert not read("pod.spec.tolerations.size() > 0").touched_by(changed, first)


@pytest.mark.parametrize(("pointer", "tokens"), [
    ("/spec/template/spec/nodeSelector", ("spec", "template", "spec", "nodeSelector")),
    ("/metadata/labels/app.kubernetes.io~1name", ("metadata", "labels", "app.kubernetes.io/name")),
    ("/metadata/annotations/a~0b~01", ("metadata", "annotations", "a~b~1")),
    ("/spec/containers/0/-", ("spec", "containers", "0", "-")),
])
def test_a_patch_path_is_read_as_the_keys_it_changes(pointer: str, tokens: tuple[str, ...]) -> None:
    assert pointer_tokens(pointer) == tokens
