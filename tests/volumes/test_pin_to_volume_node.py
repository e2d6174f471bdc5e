"""`pin-to-volume-node`: a StatefulSet's pod follows its local data back to the node that holds it.

Inputs: the claims and volumes of `objects.yaml` (one of each kind: local-path PV with node affinity, static
hostPath PV with a selected-node claim, TopoLVM, unbound, lost, NFS), published as the controller publishes
them, and the captured Pod create of a controller's pod, carrying the pod the StatefulSet controller makes
(`db-0`, its claims named `<template>-db-0`).
"""

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import fixture_request
from tests.helpers import compile_errors, snapshot_of
from tests.volumes.data import APPLIED, TEMPLATES, ZONAL, objects, publish, statefulset_pod
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.engine.mutate import mutate
from webhook.placement.claims import ClaimLookup
from webhook.pods.volumes import NodePin, claim_entry, node_local, place_claim, pod_claims, volume_entry, volume_pin
from webhook.policy.state.volume_shards import VolumeShards
from webhook.workloads import default_workload_table


def policy(**parameters: Any) -> str:
    params = yaml.safe_dump(parameters, default_flow_style=True).strip() if parameters else "{}"
    return ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: local-data}\nspec:\n"
            f"  rules:\n  - {{name: follow-data, action: pin-to-volume-node, parameters: {params}}}\n")


def pinned(lookup: ClaimLookup, body: dict[str, Any], policy_text: str) -> tuple[dict[str, Any], list[str]]:
    """The admission through the pipeline, as a worker runs it: the Pod as stored, and the warnings."""
    request = parse_review(body)
    admission = admit(request, snapshot_of(policy_text), default_workload_table(), claims=lookup)
    assert admission.result in ("patched", "unchanged"), admission.mutation
    return jsonpatch.apply_patch(request.object, admission.mutation.patch), admission.mutation.warnings


def node_affinity(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"].get("affinity", {}).get("nodeAffinity", {})


def required_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return node_affinity(pod)["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


# -- where a volume's data is ----------------------------------------------------------------------------------

def test_the_node_a_volume_names_is_read_from_its_own_node_affinity() -> None:
    pvs = {d["metadata"]["name"]: d for d in objects() if d["kind"] == "PersistentVolume"}
    assert volume_pin(pvs["pvc-5b0c7a52-3d41-4f0e-9a57-0c3e1f6d2a10"]["spec"]) == NodePin(
        "kubernetes.io/hostname", "kind-worker")
    assert volume_pin(pvs["pvc-7c6b5a49-3827-4160-9f8e-7d6c5b4a3928"]["spec"]) == NodePin(
        "topology.topolvm.io/node", "kind-worker3")
    assert volume_pin(pvs["cache-pv"]["spec"]) is None and volume_pin(pvs["nfs-shared"]["spec"]) is None


@pytest.mark.parametrize("affinity", [
    {"nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                                  "values": ["a"]}]}]},
    {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                  "values": ["n1", "n2"]}]}]},
    {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]},
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]},
    {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn",
                                                  "values": ["n1"]}]}]},
])
def test_a_volume_reachable_from_more_than_one_node_is_not_pinned(affinity: dict[str, Any]) -> None:
    assert volume_pin({"nodeAffinity": {"required": affinity}}) is None


def test_a_volume_pinned_by_node_name_is_pinned_with_match_fields() -> None:
    spec = {"nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n7"]}]}]}}}
    assert volume_pin(spec) == NodePin("metadata.name", "n7", field=True)


def test_claims_are_resolved_to_where_their_data_is(tmp_path: Path) -> None:
    lookup = publish(tmp_path)
    placements = lookup.placements("team-a", statefulset_pod(*TEMPLATES)["request"]["object"])
    assert placements is not None
    states = {name: (p.state, p.pin.describe() if p.pin else None) for name, p in placements.items()}
    assert states == {
        "data-db-0": ("pinned", "node kind-worker"),
        "cache-db-0": ("pinned", "node kind-worker2"),  # the PV says nothing: the claim's selected node
        "fast-db-0": ("pinned", "topology.topolvm.io/node=kind-worker3"),
        "scratch-db-0": ("unbound", None),
        "logs-db-0": ("volume-missing", None),
        "shared-db-0": ("not-local", None),
    }
    assert placements["data-db-0"].provisioner == "rancher.io/local-path"
    assert placements["data-db-0"].storage_class == "standard"
    assert all(p.node_present for p in placements.values() if p.pin)


