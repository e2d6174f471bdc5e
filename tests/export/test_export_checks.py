"""What `placer export` says is exported runs in the target API server and does what Placer does; what it cannot
export it refuses, naming why (issue 37 item 6, issue 39's export bullet). Each test is the regression test of
one wrong result the export gave."""

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO
from tests.export.test_equivalence import outcomes
from tests.helpers import compile_policies
from webhook.commands.cli import main
from webhook.export.admission_policy import export_policies, report_lines
from webhook.export.cel_text import NotExportable
from webhook.export.free_identifiers import Rewriter
from webhook.export.kubernetes_env import NO_VARIABLES, Kind, KubernetesCel
from webhook.export.versions import SUPPORTED, KubernetesVersion, api_version_for, compatibility_version, show

MANIFESTS = REPO / "tests" / "fixtures" / "manifests"
FIXTURES = REPO / "tests" / "fixtures" / "export"
PRODUCTION = {"environment": "production"}


def manifest(name: str) -> dict[str, Any]:
    document = yaml.safe_load((MANIFESTS / name).read_text())
    assert isinstance(document, dict)
    return document


def policy(name: str, *rules: str, variables: str = "") -> str:
    return (f"apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: {name}}}\nspec:\n"
            + (f"  variables:\n{variables}" if variables else "") + "  rules:\n" + "".join(rules))


def rule(name: str, condition: str, action: str, parameters: str) -> str:
    return (f"  - name: {name}\n    condition: {json.dumps(condition)}\n    action: {action}\n"
            f"    parameters: {parameters}\n")


def exports_of(text: str, **options: Any) -> Any:
    policies, _compiler = compile_policies([text])
    return export_policies(policies, **options)


def gpu_pod() -> dict[str, Any]:
    pod = manifest("pod-bare.yaml")
    pod["spec"]["containers"][0].setdefault("resources", {})["limits"] = {"nvidia.com/gpu": "1"}
    return pod


# -- 1. a comprehension's variable and its fields are not Placer's variables --------------------------------

GPU_CONDITION = "pod.spec.containers.exists(c, 'nvidia.com/gpu' in c.?resources.?limits.orValue({}))"
GPU_POOL = policy(
    "gpu-pool",
    rule("gpu-nodes", GPU_CONDITION, "add-node-selector", "{node-pool: gpu}"),
    rule("gpu-taint", GPU_CONDITION, "add-toleration", "{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}"),
)


@pytest.mark.parametrize("target", SUPPORTED, ids=show)
def test_gpu_to_pool_on_the_containers_own_resources_exports_whole(target: KubernetesVersion) -> None:
    [export] = exports_of(GPU_POOL, target=target)
    assert [(r.rule, r.exported, r.reason) for r in export.rules] == [("gpu-nodes", True, ""), ("gpu-taint", True, "")]
    assert not export.refused and len(export.objects) == 2


@pytest.mark.parametrize("given", [gpu_pod(), manifest("pod-bare.yaml"), manifest("deployment.yaml")],
                         ids=["gpu-pod", "pod", "deployment"])
def test_gpu_to_pool_does_in_the_api_server_what_placer_does(given: dict[str, Any]) -> None:
    placer, exported = outcomes([GPU_POOL], given, "team-a", {}, allow_partial=False)
    assert exported == placer
    spec = exported["spec"] if exported["kind"] == "Pod" else exported["spec"]["template"]["spec"]
    gpu = "nvidia.com/gpu" in json.dumps(given)
    assert (spec.get("nodeSelector", {}).get("node-pool") == "gpu") is gpu


# -- 2. only free identifiers are renamed ------------------------------------------------------------------

@pytest.mark.parametrize(("source", "expected"), [
    ("pod.metadata.?labels.?workload.orValue('') == 'batch'",
     "variables.placerPod.metadata.?labels.?workload.orValue('') == 'batch'"),
    ("pod.metadata.labels.workload == workload.name",
     "variables.placerPod.metadata.labels.workload == variables.placerWorkload.name"),
    ("pod.spec.containers.exists(pod, pod.name == 'pod')",
     "variables.placerPod.spec.containers.exists(pod, pod.name == 'pod')"),
    ("cel.bind(workload, pod.spec, has(workload.nodeName))",
     "cel.bind(workload, variables.placerPod.spec, has(workload.nodeName))"),
    ("has(pod.spec.resources) && 'workload' in pod.metadata.labels",
     "has(variables.placerPod.spec.resources) && 'workload' in variables.placerPod.metadata.labels"),
    ("pod.spec.containers.all(c, c.resources.limits.size() > 0) && pod.metadata.name != 'é'",
     "variables.placerPod.spec.containers.all(c, c.resources.limits.size() > 0) && "
     "variables.placerPod.metadata.name != 'é'"),
])
def test_the_rewrite_renames_free_identifiers_only(source: str, expected: str) -> None:
    assert Rewriter().rewrite(source) == expected


