"""`placer dev --kube` against the fake API server, which calls validating webhooks as kube-apiserver does
(`fake_admission`): what it installs, that the API server reaches it at the address it chose with no flag
given, that it never deletes a CRD holding the user's objects, that it removes what it made (and only that),
and that docs/getting-started.md shows what it prints."""

import base64
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.conftest import REPO, fixture_request
from tests.e2e.server import free_port
from tests.kube.fake_apiserver import DEPLOYMENTS, NAMESPACES, POLICIES, REPORTS_API, FakeApiServer, wait_for
from webhook.cluster.client.api import ApiError, KubeApi
from webhook.cluster.registration import covered
from webhook.commands.dev.manifests import (
    CRD_PATH,
    MUTATING_PATH,
    VALIDATING_PATH,
    dev_manifests,
    labelled_crd,
)
from webhook.commands.dev.reach import PROBE_NAME, candidate_hosts

pytestmark = pytest.mark.e2e

CRD_NAME = "schedulingpolicies.placer.dev"
REPORT_CRDS = ("policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io")
CLUSTER_REPORTS = f"{REPORTS_API}/clusterpolicyreports"
GETTING_STARTED = REPO / "docs/getting-started.md"


def base_webhooks() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all((REPO / "deploy/base/webhooks.yaml").read_text()) if doc}


def crd_document(path: str) -> dict[str, Any]:
    return next(doc for doc in yaml.safe_load_all((REPO / path).read_text()) if doc)


def policy(name: str, condition: str = "true") -> dict[str, Any]:
    return {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": name},
            "spec": {"rules": [{"name": "pool", "condition": condition, "action": "add-node-selector",
                                "parameters": {"node-pool": "gpu"}}]}}


