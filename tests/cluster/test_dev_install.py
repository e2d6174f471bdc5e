"""`placer dev --kube` on a living cluster: the newcomer's path of the README, from nothing to a mutated
Deployment, and nothing of it left behind but what the user chose to keep.

Needs PLACER_E2E_KUBECONFIG (cluster-admin: it creates a CRD and webhook configurations), kubectl on PATH
(the page's `kubectl get schedulingpolicy` output is compared with kubectl's) and an API server that can
reach this machine: at PLACER_E2E_WEBHOOK_HOST if set, else at the first address `placer dev` finds the API
server reaches (no flag: what a newcomer runs), port PLACER_E2E_DEV_PORT (default 9444, apart from the
cluster tier's 9443). No feature gates. Run with `--keep-crd` and `--no-reports`, so that CRDs other tests
of the session use are never deleted under them; the CRD is the only thing it may leave.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.harness import POLICIES, wait_until
from tests.conftest import KUBECONFIG_ENV, REPO
from tests.docs_text import shown_output
from webhook.cluster.client.api import ApiError, KubeApi, Timeouts
from webhook.cluster.client.connection import connect

pytestmark = pytest.mark.cluster

MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/placer-dev"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/placer-dev"
EXAMPLES = REPO / "docs/examples/first-policy"


def exists(api: KubeApi, path: str) -> bool:
    try:
        api.get(path)
    except ApiError as error:
        if error.code == 404:
            return False
        raise
    return True


def dry_run_template(api: KubeApi, namespace: str, deployment: dict[str, Any]) -> dict[str, Any]:
    created = api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment, {"dryRun": "All"})
    return dict(created["spec"]["template"])


def documented_get(name: str) -> list[str]:
    """The `kubectl get schedulingpolicy gpu-pool` docs/getting-started.md shows, as words, for `name`."""
    shown = shown_output(REPO / "docs/getting-started.md", "kubectl get schedulingpolicy gpu-pool").splitlines()
    return [*shown[0].split(), *shown[1].replace("gpu-pool", name).split()]


def kubectl_get(kubeconfig: Path, name: str) -> list[str]:
    """What kubectl prints for the policy, as words (AGE last)."""
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is not on PATH: this test compares what kubectl prints with the docs")
    printed = subprocess.run([binary, "--kubeconfig", str(kubeconfig), "get", "schedulingpolicy", name],
                             capture_output=True, text=True, check=False).stdout
    return re.split(r"\s+", printed.strip())


def test_dev_install_mutates_the_first_policy_deployment_and_removes_itself(tmp_path: Path) -> None:
    kubeconfig = Path(os.environ[KUBECONFIG_ENV])
    api = KubeApi(connect(kubeconfig), timeouts=Timeouts(connect=5, read=30))
    run = uuid.uuid4().hex[:6]
    namespace, policy_name = f"placer-e2e-dev-{run}", f"placer-e2e-dev-{run}"
    command = [sys.executable, "-m", "webhook", "dev", "--kube", "--keep-crd", "--no-reports",
               "--kubeconfig", str(kubeconfig),
               "--port", os.environ.get("PLACER_E2E_DEV_PORT", "9444"), "--certs", str(tmp_path / "certs")]
    if os.environ.get("PLACER_E2E_WEBHOOK_HOST"):
        command += ["--host", os.environ["PLACER_E2E_WEBHOOK_HOST"]]
    dev = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: dev.poll() is not None or exists(api, MUTATING), timeout=90, what="placer-dev webhooks")
        assert dev.poll() is None, dev.communicate()[0].decode()
        url = api.get(MUTATING)["webhooks"][0]["clientConfig"]["url"]
        assert url.endswith("/mutate") and url.startswith("https://")

        # The README's first policy, selecting only this run's namespace.
        policy = yaml.safe_load((EXAMPLES / "gpu-pool.yaml").read_text())
        policy["metadata"]["name"] = policy_name
        policy["spec"]["namespaceSelector"] = {"matchLabels": {"placer-e2e-dev": run}}
        api.create(POLICIES, policy)
        shown = documented_get(policy_name)
        wait_until(lambda: kubectl_get(kubeconfig, policy_name)[:-1] == shown[:-1], timeout=90,
                   what=f"kubectl get schedulingpolicy to show {shown[:-1]} (docs/getting-started.md)")
        api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": namespace, "labels": {"placer-e2e-dev": run, "placer.dev/inject": "enabled"}}})
        deployment = yaml.safe_load((EXAMPLES / "train.yaml").read_text())
        deployment["metadata"]["namespace"] = namespace

        template = wait_until(
            lambda: (t := dry_run_template(api, namespace, deployment))["spec"].get("nodeSelector") and t,
            timeout=60, what=f"the API server to call {url} with the policy served")
        spec = template["spec"]
        assert spec["nodeSelector"] == {"node-pool": "gpu"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert spec["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
        assert template["metadata"]["annotations"]["placer.dev/applied"] == (
            f"{policy_name}/gpu-nodes,{policy_name}/tolerate-gpu-taint,{policy_name}/spread-replicas")
    finally:
        for path in (f"{POLICIES}/{policy_name}", f"/api/v1/namespaces/{namespace}"):
            try:
                api.delete(path)
            except ApiError as error:
                if error.code != 404:
                    raise
        if dev.poll() is None:
            dev.send_signal(signal.SIGINT)
        output = dev.communicate(timeout=90)[0].decode()
    try:
        assert dev.returncode == 0, output
        assert not exists(api, MUTATING)
        assert not exists(api, VALIDATING)
    finally:
        api.close()