def test_placers_resources_variable_is_refused_a_fields_name_is_not() -> None:
    with pytest.raises(NotExportable, match="reads `resources`"):
        Rewriter().rewrite("resources.limits['cpu'] > 2")
    with pytest.raises(NotExportable, match="reads `resources`"):
        Rewriter().rewrite("pod.spec.containers.exists(c, resources.limits.size() > 0)")
    assert Rewriter().rewrite("[1].exists(resources, resources > 0)") == "[1].exists(resources, resources > 0)"


LABELLED = policy("by-label", rule("batch", "pod.metadata.?labels.?workload.orValue('') == 'batch'",
                                   "add-node-selector", "{pool: batch}"))


def test_a_label_named_like_a_placer_variable_selects_in_the_api_server_as_in_placer() -> None:
    pod = manifest("pod-bare.yaml")
    pod["metadata"].setdefault("labels", {})["workload"] = "batch"
    placer, exported = outcomes([LABELLED], pod, "team-a", {}, allow_partial=False)
    assert exported == placer and exported["spec"]["nodeSelector"] == {"pool": "batch"}


# -- 3. a controller's Pod is bound as the webhook binds it ----------------------------------------------

WORKLOAD_RULES = policy(
    "by-workload",
    rule("kind", "workload.kind == 'ReplicaSet'", "add-labels", "{owner-kind: replicaset}"),
    rule("name", "workload.name == 'web-abc123'", "add-annotations", "{owner: web-abc123}"),
    rule("no-replicas", "!has(workload.replicas)", "add-node-selector", "{replicas: unknown}"),
    rule("one-replica", "workload.replicas == 1", "add-toleration", "{key: single, operator: Exists}"),
    rule("api", "workload.apiVersion == 'apps/v1' && workload.namespace == 'team-a'", "set-priority-class",
         "{priorityClassName: owned}"),
)


@pytest.mark.parametrize("given", ["pod-rs-owned.yaml", "pod-bare.yaml", "deployment.yaml", "job.yaml"])
def test_rules_on_workload_read_the_same_binding_in_the_api_server(given: str) -> None:
    obj = manifest(given)
    placer, exported = outcomes([WORKLOAD_RULES], obj, "team-a", {}, allow_partial=False)
    assert exported == placer
    if given == "pod-rs-owned.yaml":
        assert exported["metadata"]["labels"]["owner-kind"] == "replicaset"
        assert exported["metadata"]["annotations"]["owner"] == "web-abc123"
        assert exported["spec"]["nodeSelector"] == {"replicas": "unknown"}
        assert "tolerations" not in exported["spec"]
    if given == "pod-bare.yaml":
        assert exported["spec"]["tolerations"] == [{"key": "single", "operator": "Exists"}]


# -- 4. only what the target's CEL environment has ---------------------------------------------------------

REFUSED_EVERYWHERE = [
    ("cel.bind(n, pod.spec.containers.size(), n > 1)", "`cel.bind`"),
    ("{'a': 1, 'b': 'x'}.size() == 2", "mixes member types"),
    ("[1, 'x'].size() == 2", "mixes member types"),
    ("'abc'.reverse() == 'cba'", "`reverse()` of a string"),
    ("pod.spec.containers[0].name.reverse().size() > 0", "reverse()"),
]
LISTS = [
    "pod.spec.containers.map(c, c.name).distinct().size() > 1",
    "lists.range(2).size() == 2",
    "pod.spec.containers.map(c, c.name).sort()[0] == 'a'",
]


def _single(condition: str, target: KubernetesVersion) -> Any:
    text = policy("checked", rule("only", condition, "add-node-selector", "{pool: a}"))
    [export] = exports_of(text, target=target)
    return export


@pytest.mark.parametrize("target", SUPPORTED, ids=show)
@pytest.mark.parametrize(("condition", "named"), REFUSED_EVERYWHERE, ids=[c for c, _ in REFUSED_EVERYWHERE])
def test_what_no_kubernetes_environment_has_is_refused(condition: str, named: str, target: KubernetesVersion) -> None:
    export = _single(condition, target)
    assert not export.rules[0].exported and named in export.rules[0].reason, export.rules[0].reason
    assert export.refused and export.objects == []