def put_workload(apiserver: FakeApiServer) -> None:
    """A Deployment for the reports to judge (with none, there is nothing to report)."""
    apiserver.put_namespace("team-a")
    apiserver.put(DEPLOYMENTS, {
        "metadata": {"name": "web", "namespace": "team-a", "labels": {"app": "web"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})


def start_dev(kubeconfig: Path, tmp_path: Path, *flags: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": ""}
    env.pop("POD_NAMESPACE", None)
    command = [sys.executable, "-m", "webhook", "dev", "--kube", "--kubeconfig", str(kubeconfig), "--port",
               str(port), "--address", "127.0.0.1", "--certs", str(tmp_path / "dev-certs"), *flags]
    return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True), port


def stop(dev: subprocess.Popen[str]) -> str:
    if dev.poll() is None:
        dev.send_signal(signal.SIGTERM)
    return dev.communicate(timeout=90)[0]


def said(output: str, apiserver: FakeApiServer, port: int) -> list[str]:
    """`placer dev`'s own lines, with the test's ports written as the docs write them."""
    return [line.replace(apiserver.url, "https://127.0.0.1:6443").replace(f":{port}", ":9443")
            for line in output.splitlines() if line.startswith("placer dev: ")]


def documented_session() -> list[str]:
    """The `placer dev` session docs/getting-started.md shows."""
    blocks = re.findall(r"^```text\n(.*?)^```", GETTING_STARTED.read_text(), re.S | re.M)
    return next(block.splitlines() for block in blocks if block.startswith("placer dev: "))


def served_webhooks(apiserver: FakeApiServer) -> dict[str, Any]:
    return wait_for(lambda: apiserver.other.get(MUTATING_PATH, {}).get("placer-dev"), timeout=90,
                    what="the MutatingWebhookConfiguration")


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
    # the CRD as deploy/base has it, labelled as placer dev's; the report CRDs of the component with --reports
    assert rendered["CustomResourceDefinition"]["spec"] == crd_document("deploy/base/crd.yaml")["spec"]
    assert rendered["CustomResourceDefinition"]["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "placer-dev"
    with_reports = dev_manifests(REPO / "deploy/base", "https://10.0.0.5:9443", "Q0E=", reports=True)
    assert [d["metadata"]["name"] for d in with_reports if d["kind"] == "CustomResourceDefinition"] == \
        [CRD_NAME, *REPORT_CRDS]


def rules_of(apiserver: FakeApiServer) -> list[Any]:
    return [webhook.get("rules") for webhook in apiserver.other[MUTATING_PATH]["placer-dev"]["webhooks"]]


def test_a_loopback_api_server_needs_no_flag_and_the_users_policies_survive_the_stop(
        apiserver: FakeApiServer, kubeconfig: Path, api: KubeApi, tmp_path: Path) -> None:
    """The first hour: no --host (the API server is on 127.0.0.1, as a local kube-apiserver is), reports on
    by default; the user's policy is refused when broken and kept when good, and still there after Ctrl-C."""
    assert candidate_hosts(apiserver.url)[0] == "127.0.0.1"
    put_workload(apiserver)
    dev, port = start_dev(kubeconfig, tmp_path)
    try:
        mutating = served_webhooks(apiserver)
        validating = wait_for(lambda: apiserver.other.get(VALIDATING_PATH, {}).get("placer-dev"), timeout=10,
                              what="the ValidatingWebhookConfiguration")
        assert PROBE_NAME not in apiserver.other[VALIDATING_PATH]  # the probe is gone once it answered
        assert {CRD_NAME, *REPORT_CRDS} <= set(apiserver.other[CRD_PATH])
        assert "placer-system" in apiserver.objects[NAMESPACES]
        client = mutating["webhooks"][0]["clientConfig"]
        assert client["url"] == f"https://127.0.0.1:{port}/mutate"
        assert validating["webhooks"][0]["clientConfig"]["url"] == f"https://127.0.0.1:{port}/validate"
        ca = tmp_path / "ca-from-bundle.crt"
        ca.write_bytes(base64.b64decode(client["caBundle"]))
        assert ca.read_bytes() == (tmp_path / "dev-certs" / "ca.crt").read_bytes()
        review = requests.post(client["url"], json=fixture_request("pod-bare-create-dryrun"), verify=str(ca),
                               timeout=10).json()
        assert review["response"]["allowed"] is True
        assert "patch" not in review["response"]  # no example policies unless asked

        # No policy yet: placer-dev is narrowed to nothing (as the deployed Placer keeps `placer`'s rules)
        wait_for(lambda: rules_of(apiserver) == [[], []], timeout=30, what="placer-dev narrowed")

        # The API server calls the validating webhook it was given: a broken policy is refused, a good one kept.
        with pytest.raises(ApiError) as refused:
            api.create(POLICIES, policy("broken", condition="replicas > 1"))
        assert refused.value.code == 422
        assert 'admission webhook "validate.placer.dev" denied the request' in refused.value.message
        api.create(POLICIES, policy("gpu-pool"))
        # The controller's Lease goes where the docs say; the reports are on (the cluster report is written).
        wait_for(lambda: "placer-status-writer" in apiserver.leases, timeout=30, what="the Lease")
        wait_for(lambda: (apiserver.other.get(CLUSTER_REPORTS) or {}).get("placer"), timeout=60,
                 what="the ClusterPolicyReport")
        # its rules kept to what the policies act on, as the deployed Placer keeps `placer`'s: gpu-pool's
        installed = [covered(webhook["rules"]) for webhook in mutating["webhooks"]]
        wait_for(lambda: [covered(rules) for rules in rules_of(apiserver)] == installed, timeout=30,
                 what="placer-dev widened for gpu-pool (every kind)")
    finally:
        output = stop(dev)
    assert dev.returncode == 0, output
    assert "placer-dev" not in apiserver.other.get(MUTATING_PATH, {})
    assert "placer-dev" not in apiserver.other.get(VALIDATING_PATH, {})
    assert CRD_NAME in apiserver.other[CRD_PATH]  # it holds the user's policy
    assert "gpu-pool" in apiserver.objects[POLICIES]
    assert not set(REPORT_CRDS) & set(apiserver.other[CRD_PATH])  # they held only Placer's own reports
    assert "placer-system" not in apiserver.objects[NAMESPACES]
    deletes = [path for method, path, _ in apiserver.requests if method == "DELETE"]
    assert deletes.index(f"{MUTATING_PATH}/placer-dev") < deletes.index(f"{CRD_PATH}/{REPORT_CRDS[0]}")
    assert said(output, apiserver, port) == documented_session()


def test_what_was_there_stays_and_only_the_sessions_reports_go(
        apiserver: FakeApiServer, kubeconfig: Path, tmp_path: Path) -> None:
    """A CRD and namespace installed before, and report CRDs another tool installed and writes to: all left,
    even with --delete-crd; the reports Placer wrote during the session are deleted. --host tried in order."""
    apiserver.put_readable(CRD_PATH, crd_document("deploy/base/crd.yaml"))
    for name in ("policyreports.yaml", "clusterpolicyreports.yaml"):
        apiserver.put_readable(CRD_PATH, crd_document(f"deploy/components/policy-reports/{name}"))
    apiserver.reports_served = True
    kyverno = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "ClusterPolicyReport",
               "metadata": {"name": "kyverno", "labels": {"app.kubernetes.io/managed-by": "kyverno"}}}
    apiserver.put_readable(CLUSTER_REPORTS, kyverno)
    apiserver.put_namespace("placer-system")
    put_workload(apiserver)
    dev, port = start_dev(kubeconfig, tmp_path, "--host", "127.0.0.2", "--host", "127.0.0.1", "--delete-crd")
    try:
        mutating = served_webhooks(apiserver)
        assert mutating["webhooks"][0]["clientConfig"]["url"] == f"https://127.0.0.1:{port}/mutate"
        wait_for(lambda: (apiserver.other.get(CLUSTER_REPORTS) or {}).get("placer"), timeout=60,
                 what="the ClusterPolicyReport")
    finally:
        output = stop(dev)
    assert dev.returncode == 0, output
    assert "placer-dev" not in apiserver.other[MUTATING_PATH]
    assert {CRD_NAME, *REPORT_CRDS} <= set(apiserver.other[CRD_PATH])
    assert "placer-system" in apiserver.objects[NAMESPACES]
    assert set(apiserver.other[CLUSTER_REPORTS]) == {"kyverno"}
    lines = said(output, apiserver, port)
    assert f"placer dev: CustomResourceDefinition {CRD_NAME} exists; left as it is" in lines
    assert "placer dev: deleted clusterpolicyreport placer, written during this session" in lines
    unreachable = next(line for line in lines if "127.0.0.2" in line)
    assert unreachable.startswith("placer dev: the API server cannot reach https://127.0.0.2:9443: ")
    assert "connection refused" in unreachable.lower()


def test_no_reachable_address_is_said_and_a_crd_placer_dev_kept_goes_with_delete_crd(
        apiserver: FakeApiServer, kubeconfig: Path, tmp_path: Path) -> None:
    """Exit 1 naming what was tried and what to give, with nothing left behind; a CRD an earlier session kept
    (labelled placer-dev) is brought up to date, and --delete-crd deletes it with the policies in it."""
    apiserver.put_readable(CRD_PATH, labelled_crd(crd_document("deploy/base/crd.yaml")))
    apiserver.put_policy(policy("left-from-yesterday"))
    dev, _ = start_dev(kubeconfig, tmp_path, "--host", "127.0.0.2", "--no-reports", "--delete-crd")
    output = dev.communicate(timeout=120)[0]
    assert dev.returncode == 1, output
    assert "placer dev: the API server reaches none of 127.0.0.2 on port" in output
    assert "give --host" in output
    assert f"placer dev: updated CustomResourceDefinition {CRD_NAME}, kept by an earlier placer dev" in output
    assert (f"placer dev: deleted CustomResourceDefinition {CRD_NAME} with its 1 SchedulingPolicy"
            in output)
    assert CRD_NAME not in apiserver.other[CRD_PATH]
    assert apiserver.objects[POLICIES] == {}
    assert not set(REPORT_CRDS) & set(apiserver.other[CRD_PATH])  # --no-reports
    for collection in (MUTATING_PATH, VALIDATING_PATH):
        assert not apiserver.other.get(collection)
    assert "placer-system" not in apiserver.objects[NAMESPACES]


def test_candidates_start_with_the_route_to_the_api_server_and_end_with_container_host_names() -> None:
    assert candidate_hosts("https://127.0.0.1:6443", lambda: ["192.168.1.20", "172.18.0.1"]) == [
        "127.0.0.1", "192.168.1.20", "172.18.0.1", "host.docker.internal", "host.minikube.internal"]
    routed = candidate_hosts("https://192.0.2.10:6443", lambda: [])  # TEST-NET-1: by the default route, if any
    assert routed[-2:] == ["host.docker.internal", "host.minikube.internal"]
    assert all(not host.startswith("127.") for host in routed)
