"""`placer export`: what is written, that the API server can take it, and what it does in the cases where the
webhook guards against controllers (UPDATE without a template change, a Deployment's ReplicaSet, opt-outs)."""

import copy
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO
from tests.export.map_runtime import MapRuntime
from tests.helpers import REVISION_KEYS_POLICY, compile_policies, review_for
from webhook.commands.cli import main
from webhook.export.admission_policy import export_policies, report_lines
from webhook.export.checked_types import TypedAst
from webhook.export.helpers import HELPER_VARIABLES
from webhook.export.kubernetes_env import Kind, KubernetesCel
from webhook.export.versions import DEFAULT_TARGET, SUPPORTED, KubernetesVersion, show

EXAMPLES = sorted((REPO / "policies").glob("*.yaml"))
GOLDEN_POLICIES = sorted((REPO / "tests" / "golden" / "cases").glob("*/policy.yaml"))
MANIFESTS = REPO / "tests" / "fixtures" / "manifests"


def exported(paths: list[Path], api_version: str | None = None,
             target: KubernetesVersion = DEFAULT_TARGET) -> list[dict[str, Any]]:
    """Every rule that can be exported (a partial export): what these tests look at is each expression."""
    policies, _compiler = compile_policies([path.read_text() for path in paths])
    exports = export_policies(policies, api_version, target=target, allow_partial=True)
    return [obj for export in exports for obj in export.objects]


def compile_as_the_api_server(runtime: MapRuntime, policy: dict[str, Any]) -> int:
    """Every expression of an exported MutatingAdmissionPolicy compiled as the API server's validation compiles
    it: match conditions without variables (must be bool), the variables in order (each declared as the type
    of its expression), the mutations with every variable (must be list(JSONPatch)); the number compiled."""
    spec = policy["spec"]
    for condition in spec.get("matchConditions") or []:
        runtime.compile(condition["expression"], Kind.MATCH_CONDITION)
    declared = runtime.declared(spec)
    for mutation in spec["mutations"]:
        source = mutation["jsonPatch"]["expression"]
        runtime.compile(source, Kind.MUTATION, declared)
        assert "cel.bind" not in source and source.count("JSONPatch{op: ") > 0
    return len(spec.get("matchConditions") or []) + len(spec.get("variables") or []) + len(spec["mutations"])