@pytest.mark.parametrize("condition", LISTS)
def test_the_lists_extension_is_refused_for_1_34_and_exported_from_1_35(condition: str) -> None:
    old = _single(condition, (1, 34))
    assert not old.rules[0].exported
    assert "cel-go's lists extension" in old.rules[0].reason and "the target is 1.34" in old.rules[0].reason
    for target in ((1, 35), (1, 36), (1, 37)):
        assert _single(condition, target).rules[0].exported, target


def test_a_policy_variable_the_target_lacks_blocks_the_rules_reading_it() -> None:
    text = policy("with-variable", rule("uses", "variables.names > 1", "add-node-selector", "{pool: a}"),
                  variables="  - name: names\n    expression: \"pod.spec.containers.map(c, c.name).distinct()"
                            ".size()\"\n")
    [old] = exports_of(text, target=(1, 34))
    assert old.rules[0].reason.startswith("reads variable names, which uses `distinct`")
    [new] = exports_of(text, target=(1, 35))
    assert new.rules[0].exported


def test_the_environment_check_is_a_real_compile() -> None:
    checker = KubernetesCel((1, 37))
    assert checker.refusal("object.metadata.?labels.orValue({}).size() > 0", Kind.VARIABLE) is None
    assert checker.refusal("sets.contains([1, 2], [1]) && [1].all(i, v, v > 0)", Kind.VARIABLE) is None
    assert checker.refusal("quantity('1Gi').isGreaterThan(quantity('1Mi'))", Kind.VARIABLE) is None
    assert "`pod.spec.nodeName`" in str(checker.refusal("pod.spec.nodeName == ''", Kind.VARIABLE))
    assert checker.refusal("[2, 1].reverse()[0] == 1", Kind.VARIABLE) is None
    assert "`first()`" in str(checker.refusal("[1].first().orValue(0) == 1", Kind.VARIABLE))


def test_each_expression_is_compiled_as_the_api_server_compiles_its_kind() -> None:
    """pkg/apis/admissionregistration/validation/validation.go and plugin/cel/compile.go: a match condition by
    the stateless compiler (no variables, must be bool); a variable seeing those above it, declared as the type
    of its expression; a JSONPatch mutation seeing all, returning list(JSONPatch); `namespaceObject` and
    `request` typed, `object` dyn, `JSONPatch` a mutation's only."""
    checker = KubernetesCel((1, 36))
    assert checker.refusal("request.operation == 'CREATE'", Kind.MATCH_CONDITION) is None
    assert "must evaluate to bool but got string" in str(checker.refusal("request.operation", Kind.MATCH_CONDITION))
    declared, refusal = checker.declare(NO_VARIABLES, "keys", "['a', 'b'].filter(k, k != 'a')")
    assert refusal is None and dict(declared.declared)["keys"].show() == "list(string)"
    assert "compiled without the policy's variables" in str(
        checker.refusal("variables.keys.size() > 0", Kind.MATCH_CONDITION, declared))
    assert "only those" in str(checker.refusal("variables.later == 1", Kind.VARIABLE, declared))
    mutation = "variables.keys.size() > 0 ? [JSONPatch{op: 'add', path: '/x', value: variables.keys}] : []"
    assert checker.refusal(mutation, Kind.MUTATION, declared) is None
    assert "must evaluate to list(JSONPatch) but got list(dyn)" in str(
        checker.refusal(f"({mutation}).map(p, dyn(p))", Kind.MUTATION, declared))
    assert "for a mutation only" in str(checker.refusal("JSONPatch{op: 'add'}.op", Kind.VARIABLE))
    assert "expected type 'string' but found 'dyn'" in str(
        checker.refusal("[namespaceObject.metadata.name, object.kind]", Kind.VARIABLE))
    assert "expected type 'map(string, string)' but found 'list(string)'" in str(
        checker.refusal("{'l': namespaceObject.metadata.labels, ?'k': optional.of(variables.keys)}", Kind.VARIABLE,
                        declared))
    assert checker.refusal("request.userInfo.extra['team'][0] == 'a'", Kind.VARIABLE) is None
    assert checker.check("request.userInfo.extra", Kind.VARIABLE).output.show() == "map(string, list(string))"
    assert checker.check("namespaceObject.metadata.?labels", Kind.VARIABLE).output.show() == (
        "optional_type(map(string, string))")
    assert "`params`" in str(checker.refusal("params.x == 1", Kind.VARIABLE))


def test_a_servers_compatibility_version_is_one_minor_behind() -> None:
    """A captured v1.36.2 kube-apiserver's /version: new expressions are checked against 1.35's environment."""
    version = json.loads((FIXTURES / "version-1.36.json").read_text())
    served = (int(version["major"]), int(version["minor"]))
    assert compatibility_version(served) == (int(version["minCompatibilityMajor"]),
                                             int(version["minCompatibilityMinor"]))