ZONAL_TEMPLATES = ("ebs", "ebs-zone", "azure", "nfs")
EKS_NODE = "ip-10-0-1-23.ec2.internal"


def test_network_volumes_are_not_on_one_node_whatever_node_their_claim_was_provisioned_for(tmp_path: Path) -> None:
    """Issue 37, item 2: a WaitForFirstConsumer claim of a zonal disk (gp3 on ebs.csi.aws.com, Azure Disk) or
    of NFS carries the node kube-scheduler chose when it was provisioned; the data is reachable from the
    whole zone (or everywhere), so that node is not where the data is."""
    lookup = publish(tmp_path, nodes=(EKS_NODE,), path=ZONAL)
    placements = lookup.placements("team-a", statefulset_pod(*ZONAL_TEMPLATES)["request"]["object"])
    assert placements is not None
    assert {name: (p.state, p.pin) for name, p in placements.items()} == {
        f"{template}-db-0": ("not-local", None) for template in ZONAL_TEMPLATES}
    assert placements["ebs-db-0"].storage_class == "gp3"
    assert placements["ebs-db-0"].provisioner == "ebs.csi.aws.com"


@pytest.mark.parametrize("strict", [False, True])
def test_a_zonal_ebs_claim_never_pins_its_pod_to_the_selected_node(tmp_path: Path, strict: bool) -> None:
    """Before, the gp3 pod was pinned to ip-10-0-1-23.ec2.internal, and under `strict` stayed Pending once that
    node was replaced; it is left to the scheduler, whose VolumeBinding plugin keeps it in the disk's zone."""
    lookup = publish(tmp_path, nodes=(EKS_NODE,), path=ZONAL)
    for claims in [("ebs",), ZONAL_TEMPLATES]:
        body = statefulset_pod(*claims)
        pod, warnings = pinned(lookup, body, policy(strict=True) if strict else policy())
        assert pod == body["request"]["object"] and warnings == []
    # nor when the rule names the class or the provisioner
    body = statefulset_pod("ebs")
    pod, _ = pinned(lookup, body, policy(storageClassNames=["gp3"], provisioners=["ebs.csi.aws.com"], strict=strict))
    assert "affinity" not in pod["spec"]


def test_only_node_local_volume_kinds_follow_their_claims_selected_node() -> None:
    assert node_local({"hostPath": {"path": "/mnt/cache"}}) and node_local({"local": {"path": "/mnt/disks/1"}})
    assert node_local({"csi": {"driver": "topolvm.io"}}) and node_local({"csi": {"driver": "local.csi.openebs.io"}})
    assert not node_local({"csi": {"driver": "ebs.csi.aws.com"}}) and not node_local({"nfs": {"server": "n"}})
    claim = claim_entry({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n1"}},
                         "spec": {"volumeName": "v"}})
    hostpath = volume_entry({"spec": {"hostPath": {"path": "/mnt/x"}}})
    ebs = volume_entry({"spec": {"csi": {"driver": "ebs.csi.aws.com"}}})
    assert place_claim("c", claim, lambda name: hostpath, lambda pin: True).pin == NodePin(
        "metadata.name", "n1", field=True)
    assert place_claim("c", claim, lambda name: ebs, lambda pin: True).state == "not-local"


def test_a_claim_that_does_not_exist_yet_and_a_pod_without_claims() -> None:
    missing = place_claim("nope", None, lambda name: None, lambda pin: True)
    assert missing.state == "unknown" and missing.pin is None
    pod = {"metadata": {"name": "p"}, "spec": {"volumes": [
        {"name": "tmp", "emptyDir": {}}, {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
        {"name": "a", "persistentVolumeClaim": {"claimName": "c1"}},
        {"name": "b", "persistentVolumeClaim": {"claimName": "c1"}}]}}
    assert pod_claims(pod) == ["p-scratch", "c1"]
    del pod["metadata"]["name"]  # generateName: the ephemeral claim's name is not known yet
    assert pod_claims(pod) == ["c1"]


# -- the action at admission -----------------------------------------------------------------------------------

def test_strict_pins_the_pod_to_its_local_volume_node_in_every_required_term(tmp_path: Path) -> None:
    body = statefulset_pod("data")
    body["request"]["object"]["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]}]}}}
    pod, warnings = pinned(publish(tmp_path), body, policy(strict=True))
    hostname = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["kind-worker"]}
    assert [term["matchExpressions"] for term in required_terms(pod)] == [
        [{"key": "pool", "operator": "In", "values": ["a"]}, hostname],
        [{"key": "pool", "operator": "In", "values": ["b"]}, hostname]]
    assert warnings == []
    assert pod["metadata"]["annotations"][APPLIED] == "local-data/follow-data"


def test_by_default_the_volume_node_is_preferred(tmp_path: Path) -> None:
    pod, _ = pinned(publish(tmp_path), statefulset_pod("data", "fast"), policy())
    assert node_affinity(pod) == {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["kind-worker"]}]}},
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": "topology.topolvm.io/node", "operator": "In", "values": ["kind-worker3"]}]}}]}


