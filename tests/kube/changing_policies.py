"""The cluster of docs/changing-policies.md in the fake API server: its namespaces, nodes, the policy served
today and the workloads Placer admitted under it (each run through the engine first, as the webhook did)."""

from typing import Any

import yaml

from tests.docs_text import DOCS
from tests.kube.fake_apiserver import DEPLOYMENTS, JOBS, NODES, STATEFULSETS, FakeApiServer
from webhook.admission.offline import apply_manifests

EXAMPLES = DOCS / "examples/changing-policies"
COLLECTIONS = {"Deployment": DEPLOYMENTS, "StatefulSet": STATEFULSETS, "Job": JOBS}


def documents(name: str) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all((EXAMPLES / name).read_text()) if document]


def admitted(policies: list[str], *manifests: str) -> list[dict[str, Any]]:
    """The workloads of `manifests` as Placer admitted them under `policies` (files of the examples)."""
    report = apply_manifests(policy_paths=[str(EXAMPLES / name) for name in policies],
                             manifest_paths=[str(EXAMPLES / "namespaces.yaml"),
                                             *(str(EXAMPLES / name) for name in manifests)],
                             namespace_labels={})
    assert not report.problems, report.problems
    return [result.mutated for result in report.results]


def put_example_cluster(apiserver: FakeApiServer, *, workloads: tuple[str, ...] = ("workloads.yaml",)) -> None:
    for namespace in documents("namespaces.yaml"):
        apiserver.put_namespace(namespace["metadata"]["name"], namespace["metadata"]["labels"])
    for node in documents("nodes.yaml"):
        apiserver.put(NODES, node)
    for policy in documents("gpu-pool.yaml"):
        apiserver.put_policy(policy)
    for obj in admitted(["gpu-pool.yaml"], *workloads):
        apiserver.put(COLLECTIONS[obj["kind"]], obj)