@pytest.mark.parametrize("target", SUPPORTED, ids=show)
@pytest.mark.parametrize("path", EXAMPLES + GOLDEN_POLICIES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_exported_expression_compiles_as_the_targets_api_server_compiles_it(
        path: Path, target: KubernetesVersion) -> None:
    """Compiled with only what a MutatingAdmissionPolicy of `target` sees, typed as the API server types it:
    object, oldObject (dyn), request, namespaceObject (typed objects), each variable as its expression's type
    (`variables.placerRevisionKeys` is `list(string)`), JSONPatch; no pod, workload or resources; the libraries
    of the target's compatibility version (no cel.bind ever, no lists extension on 1.34); every list and map
    literal homogeneous, optional members included. Every rule is exported unless a MutatingAdmissionPolicy
    cannot do what it does: an export written with a member of its own type beside `dyn` ones
    (kube-apiserver's `expected type 'dyn' but found 'list(string)'`) is refused by the export's check, and
    fails here."""
    policies, _compiler = compile_policies([path.read_text()])
    exports = export_policies(policies, target=target, allow_partial=True)
    for export in exports:
        assert not any("export's own" in note for note in export.notes), export.notes
        for rule in export.rules:
            assert rule.exported or any(reason in rule.reason for reason in BY_DESIGN), (rule.rule, rule.reason)
    runtime = MapRuntime(target)
    written = [obj for export in exports for obj in export.objects if obj["kind"] == "MutatingAdmissionPolicy"]
    compiled = sum(compile_as_the_api_server(runtime, policy) for policy in written)
    assert compiled == 0 or compiled > len(HELPER_VARIABLES)


BY_DESIGN = ("add-gang-labels", "`resources`", "parameterExpressions", "pin-to-volume-node", "spot-share",
             "enforcement: Enforced", "prefer-node-pools")
"""Why a rule of the example and golden policies is not exported: what a MutatingAdmissionPolicy cannot do
(docs/export.md), never an expression of the export's own that the target's API server would refuse."""




@pytest.mark.parametrize("target", SUPPORTED, ids=show)
def test_a_typed_variable_beside_dyn_values_is_refused_as_kube_apiserver_refuses_it(target: KubernetesVersion) -> None:
    """The export once wrote `?'matchLabelKeys': ... optional.of(variables.placerRevisionKeys)` in a map of
    `dyn(...)` values; a v1.36 API server refused the policy (422, `expected type 'dyn' but found
    'list(string)'`: cel-go's homogeneity validator compares an optional entry by the type it holds, and the
    variable is `list(string)` there). That text is refused here with the API server's words; the export
    writes `optional.of(dyn(...))`."""
    policies, _compiler = compile_policies([REVISION_KEYS_POLICY])
    [export] = export_policies(policies, target=target)
    policy = export.objects[0]
    runtime = MapRuntime(target)
    declared = runtime.declared(policy["spec"])
    assert dict(declared.declared)["placerRevisionKeys"].show() == "list(string)"
    for mutation in policy["spec"]["mutations"][:2]:
        written = mutation["jsonPatch"]["expression"]
        assert "optional.of(dyn(variables.placerRevisionKeys))" in written
        assert runtime.kubernetes.refusal(written, Kind.MUTATION, declared) is None
        before = written.replace("optional.of(dyn(variables.placerRevisionKeys))",
                                 "optional.of(variables.placerRevisionKeys)")
        refusal = runtime.kubernetes.refusal(before, Kind.MUTATION, declared)
        assert refusal is not None and "expected type 'dyn' but found 'list(string)'" in refusal, refusal


def test_the_homogeneity_check_finds_a_mixed_literal() -> None:
    """cel-go's validator: one report per list, one per map key and value; an optional member counts as the
    type it holds; `dyn()` members are all one type."""
    typed = TypedAst.of(KubernetesCel(DEFAULT_TARGET).environment().compile(
        "{'a': 'x', 'b': 1}.size() + [1, 'x', 2.0].size() + {'c': dyn(1), 'd': dyn('y')}.size() + "
        "[1, ?optional.of('z')].size() + {'e': 1, ?'f': optional.of(2)}.size()"))
    assert [(expected.show(), found.show()) for _, expected, found in typed.mixed_literals()] == [
        ("string", "int"), ("int", "string"), ("int", "string")]


@pytest.mark.parametrize(("target", "api_version"), [
    ((1, 34), "v1beta1"), ((1, 35), "v1beta1"), ((1, 36), "v1"), ((1, 36), "v1beta1"), ((1, 37), "v1"),
    ((1, 37), "v1beta1")])
def test_the_objects_validate_against_the_targets_published_schema(target: KubernetesVersion,
                                                                   api_version: str) -> None:
    """kubernetes-validate ships the OpenAPI schemas Kubernetes publishes per release; strict: no field the
    API does not have (the API server would drop it with a warning, silently losing part of the policy)."""
    objects = exported(EXAMPLES, api_version=api_version, target=target)
    assert {obj["kind"] for obj in objects} == {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}
    for obj in objects:
        assert obj["apiVersion"] == f"admissionregistration.k8s.io/{api_version}"
        kubernetes_validate.validate(obj, f"{show(target)}.0", strict=True)
    policies = {obj["metadata"]["name"] for obj in objects if obj["kind"] == "MutatingAdmissionPolicy"}
    assert {obj["spec"]["policyName"] for obj in objects if obj["kind"] == "MutatingAdmissionPolicyBinding"} == policies


def test_a_v1_object_does_not_validate_where_only_v1beta1_is_published() -> None:
    """The schema check can fail: 1.35 publishes no admissionregistration.k8s.io/v1 MutatingAdmissionPolicy."""
    policy = next(obj for obj in exported(EXAMPLES, api_version="v1", target=(1, 36))
                  if obj["kind"] == "MutatingAdmissionPolicy")
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(policy, "1.35.0", strict=True)
    policy["spec"]["unknownField"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(policy, "1.36.0", strict=True)


def test_the_binding_carries_the_namespace_selector_and_the_opt_in() -> None:
    binding = next(obj for obj in exported([REPO / "policies" / "namespace-node-pools.yaml"])
                   if obj["kind"] == "MutatingAdmissionPolicyBinding")
    assert binding["spec"]["matchResources"] == {
        "namespaceSelector": {"matchLabels": {"placer.dev/inject": "enabled"},
                              "matchExpressions": [{"key": "node-pool", "operator": "Exists"}]},
        "objectSelector": {"matchExpressions": [{"key": "placer.dev/inject", "operator": "NotIn",
                                                 "values": ["disabled"]}]},
    }


def test_the_report_says_per_rule_what_was_not_exported_and_why() -> None:
    policies, _compiler = compile_policies([path.read_text() for path in EXAMPLES])
    lines = report_lines(export_policies(policies), (1, 37))
    assert lines[0] == "target: Kubernetes 1.37"
    assert "org-wide-policy/production-isolation: exportable, not written: the policy is not exported whole" in lines
    assert any(line.startswith("org-wide-policy/gpu-workload-taints: not exported: reads variable gpus, which reads "
                               "`resources`") for line in lines)
    assert any(line.startswith("org-wide-policy: not exported: 1 of 3 rules cannot be") for line in lines)
    assert any(line.startswith("gang-coscheduling-jobs/job-pod-group: not exported: add-gang-labels:")
               for line in lines)
    assert "gang-coscheduling-jobs: not exported: no rule can be; nothing written" in lines
    assert "dedicated-team-pool/select-dedicated-nodes: exported" in lines
    assert any(line.startswith("across policies:") for line in lines)
    partial = report_lines(export_policies(policies, allow_partial=True))
    assert "org-wide-policy/production-isolation: exported" in partial


FAIL_POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: strict}
spec:
  failurePolicy: Fail
  rules:
  - name: pool
    condition: "namespaceObject.metadata.labels['pool'] == 'a'"
    action: add-node-selector
    parameters: {pool: a}
"""


def test_failure_policy_maps_over_with_a_note() -> None:
    policies, _compiler = compile_policies([FAIL_POLICY])
    exports = export_policies(policies)
    assert exports[0].objects[0]["spec"]["failurePolicy"] == "Fail"
    assert any("missing key" in note for note in exports[0].notes)


# -- the webhook's guards, as the API server would apply them ---------------------------------------------

SELECTOR_POLICY = REPO / "policies" / "dedicated-team-pool.yaml"
NAMESPACE = {"metadata": {"name": "team-a", "labels": {"team": "data-eng", "placer.dev/inject": "enabled"}}}


def admit(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None) -> dict[str, Any]:
    review = review_for(obj, namespace="team-a", operation=operation, old=old)
    return MapRuntime().admit(exported([SELECTOR_POLICY]), obj, request=review["request"],
                              namespace=NAMESPACE, old=old)


def deployment() -> dict[str, Any]:
    return next(doc for doc in yaml.safe_load_all((MANIFESTS / "deployment.yaml").read_text())
                if isinstance(doc, dict) and doc.get("kind") == "Deployment")


def test_a_create_gets_the_policy() -> None:
    template = admit(deployment())["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {"dedicated": "data-eng"}
    assert template["metadata"]["annotations"]["placer.dev/applied"] == (
        "dedicated-team-pool/tolerate-dedicated-taint,dedicated-team-pool/select-dedicated-nodes")


def test_an_update_that_leaves_the_template_alone_starts_no_rollout() -> None:
    old = deployment()
    scaled = copy.deepcopy(old)
    scaled["spec"]["replicas"] = 7
    assert admit(scaled, "UPDATE", old) == scaled, "a policy added since must not roll the Deployment"
    changed = copy.deepcopy(old)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:1.28"
    assert admit(changed, "UPDATE", old)["spec"]["template"]["spec"]["nodeSelector"] == {"dedicated": "data-eng"}


def test_a_deployments_replicaset_and_opted_out_objects_are_left_alone() -> None:
    replicaset = next(doc for doc in yaml.safe_load_all((MANIFESTS / "replicaset.yaml").read_text())
                      if isinstance(doc, dict) and doc.get("kind") == "ReplicaSet")
    replicaset["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                                  "uid": "1", "controller": True}]
    assert admit(replicaset) == replicaset
    opted_out = deployment()
    opted_out["spec"]["template"]["metadata"].setdefault("labels", {})["placer.dev/inject"] = "disabled"
    assert admit(opted_out) == opted_out
    labelled = deployment()
    labelled["metadata"].setdefault("labels", {})["placer.dev/inject"] = "disabled"
    assert admit(labelled) == labelled


# -- the command ---------------------------------------------------------------------------------------------


def test_placer_export_writes_the_objects_and_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--policies", str(REPO / "policies"), "--allow-partial"]) == 0
    out, err = capsys.readouterr()
    objects = list(yaml.safe_load_all(out))
    assert len(objects) == 8 and all(obj["apiVersion"] == "admissionregistration.k8s.io/v1" for obj in objects)
    assert "org-wide-policy/multi-zone-ha: exported" in err
    assert main(["export", "--policies", str(REPO / "policies"), "-o", "json", "--allow-partial"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["kind"] == "List" and [obj["metadata"]["name"] for obj in listed["items"]][:2] == [
        "placer-namespace-node-pools", "placer-namespace-node-pools"]


def test_placer_export_of_a_broken_policy_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "broken.yaml").write_text(FAIL_POLICY.replace("== 'a'", "== "))
    assert main(["export", "--policies", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "broken.yaml" in err and "rule pool" in err

