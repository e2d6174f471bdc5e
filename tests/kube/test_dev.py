"""`placer dev --kube` against the fake API server: what it installs, that the API server could call it with
what it installed (URL, caBundle, certificate SAN), where its Lease goes, and that it removes what it made."""

import base64
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.conftest import fixture_request
from tests.e2e.server import free_port
from tests.kube.fake_apiserver import NAMESPACES, FakeApiServer, wait_for
from webhook.commands.dev import CRD_PATH, MUTATING_PATH, VALIDATING_PATH, DevError, dev_manifests, route_address

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CRD_NAME = "schedulingpolicies.placer.dev"


def base_webhooks() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all((REPO / "deploy/base/webhooks.yaml").read_text()) if doc}


def test_dev_manifests_keep_deploy_base_webhooks_and_change_only_client_config() -> None:
    rendered = {doc["kind"]: doc for doc in dev_manifests(REPO / "deploy/base", "https://10.0.0.5:9443", "Q0E=")}
    assert set(rendered) == {"CustomResourceDefinition", "MutatingWebhookConfiguration",
                             "ValidatingWebhookConfiguration"}
    for kind, base in base_webhooks().items():
        dev = rendered[kind]
        assert dev["metadata"]["name"] == "placer-dev"  # never the real install's `placer`
        for ours, theirs in zip(dev["webhooks"], base["webhooks"], strict=True):
            path = theirs["clientConfig"]["service"]["path"]
            assert ours["clientConfig"] == {"url": f"https://10.0.0.5:9443{path}", "caBundle": "Q0E="}
            assert {k: v for k, v in ours.items() if k != "clientConfig"} == \
                {k: v for k, v in theirs.items() if k != "clientConfig"}
    ipv6 = dev_manifests(REPO / "deploy/base", "https://[fd00::1]:9443", "Q0E=")
    assert ipv6[1]["webhooks"][0]["clientConfig"]["url"] == "https://[fd00::1]:9443/mutate"


def test_dev_kube_installs_by_url_serves_and_removes_what_it_made(
        apiserver: FakeApiServer, kubeconfig: Path, tmp_path: Path) -> None:
    port = free_port()
    certs = tmp_path / "dev-certs"
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": ""}
    env.pop("POD_NAMESPACE", None)
    dev = subprocess.Popen(
        [sys.executable, "-m", "webhook", "dev", "--kube", "--kubeconfig", str(kubeconfig), "--host", "127.0.0.1",
         "--port", str(port), "--address", "127.0.0.1", "--certs", str(certs)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        mutating = wait_for(lambda: apiserver.other.get(MUTATING_PATH, {}).get("placer-dev"), timeout=60,
                            what="the MutatingWebhookConfiguration")
        # created after the mutating one (deploy/base/webhooks.yaml's order)
        validating = wait_for(lambda: apiserver.other.get(VALIDATING_PATH, {}).get("placer-dev"), timeout=10,
                              what="the ValidatingWebhookConfiguration")
        assert CRD_NAME in apiserver.other[CRD_PATH]
        assert "placer-system" in apiserver.objects[NAMESPACES]

        client = mutating["webhooks"][0]["clientConfig"]
        assert client["url"] == f"https://127.0.0.1:{port}/mutate"
        assert validating["webhooks"][0]["clientConfig"]["url"] == f"https://127.0.0.1:{port}/validate"
        ca = tmp_path / "ca-from-bundle.crt"
        ca.write_bytes(base64.b64decode(client["caBundle"]))
        assert ca.read_bytes() == (certs / "ca.crt").read_bytes()

        # What the API server would do: call the URL, trusting only the caBundle, checking the SAN.
        review = requests.post(client["url"], json=fixture_request("pod-bare-create-dryrun"), verify=str(ca),
                               timeout=10).json()
        assert review["response"]["allowed"] is True
        assert "patch" not in review["response"]  # no example policies unless asked

        # The controller's Lease goes where the docs say, not into the kubeconfig's namespace.
        wait_for(lambda: "placer-status-writer" in apiserver.leases, timeout=30, what="the Lease")
        assert any(path.startswith("/apis/coordination.k8s.io/v1/namespaces/placer-system/leases")
                   for _, path, _ in apiserver.requests)
        # its rules kept to what the policies act on, as the deployed Placer keeps `placer`'s: none here
        wait_for(lambda: all(webhook.get("rules") == []
                             for webhook in apiserver.other[MUTATING_PATH]["placer-dev"]["webhooks"]),
                 timeout=30, what="placer-dev narrowed to what no policy acts on")
    finally:
        dev.send_signal(signal.SIGTERM)
        output = dev.communicate(timeout=60)[0].decode()
    assert dev.returncode == 0, output
    assert "placer-dev" not in apiserver.other.get(MUTATING_PATH, {})
    assert "placer-dev" not in apiserver.other.get(VALIDATING_PATH, {})
    assert CRD_NAME not in apiserver.other.get(CRD_PATH, {})
    assert "placer-system" not in apiserver.objects[NAMESPACES]
    deletes = [path for method, path, _ in apiserver.requests if method == "DELETE"]
    assert deletes.index(f"{MUTATING_PATH}/placer-dev") < deletes.index(f"{CRD_PATH}/{CRD_NAME}")


def test_dev_kube_leaves_a_crd_and_namespace_it_did_not_make(
        apiserver: FakeApiServer, kubeconfig: Path, tmp_path: Path) -> None:
    crd = next(doc for doc in yaml.safe_load_all((REPO / "deploy/base/crd.yaml").read_text()) if doc)
    apiserver.put_readable(CRD_PATH, crd)
    apiserver.put_namespace("placer-system")
    dev = subprocess.Popen(
        [sys.executable, "-m", "webhook", "dev", "--kube", "--kubeconfig", str(kubeconfig), "--host", "127.0.0.1",
         "--port", str(free_port()), "--address", "127.0.0.1", "--certs", str(tmp_path / "c")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: apiserver.other.get(MUTATING_PATH, {}).get("placer-dev"), timeout=60, what="the webhooks")
    finally:
        dev.send_signal(signal.SIGINT)
        output = dev.communicate(timeout=60)[0].decode()
    assert dev.returncode == 0, output
    assert "placer-dev" not in apiserver.other[MUTATING_PATH]
    assert CRD_NAME in apiserver.other[CRD_PATH]
    assert "placer-system" in apiserver.objects[NAMESPACES]
    assert "CustomResourceDefinition schedulingpolicies.placer.dev exists; left as it is" in output


def test_default_host_is_the_route_to_the_api_server_and_never_loopback() -> None:
    with pytest.raises(DevError, match=r"reached over loopback .* give --host"):
        route_address("https://127.0.0.1:6443")
    try:
        address = route_address("https://192.0.2.10:6443")  # TEST-NET-1: routed by the default route, if any
    except DevError as error:
        assert "no route to the API server" in str(error)
    else:
        assert not address.startswith("127.")