def test_a_hostpath_volume_follows_the_claims_selected_node_by_name(tmp_path: Path) -> None:
    pod, _ = pinned(publish(tmp_path), statefulset_pod("cache"), policy(strict=True))
    assert required_terms(pod) == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["kind-worker2"]}]}]


def test_unbound_and_network_claims_leave_the_pod_alone(tmp_path: Path) -> None:
    body = statefulset_pod("scratch", "shared")
    pod, warnings = pinned(publish(tmp_path), body, policy(strict=True))
    assert pod == body["request"]["object"] and warnings == []


def test_a_claim_whose_volume_is_gone_is_a_warning_never_a_pin(tmp_path: Path) -> None:
    body = statefulset_pod("logs")
    pod, warnings = pinned(publish(tmp_path), body, policy(strict=True))
    assert pod == body["request"]["object"]
    assert warnings == ["local-data/follow-data: claim logs-db-0 is bound to volume "
                        "pvc-8a9b0c1d-2e3f-4a5b-8c6d-7e8f9a0b1c2d, which does not exist: not pinned"]


def test_a_volume_whose_node_is_gone_pins_only_when_strict(tmp_path: Path) -> None:
    lookup = publish(tmp_path, nodes=("kind-worker2", "kind-worker3"))
    body = statefulset_pod("data")
    pod, warnings = pinned(lookup, body, policy())
    assert pod == body["request"]["object"]
    assert warnings == ["local-data/follow-data: claim data-db-0: its node kind-worker is gone: not pinned"]
    pod, warnings = pinned(lookup, body, policy(strict=True))
    assert required_terms(pod)[0]["matchExpressions"][0]["values"] == ["kind-worker"]
    assert warnings == ["local-data/follow-data: claim data-db-0: its node kind-worker is gone: the pod waits "
                        "for it (strict)"]


def test_claims_on_different_nodes_under_strict_say_the_pod_can_never_schedule(tmp_path: Path) -> None:
    pod, warnings = pinned(publish(tmp_path), statefulset_pod("data", "cache"), policy(strict=True))
    term = required_terms(pod)[0]
    assert term["matchExpressions"][0]["values"] == ["kind-worker"]
    assert term["matchFields"][0]["values"] == ["kind-worker2"]
    assert any("claims are on different nodes" in w and "never be scheduled" in w for w in warnings)


@pytest.mark.parametrize(("parameters", "followed"), [
    ({"storageClassNames": ["standard"]}, ["kind-worker"]),
    ({"provisioners": ["topolvm.io"]}, ["kind-worker3"]),
    ({"storageClassNames": "local-hostpath", "provisioners": "topolvm.io"}, ["kind-worker2", "kind-worker3"]),
    ({"storageClassNames": ["premium-rwo"]}, []),
])
def test_claims_are_chosen_by_storage_class_or_provisioner(
        tmp_path: Path, parameters: dict[str, Any], followed: list[str]) -> None:
    pod, _ = pinned(publish(tmp_path), statefulset_pod("data", "cache", "fast"), policy(**parameters))
    terms = node_affinity(pod).get("preferredDuringSchedulingIgnoredDuringExecution", [])
    values = [requirement["values"][0] for term in terms
              for requirement in [*term["preference"].get("matchExpressions", []),
                                  *term["preference"].get("matchFields", [])]]
    assert values == followed


