"""GPUs claimed through DRA are GPUs for Placer's rules: the captured v1.36 DRA Pod (`kube-1.36/requests/
pod-dra-create-real.json`, a ResourceClaimTemplate `one-gpu` asking for one `gpu.nvidia.com` device) gets
what the example GPU rule gives a Pod asking for `nvidia.com/gpu`, through the same pipeline the server runs."""

import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import FIXTURES, REPO
from tests.helpers import decode_patch, review_for, snapshot_of
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.placement.claims import ClaimLookup
from webhook.placement.feasibility import PlacementCheck
from webhook.pods.dra import TEMPLATE_KIND, claim_spec_devices, class_entry, device_entry
from webhook.pods.resources import effective_resources
from webhook.policy.snapshot import NamespaceInfo
from webhook.policy.state.node_facts import NodeFactsReader, node_facts
from webhook.policy.state.shards import ShardWriter
from webhook.workloads import default_workload_table

CAPTURES = FIXTURES / "kube-1.36"
ORG_WIDE = (REPO / "policies" / "org-wide-policy.yaml").read_text()
TEAM_A = NamespaceInfo("team-a", {"capture": "on", "team": "ml"})
GPU_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


class Claims:
    """A cluster's DRA claims as the published state answers (`DeviceClaimSource`), and no volumes."""

    def __init__(self, templates: dict[str, dict[str, Any]] | None, claims: dict[str, dict[str, Any]] | None = None,
                 classes: dict[str, dict[str, Any]] | None = None) -> None:
        self.templates = templates
        self.claims = claims or {}
        self.classes = classes or {}

    def known(self) -> bool:
        return False

    def claim(self, namespace: str, name: str) -> None:
        return None

    def volume(self, name: str) -> None:
        return None

    def devices_known(self) -> bool:
        return self.templates is not None

    def claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        return (self.templates or {}).get(f"{namespace}/{name}")

    def resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claims.get(f"{namespace}/{name}")

    def device_class(self, name: str) -> dict[str, Any] | None:
        return self.classes.get(name)


def captured(name: str) -> dict[str, Any]:
    return copy.deepcopy(json.loads((CAPTURES / "requests" / f"{name}.json").read_text())["body"])


def one_gpu_template() -> dict[str, Any]:
    obj = yaml.safe_load((CAPTURES / "manifests" / "resourceclaimtemplate-one-gpu.yaml").read_text())
    return {"team-a/one-gpu": device_entry(obj, TEMPLATE_KIND)}


def admitted(body: dict[str, Any], claims: Claims | None) -> tuple[dict[str, Any], list[str]]:
    """The object as the API server stores it after Placer's patch, and the response's warnings."""
    snapshot = snapshot_of(ORG_WIDE, namespaces=[TEAM_A])
    request = parse_review(body)
    lookup = ClaimLookup(claims) if claims is not None else None
    admission = admit(request, snapshot, default_workload_table(), claims=lookup)
    assert admission.response["response"]["allowed"] is True
    patched = jsonpatch.apply_patch(request.object, decode_patch(admission.response))
    return patched, admission.response["response"].get("warnings", [])


def classic_gpu_pod(dra: dict[str, Any]) -> dict[str, Any]:
    """The captured DRA Pod asking for the device plugin's `nvidia.com/gpu: 1` instead of claiming it."""
    body = copy.deepcopy(dra)
    spec = body["request"]["object"]["spec"]
    del spec["resourceClaims"]
    spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    return body


