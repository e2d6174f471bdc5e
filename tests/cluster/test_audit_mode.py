"""Audit mode on a living cluster: an Audit policy leaves a created Deployment and its Pods unchanged; the
answer the API server got for the Deployment and its PolicyReport hold the would-be patch; promoting the policy
to Advisory (one field) mutates the next create.

What Placer answered the API server is recorded by a webhook of this test's own (`placer-e2e-recorder`,
served here on PLACER_E2E_RECORDER_PORT, default 9446, for the test's namespace only) that forwards each
AdmissionReview the API server sends it to Placer and keeps Placer's response: the API server writes those
auditAnnotations to its audit log (prefixed with the webhook's name), which a test cannot read, and sends them
to no client. The API server calls it after Placer's own configuration (webhooks run in the order of their
configurations' names), on the same object.

Needs no feature gate. Needs the report CRDs (installed from deploy/components/policy-reports when absent, as
test_reports_drift.py does) and one schedulable node for the Pods. Runs against Placer started here or deployed
(PLACER_E2E_IN_CLUSTER=1: the recorder then forwards through the API server's proxy to the placer Service).
"""

import contextlib
import json
import os
import ssl
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.cluster.harness import E2E_NAME, MUTATING, Cluster, address_towards, wait_until
from tests.cluster.test_reports_drift import REPORTS, reports_installed  # noqa: F401  (a fixture)
from webhook.cluster.client.api import ApiError
from webhook.commands.certs import issue

pytestmark = pytest.mark.cluster

RECORDER = f"{E2E_NAME}-recorder"
POOL_KEY = "placer-e2e-pool"
TAINT_KEY = "placer-e2e/audited"
SERVICE_PROXY = "/api/v1/namespaces/placer-system/services/https:placer:443/proxy/mutate"


class Recorder:
    """An HTTPS webhook that forwards each review to Placer and keeps Placer's response by object name."""

    def __init__(self, cluster: Cluster, certs: Any, port: int) -> None:
        self.cluster = cluster
        self.responses: dict[str, dict[str, Any]] = {}
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                review = json.loads(body)
                answer = recorder.forward(review, self.path)
                obj = review["request"].get("object") or {}
                recorder.responses[(obj.get("metadata") or {}).get("name", "")] = answer
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(certs.cert), str(certs.key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def forward(self, review: dict[str, Any], path: str) -> dict[str, Any]:
        """Placer's answer to `review`: from the Placer started here, or through the API server's Service proxy."""
        if not self.cluster.placer_url:
            answer: dict[str, Any] = self.cluster.api.create(SERVICE_PROXY, review, {"timeout": "5s"})
            return answer
        context = ssl.create_default_context(cafile=str(self.cluster.placer_ca))
        request = urllib.request.Request(self.cluster.placer_url + path, data=json.dumps(review).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, context=context, timeout=5) as reply:
            found: dict[str, Any] = json.loads(reply.read())
            return found


@pytest.fixture
def recorder(cluster: Cluster, tmp_path: Path) -> Iterator[tuple[Recorder, str]]:
    """The recorder, registered for the namespaces labelled `placer-e2e-recorder=<id>`; yields it and the id."""
    host = cluster.webhook_host or os.environ.get("PLACER_E2E_WEBHOOK_HOST") or address_towards(
        cluster.connection.server)
    port = int(os.environ.get("PLACER_E2E_RECORDER_PORT", "9446"))
    certs = issue(tmp_path / "recorder", [host, "localhost", "127.0.0.1"], common_name=host)
    running = Recorder(cluster, certs, port)
    running.thread.start()
    tag = uuid.uuid4().hex[:6]
    config = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
              "metadata": {"name": RECORDER}, "webhooks": [{
                  "name": "recorder.placer-e2e.placer.dev", "admissionReviewVersions": ["v1"],
                  "sideEffects": "None", "failurePolicy": "Fail", "timeoutSeconds": 10,
                  "clientConfig": {"url": f"https://{host}:{port}/mutate", "caBundle": certs.ca_bundle()},
                  "namespaceSelector": {"matchLabels": {"placer-e2e-recorder": tag}},
                  "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
                             "resources": ["deployments"]}]}]}
    cluster.apply(MUTATING, config)
    try:
        yield running, tag
    finally:
        with contextlib.suppress(ApiError):
            cluster.api.delete(f"{MUTATING}/{RECORDER}")
        running.server.shutdown()
        running.server.server_close()


