"""`kubectl placer preview` on a living cluster, before a change is served: a policy that moves a namespace's
pods to a pool no node has reports every one of its workloads stranded and exits 1; a policy that only adds
labels reports changes and no stranding, exit 0; removing a policy is previewed too. The preview only reads:
the workloads and the policy are as they were after each run.

The workloads are created while the first version of the policy is served, so the webhook admits them (a
label on their pod templates); the preview reads them, the cluster's nodes and the policy as they are stored.
No feature gate is needed (v1.34+). Runs against Placer started here or deployed (PLACER_E2E_IN_CLUSTER=1).
"""

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.harness import E2E_NAME, Cluster
from webhook.commands.cli import kubectl_main

pytestmark = pytest.mark.cluster

POLICY = f"{E2E_NAME}-preview"
POOL_KEY = "placer-e2e/preview-pool"


def policy_document(name: str, namespace: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": name},
            "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                     "rules": rules}}


TEAM_LABEL = {"name": "team", "action": "add-labels", "parameters": {"placer-e2e/team": "preview"}}


def workloads(namespace: str) -> list[tuple[str, dict[str, Any]]]:
    """Two Deployments and a StatefulSet running pause, each as its collection and manifest."""
    def template(app: str) -> dict[str, Any]:
        return {"metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                         "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}

    apps = f"/apis/apps/v1/namespaces/{namespace}"
    found = [(f"{apps}/deployments", {"apiVersion": "apps/v1", "kind": "Deployment",
                                      "metadata": {"name": name, "namespace": namespace},
                                      "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                                               "template": template(name)}}) for name in ("web", "api")]
    found.append((f"{apps}/statefulsets", {"apiVersion": "apps/v1", "kind": "StatefulSet",
                                           "metadata": {"name": "cache", "namespace": namespace},
                                           "spec": {"replicas": 1, "serviceName": "cache",
                                                    "selector": {"matchLabels": {"app": "cache"}},
                                                    "template": template("cache")}}))
    return found


def preview(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = kubectl_main(["preview", *args, "--kubeconfig", os.environ["PLACER_E2E_KUBECONFIG"]])
    return code, capsys.readouterr().out


def test_preview_strands_changes_and_removes_on_the_living_cluster(
        cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.schedulable_nodes(1, purpose="today's pods must have somewhere to run")
    namespace = cluster.namespace()
    cluster.policy("preview", policy_document(POLICY, namespace, [TEAM_LABEL])["spec"])
    try:
        for collection, obj in workloads(namespace):
            created = cluster.create(collection, obj)
            assert created["spec"]["template"]["metadata"]["labels"]["placer-e2e/team"] == "preview", \
                "admitted by the webhook under the served policy"
        stored = {obj["metadata"]["name"]: cluster.api.get(f"{collection}/{obj['metadata']['name']}")
                  for collection, obj in workloads(namespace)}
        served = cluster.api.get(f"/apis/placer.dev/v1alpha1/schedulingpolicies/{POLICY}")

        moved = tmp_path / "moved.yaml"
        moved.write_text(yaml.safe_dump(policy_document(POLICY, namespace, [
            TEAM_LABEL, {"name": "pool", "action": "add-node-selector", "parameters": {POOL_KEY: "nowhere"}}])))
        code, out = preview(capsys, "-f", str(moved), "-n", namespace)
        assert code == 1, out
        assert out.splitlines()[0] == f"policy change: replaces {POLICY}"
        for title in (f"deployment/web -n {namespace}", f"deployment/api -n {namespace}",
                      f"statefulset/cache -n {namespace}"):
            assert f"{title}\n" in out, out
        assert out.count(f"  stranded: no node has {POOL_KEY}=nowhere\n") == 3, out
        assert out.endswith("3 workloads change, 3 would roll out, 3 would be stranded (of 3 workloads)\n"), out

        labels = tmp_path / "labels.yaml"
        labels.write_text(yaml.safe_dump(policy_document(f"{E2E_NAME}-preview-labels", namespace, [
            {"name": "cost", "action": "add-labels", "parameters": {"placer-e2e/cost-center": "research"}}])))
        code, out = preview(capsys, "-f", str(labels), "-n", namespace)
        assert code == 0, out
        assert out.count(f"  rules: +{E2E_NAME}-preview-labels/cost\n") == 3, out
        assert "stranded:" not in out
        assert out.endswith("3 workloads change, 3 would roll out, 0 would be stranded (of 3 workloads)\n"), out

        code, out = preview(capsys, "--delete", POLICY, "-n", namespace)
        assert code == 0, out
        assert out.splitlines()[0] == f"policy change: deletes {POLICY}"
        assert out.count(f"  no longer applied: {POLICY}/team: what they wrote stays") == 3, out
        assert out.endswith("3 workloads change, 0 would roll out, 0 would be stranded (of 3 workloads)\n"), out
        code, _ = preview(capsys, "--delete", POLICY, "-n", namespace, "--fail-on", "change")
        assert code == 1

        for collection, obj in workloads(namespace):
            now = cluster.api.get(f"{collection}/{obj['metadata']['name']}")
            before = stored[obj["metadata"]["name"]]
            assert (now["metadata"]["generation"], now["spec"]) == (before["metadata"]["generation"], before["spec"]), \
                "a preview writes nothing (the controllers keep writing status, which moves resourceVersion)"
        after = cluster.api.get(f"/apis/placer.dev/v1alpha1/schedulingpolicies/{POLICY}")
        assert after["metadata"]["generation"] == served["metadata"]["generation"]
        assert cluster.get_or_none(f"/apis/placer.dev/v1alpha1/schedulingpolicies/{E2E_NAME}-preview-labels") is None
    finally:
        cluster.delete_policy("preview")
