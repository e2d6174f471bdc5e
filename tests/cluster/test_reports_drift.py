"""Reports and drift on a living cluster: which running workloads the current policies have not reached.

A Deployment created before a policy shows as `fail` in its PolicyReport (one per workload) within 30 s of the
policy's creation; `kubectl placer drift` lists it with its patch; `--apply` brings it in step and the
report then says `pass`; an opted-out Deployment is `skip`; a rule that errors on the Deployment is `error`.

The report CRDs (wgpolicyk8s.io/v1alpha2) and their RBAC are installed from deploy/components/policy-reports
when the cluster does not have them (and removed afterwards); Placer looks for the CRDs every 30 s, so the
test first waits for its ClusterPolicyReport. No feature gate is needed (v1.34+). Runs against Placer
started here or deployed (PLACER_E2E_IN_CLUSTER=1), as tests/cluster/harness.py sets it up.
"""

import contextlib
import io
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster.harness import CRDS, E2E_NAME, Cluster, wait_until
from tests.conftest import REPO
from webhook.cluster.client.api import ApiError
from webhook.commands.cli import kubectl_main
from webhook.commands.drift import DriftOptions, run

pytestmark = pytest.mark.cluster

COMPONENT = REPO / "deploy" / "components" / "policy-reports"
REPORTS = "/apis/wgpolicyk8s.io/v1alpha2"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
REPORT_TIMEOUT = 30.0
"""The issue's promise: a workload out of step shows in its report within 30 s of the policy's creation."""


def documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((COMPONENT / name).read_text()) if doc]


def create_if_absent(cluster: Cluster, collection: str, obj: dict[str, Any]) -> bool:
    """Create `obj` unless it exists; whether this call created it."""
    try:
        cluster.api.get(f"{collection}/{obj['metadata']['name']}")
    except ApiError as error:
        if error.code != 404:
            raise
        cluster.create(collection, obj)
        return True
    return False


@pytest.fixture(scope="module")
def reports_installed(cluster: Cluster) -> Iterator[None]:
    """The component's CRDs and RBAC (where absent), and Placer writing reports (its ClusterPolicyReport).
    The RBAC it created is deleted after the module: the tier leaves no cluster-wide grant behind, and
    `test_least_privilege.py` installs the component's RBAC for its own ServiceAccount under the same names.
    The CRDs stay (Placer finds them again only every 30 s, and they grant nobody anything)."""
    for name in ("policyreports.yaml", "clusterpolicyreports.yaml"):
        for crd in documents(name):
            create_if_absent(cluster, CRDS, crd)
    created = []
    for obj in documents("rbac.yaml"):
        plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}[obj["kind"]]
        if create_if_absent(cluster, f"{RBAC}/{plural}", obj):
            created.append(f"{RBAC}/{plural}/{obj['metadata']['name']}")
    wait_until(lambda: served(cluster), timeout=60, what="wgpolicyk8s.io/v1alpha2 served")
    wait_until(lambda: cluster_report(cluster), timeout=120,
               what="Placer's ClusterPolicyReport (Placer looks for the report CRDs every 30 s)")
    yield
    for path in reversed(created):
        with contextlib.suppress(ApiError):
            cluster.api.delete(path)


def served(cluster: Cluster) -> bool:
    try:
        return bool(cluster.api.get(REPORTS).get("resources"))
    except ApiError:
        return False


def cluster_report(cluster: Cluster) -> dict[str, Any] | None:
    try:
        return cluster.api.get(f"{REPORTS}/clusterpolicyreports/placer")
    except ApiError:
        return None


def results(cluster: Cluster, namespace: str, policy: str = f"{E2E_NAME}-reports") -> dict[tuple[str, str], str]:
    """(workload, rule) → result of `policy`'s rules (other tests' policies may select every namespace), from
    the namespace's PolicyReports, one per workload (empty while there is none)."""
    try:
        listed = cluster.api.get(f"{REPORTS}/namespaces/{namespace}/policyreports",
                                 {"labelSelector": "app.kubernetes.io/managed-by=placer"})
    except ApiError:
        return {}
    found = {}
    for report in listed.get("items") or []:
        scope = report.get("scope") or {}
        owners = (report.get("metadata") or {}).get("ownerReferences") or []
        assert owners and owners[0]["uid"] == scope.get("uid") == report["metadata"]["name"], report["metadata"]
        found.update({(scope["name"], r["rule"]): r["result"] for r in report.get("results") or []
                      if r.get("source") == "placer" and r["policy"] == policy and scope.get("kind") == "Deployment"})
    return found


def deployment(name: str, namespace: str, **template_labels: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name, **template_labels}}, "spec": {
                         "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}}


def test_a_deployment_created_before_the_policy_fails_drifts_and_is_brought_in_step(
        cluster: Cluster, reports_installed: None, capsys: pytest.CaptureFixture[str]) -> None:
    namespace = cluster.namespace()
    deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    cluster.create(deployments, deployment("before", namespace))
    cluster.create(deployments, deployment("opted-out", namespace, **{"placer.dev/inject": "disabled"}))
    policy = f"{E2E_NAME}-reports"
    cluster.policy("reports", {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "rules": [
            {"name": "pool", "action": "add-node-selector", "parameters": {"placer-e2e/pool": "general"}},
            {"name": "divides-by-zero", "condition": "workload.replicas / 0 > 1", "action": "add-node-selector",
             "parameters": {"placer-e2e/never": "x"}},
        ]})
    try:
        created = time.monotonic()
        expected = {("before", "pool"): "fail", ("before", "divides-by-zero"): "error",
                    ("opted-out", "pool"): "skip", ("opted-out", "divides-by-zero"): "skip"}
        wait_until(lambda: results(cluster, namespace) == expected, timeout=REPORT_TIMEOUT,
                   what="fail, error and skip in the workloads' PolicyReports")
        assert time.monotonic() - created <= REPORT_TIMEOUT + 1

        kubeconfig = os.environ["PLACER_E2E_KUBECONFIG"]
        code = kubectl_main(["drift", "-n", namespace, "--kubeconfig", kubeconfig])
        listed = capsys.readouterr().out
        assert code == 1, listed
        assert f"deployment/before -n {namespace}\n  {policy}/pool: out of step: drift" in listed, \
            "each failing rule with its reason"
        assert '"path": "/spec/template/spec/nodeSelector"' in listed and "placer-e2e/pool" in listed
        assert "deployment/opted-out" not in listed

        out = io.StringIO()
        code = run(cluster.api, DriftOptions(namespace, None, ["deployment/before"], apply=True, yes=True), out=out)
        assert code == 0, out.getvalue()
        assert "starts a rollout" in out.getvalue() and f"deployment/before -n {namespace}: brought in step" in \
            out.getvalue()
        stored = cluster.api.get(f"{deployments}/before")
        assert stored["spec"]["template"]["spec"]["nodeSelector"] == {"placer-e2e/pool": "general"}
        wait_until(lambda: results(cluster, namespace).get(("before", "pool")) == "pass", timeout=REPORT_TIMEOUT,
                   what="pass once in step")
        assert results(cluster, namespace)[("before", "divides-by-zero")] == "error"
    finally:
        cluster.delete_policy("reports")