# -- 5. a policy exports whole or not at all ---------------------------------------------------------------

HALF = policy(
    "half",
    rule("gpu-nodes", GPU_CONDITION, "add-node-selector", "{node-pool: gpu}"),
    rule("gpu-taint", "resources.limits['nvidia.com/gpu'] > 0", "add-toleration",
         "{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}"),
)


def test_a_policy_with_a_rule_that_cannot_be_exported_writes_nothing_and_fails(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "half.yaml").write_text(HALF)
    (tmp_path / "whole.yaml").write_text(GPU_POOL)
    assert main(["export", "--policies", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    written = list(yaml.safe_load_all(out))
    assert {obj["metadata"]["name"] for obj in written} == {"placer-gpu-pool"}
    assert "half/gpu-nodes: exportable, not written: the policy is not exported whole" in err
    assert "half/gpu-taint: not exported: reads `resources`" in err
    assert "half: not exported: 1 of 2 rules cannot be" in err


def test_allow_partial_writes_what_can_be_with_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "half.yaml").write_text(HALF)
    assert main(["export", "--policies", str(tmp_path), "--allow-partial"]) == 0
    out, err = capsys.readouterr()
    [policy_object, _binding] = list(yaml.safe_load_all(out))
    assert len(policy_object["spec"]["mutations"]) == 2  # the selector's, and the one naming it when it matched
    assert "half/gpu-nodes: exported" in err and "half/gpu-taint: not exported: reads `resources`" in err


# -- 6. v1 where the target serves it ----------------------------------------------------------------------

@pytest.mark.parametrize(("flags", "expected"), [
    ([], "v1"), (["--kubernetes-version", "1.37"], "v1"), (["--kubernetes-version", "1.36"], "v1"),
    (["--kubernetes-version", "v1.35.4"], "v1beta1"), (["--kubernetes-version", "1.34"], "v1beta1"),
    (["--kubernetes-version", "1.36", "--api-version", "v1beta1"], "v1beta1"),
])
def test_the_api_version_follows_the_target(flags: list[str], expected: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "gpu.yaml").write_text(GPU_POOL)
    assert main(["export", "--policies", str(tmp_path), *flags]) == 0
    out, err = capsys.readouterr()
    objects = list(yaml.safe_load_all(out))
    assert {obj["apiVersion"] for obj in objects} == {f"admissionregistration.k8s.io/{expected}"}
    target = flags[flags.index("--kubernetes-version") + 1].lstrip("v")[:4] if flags else "1.37"
    assert err.startswith(f"target: Kubernetes {target}\n")
    for obj in objects:
        kubernetes_validate.validate(obj, f"{target}.0", strict=True)


def test_v1_for_a_target_that_does_not_serve_it_is_an_error(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "gpu.yaml").write_text(GPU_POOL)
    assert main(["export", "--policies", str(tmp_path), "--kubernetes-version", "1.35", "--api-version", "v1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "served from Kubernetes 1.36; the target is 1.35" in err
    assert main(["export", "--policies", str(tmp_path), "--kubernetes-version", "1.33"]) == 2
    assert "Kubernetes 1.33 is not supported (supported: 1.34, 1.35, 1.36, 1.37)" in capsys.readouterr().err


def test_api_version_for_each_supported_target() -> None:
    assert [api_version_for(target) for target in SUPPORTED] == ["v1beta1", "v1beta1", "v1", "v1"]


# -- 7. objects the webhook creates ------------------------------------------------------------------------

def test_create_pod_group_is_refused_saying_an_admission_policy_cannot_create_objects() -> None:
    text = policy("gangs", rule("group", "workload.kind == 'Job'", "add-gang-labels",
                                "{scheduler: coscheduling, schedulerName: scheduler-plugins-scheduler, "
                                "createPodGroup: 'true'}"))
    exports = exports_of(text)
    [line] = [line for line in report_lines(exports) if line.startswith("gangs/group:")]
    assert "createPodGroup: a MutatingAdmissionPolicy only changes the object under admission, it cannot create " \
           "objects (the PodGroup)" in line
    assert exports[0].refused


def test_the_example_policies_are_refused_or_written_whole() -> None:
    policies, _compiler = compile_policies([path.read_text() for path in sorted((REPO / "policies").glob("*.yaml"))])
    for export in export_policies(policies):
        assert bool(export.objects) == all(rule.exported for rule in export.rules), export.policy
        assert export.refused == (not export.objects), export.policy
        assert all(rule.written == bool(export.objects) for rule in export.rules)
