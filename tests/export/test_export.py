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
from tests.helpers import compile_policies, review_for
from webhook.commands.cli import main
from webhook.export.admission_policy import export_policies, report_lines
from webhook.export.homogeneous import heterogeneous_literals
from webhook.export.mutations import PLAIN, TYPED
from webhook.export.versions import DEFAULT_TARGET, SUPPORTED, KubernetesVersion, show

EXAMPLES = sorted((REPO / "policies").glob("*.yaml"))
GOLDEN_POLICIES = sorted((REPO / "tests" / "golden" / "cases").glob("*/policy.yaml"))
MANIFESTS = REPO / "tests" / "fixtures" / "manifests"


def exported(paths: list[Path], dialect: Any = TYPED, api_version: str | None = None,
             target: KubernetesVersion = DEFAULT_TARGET) -> list[dict[str, Any]]:
    """Every rule that can be exported (a partial export): what these tests look at is each expression."""
    policies, _compiler = compile_policies([path.read_text() for path in paths])
    exports = export_policies(policies, api_version, dialect, target=target, allow_partial=True)
    return [obj for export in exports for obj in export.objects]


def expressions(objects: list[dict[str, Any]]) -> list[str]:
    found = []
    for obj in objects:
        spec = obj["spec"]
        found += [item["expression"] for item in spec.get("matchConditions", []) + spec.get("variables", [])]
        found += [mutation["jsonPatch"]["expression"] for mutation in spec.get("mutations", [])]
    return found


@pytest.mark.parametrize("target", SUPPORTED, ids=show)
@pytest.mark.parametrize("path", EXAMPLES + GOLDEN_POLICIES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_exported_expression_compiles_in_the_targets_cel_environment(path: Path,
                                                                           target: KubernetesVersion) -> None:
    """Compiled with only what a MutatingAdmissionPolicy of `target` sees: object, oldObject, request,
    namespaceObject, variables (no pod, workload or resources), the libraries of the target's compatibility
    version (no cel.bind ever, no lists extension on 1.34), and every list and map literal homogeneous."""
    runtime = MapRuntime(target)
    plain = expressions(exported([path], PLAIN, target=target))
    for source in plain:
        program = runtime.compile(source)  # raises CelCompileError with the position
        assert heterogeneous_literals(program.expression) == [], source
        assert "cel.bind" not in source
    typed = expressions(exported([path], TYPED, target=target))
    assert len(typed) == len(plain)
    for typed_source, plain_source in zip(typed, plain, strict=True):
        assert '{"op": ' not in typed_source and "JSONPatch{" not in plain_source
        assert typed_source.count("JSONPatch{op: ") == plain_source.count('{"op": ')


def test_the_homogeneity_check_finds_a_mixed_literal() -> None:
    program = MapRuntime().environment.compile(
        "{'a': 'x', 'b': 1}.size() + [1, 'x'].size() + {'c': dyn(1), 'd': dyn('y')}.size()")
    assert len(heterogeneous_literals(program)) == 2


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
    return MapRuntime().admit(exported([SELECTOR_POLICY], PLAIN), obj, request=review["request"],
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

