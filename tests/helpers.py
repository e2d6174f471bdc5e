"""Helpers for building engine inputs from real captured envelopes."""

import base64
import copy
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import fixture_request
from webhook.admission.review import parse_review
from webhook.engine.mutate import Mutation, mutate
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.policy.state.node_facts import NodeFactsReader, node_facts
from webhook.policy.state.shards import ShardWriter
from webhook.workloads import default_workload_table

# Which captured envelope to reuse for an object of each kind (the envelope is real; only the object changes).
REVISION_KEYS_POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: keys}
spec:
  rules:
  - name: zones
    action: add-topology-spread
    parameters: {topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
  - name: hosts
    action: add-pod-anti-affinity
    parameters: {topologyKey: kubernetes.io/hostname}
"""
"""A spread and an anti-affinity rule: what writes the revision keys (`matchLabelKeys`) into a template."""

ENVELOPES = {
    "Pod": "pod-bare-create-dryrun",
    "Deployment": "deployment-create-dryrun",
    "StatefulSet": "statefulset-create-dryrun",
    "ReplicaSet": "replicaset-create-dryrun",
    "DaemonSet": "daemonset-create-dryrun",
    "Job": "job-create-dryrun",
    "CronJob": "cronjob-create-dryrun",
}


def review_for(obj: Mapping[str, Any], *, namespace: str | None = None, operation: str = "CREATE",
               old: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A real captured AdmissionReview of the same kind, carrying `obj` instead of the captured object.

    Operator resources were not captured: their envelope is the captured Deployment's with the kind and
    resource of the custom resource, which is exactly how the API server builds it for a CRD.
    """
    kind = str(obj["kind"])
    body = fixture_request(ENVELOPES.get(kind, "deployment-create-dryrun"))
    request = body["request"]
    if kind not in ENVELOPES:
        group, _, version = str(obj["apiVersion"]).rpartition("/")
        resource = kind.lower() + "s"
        request["kind"] = request["requestKind"] = {"group": group, "version": version, "kind": kind}
        request["resource"] = request["requestResource"] = {"group": group, "version": version, "resource": resource}
    request["object"] = copy.deepcopy(dict(obj))
    request["oldObject"] = copy.deepcopy(dict(old)) if old is not None else None
    request["operation"] = operation
    metadata = obj.get("metadata") or {}
    request["namespace"] = namespace or metadata.get("namespace") or request["namespace"]
    if metadata.get("name"):
        request["name"] = metadata["name"]
    else:
        request.pop("name", None)
    return body


def compile_policies(texts: Iterable[str]) -> tuple[list[Any], PolicyCompiler]:
    compiler = PolicyCompiler()
    policies = []
    for text in texts:
        for document in yaml.safe_load_all(text):
            if document and document.get("kind") == "SchedulingPolicy":
                result = compiler.compile(document, "test")
                assert not result.errors, [str(e) for e in result.errors]
                policies.append(result.policy)
    return policies, compiler


def snapshot_of(*policy_texts: str, namespaces: Iterable[NamespaceInfo] = (),
                default_priority_class: str | None = None) -> PolicySnapshot:
    policies, compiler = compile_policies(policy_texts)
    return PolicySnapshot.build(policies, {ns.name: ns for ns in namespaces}, [], compiler.environment,
                                default_priority_class=default_priority_class)


def run(snapshot: PolicySnapshot, body: Mapping[str, Any]) -> Mutation:
    return mutate(parse_review(body), snapshot, default_workload_table())


def decode_patch(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    encoded = response["response"].get("patch")
    return json.loads(base64.b64decode(encoded)) if encoded else []


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def compile_errors(text: str) -> list[str]:
    """Every load-time error of the policies in `text`, as the messages a user sees."""
    compiler = PolicyCompiler()
    errors: list[str] = []
    for document in yaml.safe_load_all(text):
        if document:
            errors.extend(str(error) for error in compiler.compile(document, "test.yaml").errors)
    return errors


def write_configmap_volume(directory: Path, files: Mapping[str, str], version: str) -> None:
    """Write `files` the way the kubelet updates a mounted ConfigMap: a new timestamped directory, then one
    atomic rename of the `..data` symlink onto it; each file is a symlink through `..data`."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"..{version}"
    target.mkdir()
    for name, text in files.items():
        (target / name).write_text(text)
    staging = directory / "..data_tmp"
    staging.symlink_to(target.name)
    os.replace(staging, directory / "..data")
    for name in files:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(Path("..data") / name)


def node_selector_policy(name: str, key: str, value: str) -> str:
    """A one-rule SchedulingPolicy (YAML) that adds the node selector `key: value`."""
    return (f"apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: {name}}}\nspec:\n"
            f"  rules:\n  - {{name: place, action: add-node-selector, parameters: {{{key}: {value}}}}}\n")


class Clock:
    """A monotonic clock a test moves by hand (`clock.now += 61`)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def publish_nodes(directory: Path, nodes: dict[str, dict[str, Any]]) -> NodeFactsReader:
    """Nodes as the controller publishes them (each with 8 CPUs; `labels`, `taints`, `cordoned`), and a
    worker's reader of them."""
    ShardWriter(directory).replace({
        name: node_facts({"metadata": {"labels": {"kubernetes.io/hostname": name, **spec.get("labels", {})}},
                          "spec": {"taints": spec.get("taints", []), "unschedulable": spec.get("cordoned", False)},
                          "status": {"allocatable": {"cpu": "8"}}})
        for name, spec in nodes.items()})
    return NodeFactsReader(directory)