@pytest.mark.parametrize("capture", ["pod-dra-create-real", "pod-dra-create-dryrun"])
def test_captured_dra_pod_gets_the_placement_of_a_classic_gpu_pod(capture: str) -> None:
    dra = captured(capture)
    placed_dra, warnings = admitted(dra, Claims(one_gpu_template()))
    placed_classic, _ = admitted(classic_gpu_pod(dra), Claims(one_gpu_template()))

    assert GPU_TOLERATION in placed_dra["spec"]["tolerations"]
    assert placed_dra["spec"]["tolerations"] == placed_classic["spec"]["tolerations"]
    assert placed_dra["spec"].get("nodeSelector") == placed_classic["spec"].get("nodeSelector")
    assert placed_dra["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    assert warnings == []


def test_golden_patch_of_the_captured_dra_pod() -> None:
    """The exact answer to the captured v1.36.2 request: the annotation and the GPU toleration, appended
    after the two the DefaultTolerationSeconds plugin added before the webhook."""
    snapshot = snapshot_of(ORG_WIDE, namespaces=[TEAM_A])
    admission = admit(parse_review(captured("pod-dra-create-real")), snapshot, default_workload_table(),
                      claims=ClaimLookup(Claims(one_gpu_template())))
    assert decode_patch(admission.response) == [
        {"op": "add", "path": "/metadata/annotations/placer.dev~1applied",
         "value": "org-wide-policy/gpu-workload-taints"},
        {"op": "add", "path": "/spec/tolerations/2", "value": GPU_TOLERATION},
    ]
    assert admission.response["response"]["auditAnnotations"] == {"applied": "org-wide-policy/gpu-workload-taints"}
    again = captured("pod-dra-create-real")  # reinvoked on its own output: nothing more to do
    again["request"]["object"] = jsonpatch.apply_patch(again["request"]["object"], decode_patch(admission.response))
    second = admit(parse_review(again), snapshot, default_workload_table(),
                   claims=ClaimLookup(Claims(one_gpu_template())))
    assert decode_patch(second.response) == []


def test_unknown_template_is_a_warning_not_a_silent_no_gpu() -> None:
    placed, warnings = admitted(captured("pod-dra-create-real"), Claims({}))
    assert GPU_TOLERATION not in placed["spec"]["tolerations"]
    assert warnings == ["placer: claim gpu: ResourceClaimTemplate one-gpu not known to Placer; "
                        "its devices are not counted"]


def test_dra_state_not_published_says_so() -> None:
    _, warnings = admitted(captured("pod-dra-create-real"), Claims(None))
    assert warnings == ["placer: claim gpu: ResourceClaimTemplate one-gpu not known to Placer (no DRA state); "
                        "its devices are not counted"]


def test_deployment_template_naming_a_claim_template_is_a_gpu_workload() -> None:
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "infer", "namespace": "team-a"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "infer"}}, "template": {
            "metadata": {"labels": {"app": "infer"}},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                     "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}]}}},
    }
    placed, warnings = admitted(review_for(deployment, namespace="team-a"), Claims(one_gpu_template()))
    assert placed["spec"]["template"]["spec"]["tolerations"] == [GPU_TOLERATION]
    assert warnings == []