def spec(tag: str, enforcement: str) -> dict[str, Any]:
    return {"enforcement": enforcement, "namespaceSelector": {"matchLabels": {"placer-e2e-audit": tag}}, "rules": [
        {"name": "pool", "action": "add-node-selector", "parameters": {POOL_KEY: "audited"}},
        {"name": "taint", "action": "add-toleration",
         "parameters": {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}}]}


def deployment(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                    {"name": "main", "image": "registry.k8s.io/pause:3.10",
                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}}


def untouched(template: dict[str, Any]) -> bool:
    """Nothing of the Audit policy, nor Placer's mark, in a pod template or Pod."""
    pod_spec = template.get("spec") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return (POOL_KEY not in (pod_spec.get("nodeSelector") or {}) and "placer.dev/applied" not in annotations
            and not any(t.get("key") == TAINT_KEY for t in pod_spec.get("tolerations") or []))


def audit_results(cluster: Cluster, namespace: str, policy: str) -> dict[str, dict[str, Any]]:
    """rule → result of `policy` in the namespace's Deployment reports."""
    try:
        listed = cluster.api.get(f"{REPORTS}/namespaces/{namespace}/policyreports",
                                 {"labelSelector": "app.kubernetes.io/managed-by=placer"})
    except ApiError:
        return {}
    return {result["rule"]: result for report in listed.get("items") or []
            if (report.get("scope") or {}).get("kind") == "Deployment"
            for result in report.get("results") or [] if result.get("policy") == policy}


def test_an_audit_policy_records_its_patch_and_promoted_mutates_the_next_create(
        cluster: Cluster, recorder: tuple[Recorder, str], reports_installed: None) -> None:  # noqa: F811
    recording, tag = recorder
    namespace = cluster.namespace({"placer-e2e-audit": tag, "placer-e2e-recorder": tag})
    name = f"audit-{tag}"
    policy = f"{E2E_NAME}-{name}"
    cluster.policy(name, spec(tag, "Audit"))
    deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    try:
        created = cluster.api.create(deployments, deployment("audited"))
        assert untouched(created["spec"]["template"]), created["spec"]["template"]
        pods = wait_until(lambda: list(cluster.api.get(
            f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": "app=audited"})["items"]) or None,
            timeout=60, what="the audited Deployment's pods")
        assert all(untouched(pod) for pod in pods), [pod["spec"] for pod in pods]

        answer = recording.responses["audited"]["response"]
        assert answer["allowed"] is True and "patch" not in answer
        value = json.loads(answer["auditAnnotations"][f"audit-{policy}"])
        assert value["verdict"] == "would-change" and value["rules"] == ["pool", "taint"]
        would_be = jsonpatch.apply_patch(created, value["patch"])["spec"]["template"]["spec"]
        assert would_be["nodeSelector"][POOL_KEY] == "audited"
        assert {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in would_be["tolerations"]

        results = wait_until(lambda: (found := audit_results(cluster, namespace, policy)) and len(found) == 2
                             and found, timeout=60, what="the Audit policy's results in the Deployment's report")
        assert {rule: result["result"] for rule, result in results.items()} == {"pool": "warn", "taint": "warn"}
        assert results["pool"]["message"].startswith(f"audit: would add nodeSelector {POOL_KEY}=audited")
        assert results["pool"]["properties"]["enforcement"] == "Audit"
        reported = json.loads(results["pool"]["properties"]["patch"])
        assert {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {POOL_KEY: "audited"}} in reported

        cluster.policy(name, spec(tag, "Advisory"))  # promoted: one field
        promoted = cluster.api.create(deployments, deployment("promoted"))
        template = promoted["spec"]["template"]
        assert template["spec"]["nodeSelector"] == {POOL_KEY: "audited"}
        assert {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in template["spec"]["tolerations"]
        assert template["metadata"]["annotations"]["placer.dev/applied"] == f"{policy}/pool,{policy}/taint"
        assert f"audit-{policy}" not in (recording.responses["promoted"]["response"].get("auditAnnotations") or {})
    finally:
        cluster.delete_policy(name)
