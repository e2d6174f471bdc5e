"""`placer apply --kube` and `kubectl placer explain`: the cluster's policies and namespaces, live objects,
read from a recorded-API fake server and never written."""

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube.fake_apiserver import FakeApiServer
from webhook.commands.cli import kubectl_main, main

DEPLOYMENTS = "/apis/apps/v1/namespaces/team-a/deployments"


def pool_policy(name: str = "ml-pool", team: str = "ml") -> dict[str, Any]:
    return {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": name},
            "spec": {"namespaceSelector": {"matchLabels": {"team": team}}, "rules": [
                {"name": "gpu-pool", "action": "add-node-selector", "parameters": {"node-pool": "gpu"}}]}}


def web(replicas: int = 2) -> dict[str, Any]:
    """A Deployment as the API server returns it: defaulted, with status and managed fields."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team-a", "generation": 3,
                         "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}},
            "status": {"replicas": replicas, "readyReplicas": replicas}}


@pytest.fixture
def cluster(apiserver: FakeApiServer) -> FakeApiServer:
    apiserver.put_namespace("team-a", {"team": "ml"})
    apiserver.put_policy(pool_policy())
    apiserver.put_policy(pool_policy("web-pool", team="web"))
    apiserver.put_readable(DEPLOYMENTS, web())
    return apiserver


def test_a_live_deployment_is_explained_with_the_clusters_policies_and_labels(
        cluster: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["apply", "--kube", "--kubeconfig", str(kubeconfig), "deployment/web", "-n", "team-a",
                 "-o", "explain"])
    output = capsys.readouterr().out
    assert code == 0, output
    assert "Deployment team-a/web (deployment/web (live))" in output
    assert "policy ml-pool" in output and "gpu-pool: matched, changed the object" in output
    assert "policy web-pool: namespaceSelector does not select team-a" in output, "the namespace's real labels"
    assert {method for method, _, _ in cluster.requests} == {"GET"}, "read, never written"


def test_the_kubectl_plugin_takes_kubectls_flags(
        cluster: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_main(["explain", "deploy/web", "-n", "team-a", "--kubeconfig", str(kubeconfig),
                         "-o", "json"]) == 0
    mutated = json.loads(capsys.readouterr().out)
    assert mutated["spec"]["template"]["spec"]["nodeSelector"] == {"node-pool": "gpu"}


def test_a_manifest_is_evaluated_in_its_namespaces_real_labels(
        cluster: FakeApiServer, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "web.yaml"
    manifest.write_text(yaml.safe_dump({k: v for k, v in web().items() if k != "status"}))
    assert main(["apply", "--kube", "--kubeconfig", str(kubeconfig), "-f", str(manifest), "-o", "patch"]) == 0
    patch = json.loads(capsys.readouterr().out)[0]["patch"]
    assert any(op["path"].endswith("/nodeSelector") and op["value"] == {"node-pool": "gpu"} for op in patch)


def test_context_picks_the_cluster(cluster: FakeApiServer, kubeconfig: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"].append({"name": "elsewhere", "cluster": {"server": "https://127.0.0.1:9"}})
    config["contexts"].append({"name": "other", "context": {"cluster": "elsewhere", "user": "placer"}})
    config["contexts"][0]["name"], config["current-context"] = "test", "other"
    kubeconfig.write_text(yaml.safe_dump(config))
    assert kubectl_main(["explain", "deployment/web", "-n", "team-a", "--kubeconfig", str(kubeconfig),
                         "--context", "test"]) == 0
    assert "gpu-pool: matched" in capsys.readouterr().out


@pytest.mark.parametrize(("target", "message"), [
    ("deployment/missing", 'deployments "missing" not found'),
    ("service/web", "service: not a kind Placer mutates"),
    ("web", "expected KIND/NAME"),
])
def test_what_cannot_be_read_says_why(cluster: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str],
                                      target: str, message: str) -> None:
    assert main(["apply", "--kube", "--kubeconfig", str(kubeconfig), target, "-n", "team-a"]) == 1
    assert message in capsys.readouterr().err


def test_a_live_object_needs_kube(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", "deployment/web"]) == 2
    assert "add --kube" in capsys.readouterr().err


def test_installed_as_a_kubectl_plugin() -> None:
    """kubectl finds plugins as `kubectl-<name>` executables on PATH: `pip install` puts one beside `placer`."""
    plugin = Path(sys.executable).with_name("kubectl-placer")
    assert plugin.exists() or shutil.which("kubectl-placer"), "kubectl-placer is not installed"
    result = subprocess.run([str(plugin), "explain", "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "--context" in result.stdout and "-n NS, --namespace NS" in result.stdout


def test_explain_says_which_nodes_can_host_the_mutated_pods(
        cluster: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.put_node("gpu-1", {"node-pool": "gpu"})
    cluster.put_node("cpu-1", {"node-pool": "general"})
    cluster.put_node("cpu-2", {"node-pool": "general"}, unschedulable=True)
    assert main(["apply", "--kube", "--kubeconfig", str(kubeconfig), "deployment/web", "-n", "team-a",
                 "-o", "explain"]) == 0
    assert "  nodes: 1 of 3 nodes can host its pods" in capsys.readouterr().out

    cluster.delete("/api/v1/nodes", "gpu-1")  # the pool the policy selects is gone: every pod would be Pending
    assert main(["apply", "--kube", "--kubeconfig", str(kubeconfig), "deployment/web", "-n", "team-a",
                 "-o", "explain"]) == 0
    # equal counts are listed in kube-scheduler's filter order: NodeUnschedulable before NodeAffinity
    assert "  nodes: no node can host its pods (1 cordoned, 1 without label node-pool=gpu; 0 of 2 nodes)" in (
        capsys.readouterr().out)
