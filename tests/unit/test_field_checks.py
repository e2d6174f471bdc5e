"""Every field a rule reads exists: paths checked against the schemas of the target Kubernetes version."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.commands.cli import main
from webhook.policy.cel import environment as cel
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.fields.field_check import FieldChecks
from webhook.policy.fields.schemas import SchemaCatalog, crd_kinds
from webhook.policy.fields.versions import DEFAULT, SUPPORTED, VersionError, parse_version, server_version
from webhook.workloads import all_kinds


@pytest.fixture(scope="module")
def catalog() -> SchemaCatalog:
    return SchemaCatalog()


@pytest.fixture(scope="module")
def environment() -> Any:
    return cel.new_environment()


def problems(environment: Any, catalog: SchemaCatalog, source: str, version: str = DEFAULT,
             **options: Any) -> list[str]:
    return FieldChecks(version, catalog=catalog, **options).problems(
        cel.compile_expression(environment, source, keep_tree=True))


@pytest.mark.parametrize(("source", "expected"), [
    ("workload.replica >= 3", "<input>:1:10: `workload.replica`: no such field; did you mean `replicas`?"),
    ("resources.limit['nvidia.com/gpu'] > 0",
     "<input>:1:11: `resources.limit`: no such field; did you mean `limits`?"),
    ("pod.metadata.lables['tier'] == 'x'",
     "<input>:1:14: `pod.metadata.lables`: no such field; did you mean `labels`?"),
    ("namespaceObject.metadata.lables['env'] == 'prod'",
     "<input>:1:26: `namespaceObject.metadata.lables`: no such field; did you mean `labels`?"),
    ("request.userInfo.usrname == 'x'",
     "<input>:1:18: `request.userInfo.usrname`: no such field; did you mean `username`?"),
    ("pod.spec.containers.exists(c, c.resourcs.limits.size() > 0)",
     "<input>:1:33: `pod.spec.containers[*].resourcs`: no such field; did you mean `resources`?"),
    ("pod.spec.?nodeSelectr.orValue({}).size() > 0",
     "<input>:1:11: `pod.spec.nodeSelectr`: no such field; did you mean `nodeSelector`?"),
    ("has(pod.spec.tolerations) && pod.spec.tolerations[0].efect == 'NoSchedule'",
     "<input>:1:54: `pod.spec.tolerations[_].efect`: no such field; did you mean `effect`?"),
    ("cel.bind(s, pod.spec, s.priorityClass == 'x')",
     "<input>:1:25: `pod.spec.priorityClass`: no such field; did you mean `priorityClassName`?"),
])
def test_a_path_no_schema_has_is_refused_at_its_position_with_the_closest_name(
        environment: Any, catalog: SchemaCatalog, source: str, expected: str) -> None:
    assert problems(environment, catalog, source) == [expected]


@pytest.mark.parametrize("source", [
    "pod.metadata.labels['any/key'] == 'x' && pod.metadata.annotations.anything == 'y'",
    "pod.spec.nodeSelector['topology.kubernetes.io/zone'] == 'a'",
    "pod.spec.containers.exists(c, 'nvidia.com/gpu' in c.resources.limits && c.resources.limits['nvidia.com/gpu'] > 0)",
    "resources.limits['nvidia.com/gpu'] > 0 && resources.requests.cpu > 1",
    "has(object.spec.replicas) && object.spec.replicas >= 3",
    "object.spec.template.spec.containers.all(c, c.image.startsWith('registry/'))",
    "oldObject != null && oldObject.metadata.generation > 1",
    "workload.kind == 'Deployment' && workload.replicas >= 3 && workload.labels.team == 'ml'",
    "namespaceObject.metadata.labels['environment'] == 'production'",
    "request.operation == 'CREATE' && request.userInfo.groups.exists(g, g == 'x') && request.dryRun",
    "pod.metadata.?labels.?tier.orValue('') == 'db'",
    "pod.spec.containers.all(i, c, c.name != '') && pod.spec.nodeSelector.all(k, v, v != '')",
    "object.spec.pytorchReplicaSpecs.Worker.replicas > 2",
    "variables.x == 1 || [1, 2].exists(n, n > 1)",
])
def test_valid_paths_of_the_kinds_and_free_form_maps_keep_compiling(
        environment: Any, catalog: SchemaCatalog, source: str) -> None:
    assert problems(environment, catalog, source) == []


def test_a_field_only_a_newer_version_has_names_that_version(environment: Any, catalog: SchemaCatalog) -> None:
    source = "has(pod.spec.schedulingGroup)"
    assert problems(environment, catalog, source, "1.35") == [
        "<input>:1:5: `pod.spec.schedulingGroup` exists from Kubernetes 1.36; the target is 1.35"]
    assert problems(environment, catalog, source, "1.36") == []
    assert problems(environment, catalog, source, "1.37") == []


def test_a_list_and_a_scalar_have_no_fields(environment: Any, catalog: SchemaCatalog) -> None:
    assert problems(environment, catalog, "pod.spec.containers.image == 'x'") == [
        "<input>:1:21: `pod.spec.containers.image`: `pod.spec.containers` is a list, with no fields; test its "
        "elements (e.g. `pod.spec.containers.exists(x, x.image ...)`)"]
    assert problems(environment, catalog, "pod.spec.schedulerName.value == 'x'") == [
        "<input>:1:24: `pod.spec.schedulerName.value`: `pod.spec.schedulerName` is a string, with no fields"]


def test_object_metadata_is_checked_even_for_kinds_whose_schema_is_unknown(
        environment: Any, catalog: SchemaCatalog) -> None:
    [message] = problems(environment, catalog, "object.metadata.lables.team == 'x'")
    kinds = len(all_kinds())  # every kind Placer admits, operator resources included
    assert f"`object.metadata.lables`: no such field in any of the {kinds} kinds a policy sees; did you mean " \
        "`labels`?" in message


JOBSET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "jobsets.jobset.x-k8s.io"},
    "spec": {"group": "jobset.x-k8s.io", "names": {"kind": "JobSet", "plural": "jobsets"}, "scope": "Namespaced",
             "versions": [{"name": "v1alpha2", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "properties": {
                     "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                     "spec": {"type": "object", "properties": {
                         "replicatedJobs": {"type": "array", "items": {"type": "object", "properties": {
                             "name": {"type": "string"}, "replicas": {"type": "integer"},
                             "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}}}}}}]},
}


def test_a_crds_schema_types_its_kind_and_preserve_unknown_fields_accepts_anything(
        environment: Any, catalog: SchemaCatalog) -> None:
    crds = crd_kinds([JOBSET_CRD])
    only_jobsets = frozenset({("", "v1"), ("jobset.x-k8s.io", "v1alpha2")})  # as a cluster serving no other
    options = {"crds": crds, "served": only_jobsets}
    assert problems(environment, catalog, "object.spec.replicatedJobs.exists(j, j.replicas > 1 && "
                    "j.template.spec.anything == 1)", **options) == []
    assert problems(environment, catalog, "object.spec.replicatedJobs.exists(j, j.replicaz > 1)", **options) == [
        "<input>:1:40: `object.spec.replicatedJobs[*].replicaz`: no such field in any of the 8 kinds a policy "
        "sees; did you mean `replicas`?"]
    assert problems(environment, catalog, "object.metadata.lables.a == 'b'", **options)[0].endswith(
        "did you mean `labels`?"), "a custom resource's metadata is an ObjectMeta whatever its schema says"


@pytest.mark.parametrize(("text", "expected"), [("1.35", "1.35"), ("v1.36.2", "1.36"), ("1.37.0-gke.1", "1.37")])
def test_versions_are_read_as_their_minor(text: str, expected: str) -> None:
    assert parse_version(text) == expected


def test_a_version_outside_the_supported_range_is_refused_and_a_servers_is_clamped() -> None:
    with pytest.raises(VersionError, match=r"1\.34, 1\.35, 1\.36, 1\.37"):
        parse_version("1.33")
    assert server_version({"major": "1", "minor": "36+", "gitVersion": "v1.36.2-eks"}) == "1.36"
    assert server_version({"major": "1", "minor": "40"}) == SUPPORTED[-1]
    assert server_version({"gitVersion": "v1.30.1"}) == SUPPORTED[0]


@pytest.fixture
def policy_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "grouped.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "grouped"},
        "spec": {"rules": [{"name": "grouped-pods", "condition": "has(pod.spec.schedulingGroup)",
                            "action": "add-labels", "parameters": {"grouped": "true"}}]}}))
    yield path


def test_lint_takes_the_target_version(policy_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(policy_file), "--kubernetes-version", "1.37"]) == 0
    assert main(["lint", str(policy_file)]) == 0, "the default is the newest supported version"
    capsys.readouterr()
    assert main(["lint", str(policy_file), "--kubernetes-version", "1.35"]) == 1
    lines = policy_file.read_text().splitlines()
    line = next(number for number, text in enumerate(lines, 1) if "schedulingGroup" in text)
    column = lines[line - 1].index("pod.spec.schedulingGroup") + 1
    assert capsys.readouterr().err == (
        f"{policy_file}:{line}:{column}: policy grouped, rule grouped-pods, condition: `pod.spec.schedulingGroup` "
        "exists from Kubernetes 1.36; the target is 1.35\n1 error\n")
    assert main(["lint", str(policy_file), "--kubernetes-version", "1.33"]) == 2
    assert "not supported" in capsys.readouterr().err


def test_apply_test_and_export_take_the_target_version_too(
        policy_file: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                   "spec": {"containers": [{"name": "c", "image": "x"}]}}))
    assert main(["apply", "--policies", str(policy_file), "-f", str(pod), "--kubernetes-version", "1.36"]) == 0
    assert main(["apply", "--policies", str(policy_file), "-f", str(pod), "--kubernetes-version", "1.35"]) == 1
    assert "exists from Kubernetes 1.36" in capsys.readouterr().err
    assert main(["export", "--policies", str(policy_file), "--kubernetes-version", "1.35"]) == 1
    assert "exists from Kubernetes 1.36" in capsys.readouterr().err
    suite = tmp_path / "grouped-test.yaml"
    suite.write_text(yaml.safe_dump({"apiVersion": "placer.dev/v1alpha1", "kind": "PolicyTest",
                                     "policies": [policy_file.name], "resources": ["pod.yaml"],
                                     "results": [{"resource": "Pod/p", "mutated": False}]}))
    assert main(["test", str(suite), "--kubernetes-version", "1.35"]) == 1
    assert "exists from Kubernetes 1.36" in capsys.readouterr().out


def test_a_crd_file_gives_an_operator_kind_its_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    crd = tmp_path / "jobset-crd.yaml"
    crd.write_text(yaml.safe_dump(JOBSET_CRD))
    assert main(["lint", "policies", "--crd", str(crd)]) == 0
    assert main(["lint", "policies", "--crd", str(tmp_path / "missing.yaml")]) == 2
    assert "--crd" in capsys.readouterr().err


def test_the_compiler_refuses_the_rule_and_keeps_the_position(environment: Any) -> None:
    compiler = PolicyCompiler()
    result = compiler.compile({"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy",
                               "metadata": {"name": "p"}, "spec": {
                                   "variables": [{"name": "big", "expression": "workload.replica >= 3"}],
                                   "rules": [{"name": "r", "condition": "variables.big", "action": "add-labels",
                                              "parameters": {"a": "b"}}]}}, "p.yaml")
    assert result.policy is None
    assert [str(error) for error in result.errors] == [
        "p.yaml: policy p, variables.big: <input>:1:10: `workload.replica`: no such field; did you mean `replicas`?"]


@pytest.mark.parametrize(("source", "expected"), [
    ("object.kind == 'Deployment' && object.spec.replica > 1",
     "<input>:1:44: `object.spec.replica`: no such field in Deployment; did you mean `replicas`?"),
    ("object.kind == 'Deployment' && object.spec.serviceName == 'db'",
     "<input>:1:44: `object.spec.serviceName`: no such field in Deployment; known: minReadySeconds, paused, "
     "progressDeadlineSeconds, replicas, revisionHistoryLimit, selector, strategy, template"),
    ("has(object.spec.template) && request.kind.kind in ['Deployment', 'StatefulSet'] && "
     "object.spec.template.spec.nodeSelectr.size() > 0",
     "<input>:1:110: `object.spec.template.spec.nodeSelectr`: no such field in Deployment or StatefulSet; "
     "did you mean `nodeSelector`?"),
    ("request.kind.kind == 'Pod' ? object.spec.nodeNam == '' : false",
     "<input>:1:42: `object.spec.nodeNam`: no such field in Pod; did you mean `nodeName`?"),
])
def test_a_guard_on_the_kind_narrows_the_kinds_a_path_is_checked_in(
        environment: Any, catalog: SchemaCatalog, source: str, expected: str) -> None:
    assert problems(environment, catalog, source) == [expected]


@pytest.mark.parametrize("source", [
    "object.spec.serviceName == 'db'",  # StatefulSet has it; without a guard any kind may be the object
    "object.kind == 'StatefulSet' && object.spec.serviceName == 'db'",
    "object.kind in ['Deployment', 'StatefulSet'] && object.spec.replicas > 1",
    "object.kind == 'Deployment' || object.spec.serviceName == 'db'",  # `||` does not narrow
    "request.kind.kind == 'Pod' ? object.spec.nodeName == '' : object.spec.template.spec.nodeName == ''",
    "object.kind == 'PyTorchJob' && object.spec.elasticPolicy.anything.goes == 1",  # free-form below spec
])
def test_what_a_guard_allows_keeps_compiling(environment: Any, catalog: SchemaCatalog, source: str) -> None:
    assert problems(environment, catalog, source) == []