def test_a_pod_from_a_template_placer_mutated_is_still_pinned_and_keeps_its_applied_rules(tmp_path: Path) -> None:
    """The StatefulSet's template came through Placer (other rules applied there): the pod itself still gets
    its volume's node, the one thing only the pod knows, and the applied annotation lists both."""
    other = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: pools}\nspec:\n"
             "  rules:\n  - {name: pool, action: add-node-selector, parameters: {pool: db}}\n")
    body = statefulset_pod("data", applied="pools/pool")
    request = parse_review(body)
    snapshot = snapshot_of(other, policy(strict=True))
    admission = admit(request, snapshot, default_workload_table(), claims=publish(tmp_path))
    pod = jsonpatch.apply_patch(request.object, admission.mutation.patch)
    assert "nodeSelector" not in pod["spec"], "the template's rules are not run again on its pods"
    assert required_terms(pod)[0]["matchExpressions"][0]["values"] == ["kind-worker"]
    assert pod["metadata"]["annotations"][APPLIED] == "pools/pool,local-data/follow-data"
    again = copy.deepcopy(body)
    again["request"]["object"] = pod
    assert admit(parse_review(again), snapshot, default_workload_table(), claims=publish(tmp_path)).mutation.patch == []
    without_pin_rules = admit(request, snapshot_of(other), default_workload_table(), claims=publish(tmp_path))
    assert without_pin_rules.mutation.passed_through == (
        "created by StatefulSet/db from a template Placer already mutated")


def test_pinning_is_idempotent(tmp_path: Path) -> None:
    lookup = publish(tmp_path)
    for parameters in ({}, {"strict": True}):
        body = statefulset_pod("data", "cache", "fast")
        pod, _ = pinned(lookup, body, policy(**parameters))
        body["request"]["object"] = pod
        assert pinned(lookup, body, policy(**parameters))[0] == pod


def test_workload_templates_are_left_to_their_pods(tmp_path: Path) -> None:
    body = fixture_request("statefulset-create-dryrun")
    request = parse_review(body)
    mutation = mutate(request, snapshot_of(policy(strict=True)), default_workload_table(),
                      claims=publish(tmp_path).placements("team-a", statefulset_pod("data")["request"]["object"]))
    assert mutation.patch == []


def test_without_published_claims_nothing_is_pinned(tmp_path: Path) -> None:
    body = statefulset_pod("data")
    lookup = ClaimLookup(VolumeShards(tmp_path / "nothing"))
    pod, warnings = pinned(lookup, body, policy(strict=True))
    assert pod == body["request"]["object"] and warnings == []


@pytest.mark.parametrize(("parameters", "message"), [
    ({"strict": "yes"}, "strict: must be one of 'true', 'false', not 'yes'"),
    ({"weight": 0}, "weight: must be at least 1"),
    ({"storageClassNames": ["Not_A_Class"]}, "storageClassNames: 'Not_A_Class'"),
    ({"claims": "all"}, "claims: unknown parameter for pin-to-volume-node"),
])
def test_bad_parameters_are_load_time_errors(parameters: dict[str, Any], message: str) -> None:
    errors = compile_errors(policy(**parameters))
    assert any(message in error and "rule follow-data" in error for error in errors), errors


def test_what_was_done_per_claim_is_counted_once_however_many_passes(tmp_path: Path) -> None:
    lookup = publish(tmp_path, nodes=("kind-worker2", "kind-worker3"))
    # A second policy whose rule reads the labels the first writes makes the engine pass over the rules twice.
    labels = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: a-labels}\nspec:\n"
              "  rules:\n  - {name: tier, action: add-labels, parameters: {tier: db}}\n"
              "  - {name: more, condition: \"pod.metadata.labels['tier'] == 'db'\", action: add-labels, "
              "parameters: {more: 'yes'}}\n")
    request = parse_review(statefulset_pod("data", "cache", "logs", "scratch"))
    admission = admit(request, snapshot_of(labels, policy()), default_workload_table(), claims=lookup)
    # `more` reads the label `tier` writes: it can only have applied in a second pass over every rule.
    assert "a-labels/more" in admission.mutation.applied
    assert admission.mutation.volume_outcomes == {
        "data-db-0": "node-gone", "cache-db-0": "pinned", "logs-db-0": "volume-missing"}


def test_claims_that_cannot_be_read_leave_the_other_rules_applying(tmp_path: Path) -> None:
    class Broken(ClaimLookup):
        def placements(self, namespace: str, pod: Any) -> Any:
            raise OSError("state directory unreadable")

    other = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: pools}\nspec:\n"
             "  rules:\n  - {name: pool, action: add-node-selector, parameters: {pool: db}}\n")
    request = parse_review(statefulset_pod("data"))
    admission = admit(request, snapshot_of(other, policy(strict=True)), default_workload_table(),
                      claims=Broken(VolumeShards(tmp_path)))
    pod = jsonpatch.apply_patch(request.object, admission.mutation.patch)
    assert admission.result == "patched" and pod["spec"]["nodeSelector"] == {"pool": "db"}
    assert "affinity" not in pod["spec"]