def test_shared_resource_claim_counts_too() -> None:
    body = captured("pod-dra-create-real")
    body["request"]["object"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared-gpus"}]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                         "count": 2}}]}}}
    placed, _ = admitted(body, Claims({}, {"team-a/shared-gpus": device_entry(claim, "ResourceClaim")}))
    assert GPU_TOLERATION in placed["spec"]["tolerations"]


def test_what_rules_see_of_claimed_devices() -> None:
    """`resources.devices`, `resources.claims` and the GPU fold, read by CEL variables of a policy."""
    policy = """
apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: devices}
spec:
  rules:
  - name: shows
    condition: "true"
    action: add-labels
    parameters: {}
    parameterExpressions:
      gpus: "string(int(resources.limits['nvidia.com/gpu']))"
      nics: "string(int(resources.devices['nic.example.com']))"
      known: "string(resources.claims['gpu'].known)"
      source: "resources.claims['gpu'].kind + '.' + resources.claims['gpu'].name"
"""
    body = captured("pod-dra-create-real")
    spec = body["request"]["object"]["spec"]
    spec["resourceClaims"].append({"name": "net", "resourceClaimTemplateName": "two-nics"})
    two_nics = {"kind": TEMPLATE_KIND, "spec": {"spec": {"devices": {"requests": [
        {"name": "a", "exactly": {"deviceClassName": "nic.example.com", "count": 2}}]}}}}
    templates = {**one_gpu_template(), "team-a/two-nics": device_entry(two_nics, TEMPLATE_KIND)}
    snapshot = snapshot_of(policy, namespaces=[TEAM_A])
    request = parse_review(body)
    admission = admit(request, snapshot, default_workload_table(), claims=ClaimLookup(Claims(templates)))
    labels = jsonpatch.apply_patch(request.object, decode_patch(admission.response))["metadata"]["labels"]
    assert {key: labels[key] for key in ("gpus", "nics", "known", "source")} == {
        "gpus": "1", "nics": "2", "known": "true", "source": "ResourceClaimTemplate.one-gpu"}


def test_a_device_class_names_the_extended_resource_its_devices_count_as() -> None:
    """The cluster configures which classes are GPUs: DeviceClass `spec.extendedResourceName` (KEP-5004)."""
    policy = """
apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: amd}
spec:
  rules:
  - name: amd-gpus
    condition: "resources.limits[?'amd.com/gpu'].orValue(0) > 0"
    action: add-toleration
    parameters: {key: amd.com/gpu, operator: Exists, effect: NoSchedule}
  - name: nvidia-gpus
    condition: "resources.limits[?'nvidia.com/gpu'].orValue(0) > 0"
    action: add-toleration
    parameters: {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
"""
    body = captured("pod-dra-create-real")
    template = {"kind": TEMPLATE_KIND, "spec": {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.amd.com", "count": 2}}]}}}}
    amd_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.amd.com"},
                 "spec": {"extendedResourceName": "amd.com/gpu"}}
    snapshot = snapshot_of(policy, namespaces=[TEAM_A])
    request = parse_review(body)

    def tolerations(classes: dict[str, dict[str, Any]]) -> list[str]:
        source = Claims({"team-a/one-gpu": device_entry(template, TEMPLATE_KIND)}, classes=classes)
        admission = admit(request, snapshot, default_workload_table(), claims=ClaimLookup(source))
        placed = jsonpatch.apply_patch(request.object, decode_patch(admission.response))
        return [t["key"] for t in placed["spec"]["tolerations"] if t["key"].endswith("/gpu")]

    assert tolerations({"gpu.amd.com": class_entry(amd_class)}) == ["amd.com/gpu"]
    assert tolerations({}) == []  # an unknown vendor's class is only in resources.devices


def test_claim_counting_follows_the_api_defaults() -> None:
    """ExactCount defaults to 1 device; All counts at least one; firstAvailable counts its first choice;
    adminAccess counts nothing; v1beta1's flat request reads the same (resource.k8s.io types.go)."""
    spec = {"devices": {"requests": [
        {"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
        {"name": "b", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 4}},
        {"name": "c", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}},
        {"name": "d", "firstAvailable": [{"name": "big", "deviceClassName": "mig.nvidia.com", "count": 2},
                                         {"name": "small", "deviceClassName": "gpu.nvidia.com"}]},
        {"name": "e", "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}},
        {"name": "f", "deviceClassName": "gpu.nvidia.com", "count": 3},
    ]}}
    assert claim_spec_devices(spec) == {"gpu.nvidia.com": 9, "mig.nvidia.com": 2}


def test_without_cluster_state_claims_are_listed_as_not_known() -> None:
    spec = json.loads((CAPTURES / "requests" / "pod-dra-create-real.json").read_text())["body"]["request"]
    resources, _ = effective_resources(spec["object"]["spec"])
    assert resources["devices"] == {}
    assert resources["claims"] == {"gpu": {"kind": "ResourceClaimTemplate", "name": "one-gpu", "known": False,
                                           "devices": {}}}



GPU_POOL = """
apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: gpu-pool}
spec:
  rules:
  - name: to-gpu-nodes
    condition: "resources.limits[?'nvidia.com/gpu'].orValue(0) > 0"
    action: add-node-selector
    parameters: {node-pool: gpu}
"""


def test_the_feasibility_check_warns_for_a_dra_gpu_pod_as_for_a_classic_one(tmp_path: Path) -> None:
    """With the nodes known, sending GPU pods to a pool no node has is the same warning either way."""
    ShardWriter(tmp_path).replace({name: node_facts({"metadata": {"labels": {"node-pool": "general"}}})
                                   for name in ("cpu-1", "cpu-2")})
    check = PlacementCheck(NodeFactsReader(tmp_path))
    snapshot = snapshot_of(GPU_POOL, namespaces=[TEAM_A])
    dra = captured("pod-dra-create-real")
    answers = []
    for body in (dra, classic_gpu_pod(dra)):
        admission = admit(parse_review(body), snapshot, default_workload_table(), placement=check,
                          claims=ClaimLookup(Claims(one_gpu_template())))
        answers.append((admission.unplaceable, admission.response["response"].get("warnings")))
    assert answers[0] == answers[1]
    assert answers[0][0] == 1 and "without label node-pool=gpu" in answers[0][1][-1]
