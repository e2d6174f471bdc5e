"""The real server (granian, TLS) answering the API server's own requests."""

import contextlib
import http.client
import json
import socket
import ssl
import time
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest

from tests.conftest import REPO, all_fixture_requests, fixture_request
from tests.e2e.server import RunningServer, copy_policies, running_server
from tests.helpers import decode_patch, read_yaml, review_for

pytestmark = pytest.mark.e2e

SECRET = "s3cr3t-token-value-do-not-log"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, certificates: Any) -> Iterator[RunningServer]:
    workdir = tmp_path_factory.mktemp("serve")
    with running_server(workdir, certificates, policies=copy_policies(workdir)) as running:
        yield running


@pytest.mark.parametrize("path", all_fixture_requests(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_captured_request_gets_a_valid_answer(server: RunningServer, path: Path) -> None:
    captured = json.loads(path.read_text())
    body = captured["body"]
    response = server.post(captured["path"], data=json.dumps(body), headers=captured["headers"] | {"Host": "x"})

    assert response.status_code == 200
    review = response.json()
    assert review["apiVersion"] == body["apiVersion"] and review["kind"] == "AdmissionReview"
    assert review["response"]["uid"] == body["request"]["uid"]
    assert review["response"]["allowed"] is True
    patch = decode_patch(review)
    if patch:
        assert review["response"]["patchType"] == "JSONPatch"
        mutated = jsonpatch.apply_patch(body["request"]["object"], patch)
        kubernetes_validate.validate(mutated, "1.34.0", strict=True)
    else:
        assert "patch" not in review["response"] and "patchType" not in review["response"]


def test_deployment_in_production_namespace_gets_the_org_policy(server: RunningServer) -> None:
    body = fixture_request("deployment-create-real")
    review = server.post("/mutate?timeout=5s", json=body).json()
    mutated = jsonpatch.apply_patch(body["request"]["object"], decode_patch(review))
    template = mutated["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {"environment": "production"}
    assert {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in template["spec"][
        "tolerations"
    ]
    assert template["metadata"]["annotations"]["placer.dev/applied"].startswith("org-wide-policy/production-isolation")
    applied = template["metadata"]["annotations"]["placer.dev/applied"]
    assert review["response"]["auditAnnotations"]["applied"] == applied


def test_v1beta1_review_is_answered_in_v1beta1(server: RunningServer) -> None:
    body = fixture_request("pod-bare-create-dryrun")
    body["apiVersion"] = "admission.k8s.io/v1beta1"
    review = server.post("/mutate", json=body).json()
    assert review["apiVersion"] == "admission.k8s.io/v1beta1"
    assert review["response"]["uid"] == body["request"]["uid"]


def test_update_that_does_not_touch_the_template_gets_no_patch(server: RunningServer) -> None:
    review = server.post("/mutate", json=fixture_request("deployment-update-label-real")).json()
    assert "patch" not in review["response"]
    assert review["response"]["allowed"] is True


@pytest.mark.parametrize(
    ("method", "kwargs", "status", "fragment"),
    [
        ("get", {}, 405, "not allowed"),
        ("post", {"data": "{}", "headers": {"Content-Type": "text/plain"}}, 415, "application/json"),
        ("post", {"data": "{not json", "headers": {"Content-Type": "application/json"}}, 400, "invalid JSON"),
        ("post", {"json": [1, 2]}, 400, "JSON object"),
        ("post", {"json": {"kind": "Pod", "apiVersion": "v1"}}, 400, "kind must be AdmissionReview"),
        ("post", {"json": {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}}}, 400,
         "request.uid"),
    ],
)
def test_bad_requests_get_precise_http_errors(server: RunningServer, method: str, kwargs: dict[str, Any],
                                              status: int, fragment: str) -> None:
    response = getattr(server, method)("/mutate", **kwargs)
    assert response.status_code == status
    assert fragment in response.json()["error"]
    assert "Traceback" not in response.text


def test_body_over_8_mib_is_refused_with_413(server: RunningServer) -> None:
    response = server.post("/mutate", data=b"{" + b" " * (8 * 1024 * 1024 + 10) + b"}",
                           headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert "exceeds" in response.json()["error"]


@pytest.mark.parametrize("exchanges", [
    [("application/json", 200)] * 20,
    # a refused request's body (415: not read) is drained before the connection's next request
    [("text/plain", 415), ("application/json", 200)] * 3,
], ids=["reviews", "refused-then-answered"])
def test_connections_are_kept_alive_across_requests(server: RunningServer, exchanges: list[tuple[str, int]]) -> None:
    host, port = server.url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=str(server.ca))
    connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
    review = json.dumps(fixture_request("pod-bare-create-dryrun"))
    connection.connect()
    first_socket = connection.sock
    for content_type, status in exchanges:
        connection.request("POST", "/mutate?timeout=5s", body=review, headers={"Content-Type": content_type})
        reply = connection.getresponse()
        answer = json.loads(reply.read())
        assert reply.status == status, answer
        assert ("response" in answer) == (status == 200)
        assert connection.sock is first_socket  # http.client reconnects (new socket) if the server closed it
    connection.close()


def test_tls_is_at_least_1_2_with_forward_secret_ciphers(server: RunningServer) -> None:
    host, port = server.url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=str(server.ca))
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection((host, int(port))) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
        assert tls.version() == "TLSv1.2"
        cipher = tls.cipher()
        assert cipher is not None and cipher[0].startswith("ECDHE") and ("GCM" in cipher[0] or "CHACHA" in cipher[0])
    old = ssl.create_default_context(cafile=str(server.ca))
    with warnings.catch_warnings():  # the client side of TLS 1.1 is deprecated in Python too
        warnings.simplefilter("ignore", DeprecationWarning)
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    with pytest.raises(ssl.SSLError), socket.create_connection((host, int(port))) as raw:
        old.wrap_socket(raw, server_hostname=host)


def test_health_readiness_and_metrics_across_workers(server: RunningServer) -> None:
    for _ in range(6):
        assert server.post("/mutate", json=fixture_request("deployment-create-dryrun")).status_code == 200
    assert server.get("/healthz").status_code == 200
    assert server.get("/readyz").status_code == 200
    metrics = server.get("/metrics").text
    series = 'placer_admission_requests_total{kind="Deployment",operation="CREATE",result="patched"}'
    counted = [line for line in metrics.splitlines() if line.startswith(series)]
    assert counted and float(counted[0].split()[-1]) >= 6
    # the multiprocess collector writes label names in sorted order
    assert 'placer_rule_evaluations_total{outcome="applied",policy="org-wide-policy",rule="multi-zone-ha"}' in metrics
    assert "placer_admission_duration_seconds_bucket" in metrics
    shipped = sum(1 for path in (REPO / "policies").glob("*.yaml") if "kind: SchedulingPolicy" in path.read_text())
    assert f'placer_policies{{state="ready"}} {shipped}.0' in metrics


def test_logs_are_json_lines_without_object_bodies(server: RunningServer) -> None:
    body = fixture_request("pod-bare-create-dryrun")
    body["request"]["object"]["spec"]["containers"][0]["env"] = [{"name": "API_TOKEN", "value": SECRET}]
    assert server.post("/mutate", json=body).status_code == 200
    time.sleep(0.3)
    lines = server.log_text().splitlines()
    admissions = [json.loads(line) for line in lines if '"placer.admission"' in line]
    assert any(entry["uid"] == body["request"]["uid"] for entry in admissions)
    entry = next(entry for entry in admissions if entry["uid"] == body["request"]["uid"])
    assert {"kind", "namespace", "name", "operation", "dryRun", "applied", "warnings", "durationMs"} <= set(entry)
    assert SECRET not in server.log_text()


def test_each_worker_serves_on_the_standard_event_loop(server: RunningServer) -> None:
    """Named in `placer serve`, not left to granian's `auto`, which would take rloop or uvloop if installed."""
    loops = [json.loads(line)["message"] for line in server.log_text().splitlines() if " serves on " in line]
    assert len(loops) >= 2, server.log_text()[-2000:]
    assert all(message.endswith("serves on asyncio.unix_events._UnixSelectorEventLoop") for message in loops), loops


@pytest.mark.parametrize("namespace,obj,where,key,value", [
    ("spark", "sparkapplication", ("spec", "executor", "annotations"),
     "scheduling.volcano.sh/group-min-member", "10"),  # the executors: the driver starts by itself
    ("training", "pytorchjob", ("spec", "pytorchReplicaSpecs", "Worker", "template", "metadata", "labels"),
     "pod-group.scheduling.kubenexus.io/min-available", "9"),
    ("ray", "raycluster", ("spec", "workerGroupSpecs", 1, "template", "metadata", "annotations"),
     "yunikorn.apache.org/task-group-name", "cpu-group"),
    ("serving", "statefulset", ("spec", "template", "metadata", "annotations"),
     "kueue.x-k8s.io/pod-group-total-count", "3"),
    ("batch", "jobset", ("spec", "replicatedJobs", 1, "template", "spec", "template", "metadata", "labels"),
     "scheduling.x-k8s.io/pod-group", "tpu-train"),
])
def test_gang_examples_over_https(server: RunningServer, namespace: str, obj: str, where: tuple[Any, ...],
                                  key: str, value: str) -> None:
    """Each shipped gang policy, answered by the real server for a real-shaped workload of its namespace."""
    given = read_yaml(Path(__file__).parent.parent / "gang" / "objects" / f"{obj}.yaml")
    given["metadata"]["namespace"] = namespace
    review = server.post("/mutate?timeout=5s", json=review_for(given, namespace=namespace)).json()
    assert review["response"]["allowed"] is True
    node: Any = jsonpatch.apply_patch(given, decode_patch(review))
    for step in where:
        node = node[step]
    assert node[key] == value


def _raw_exchange(server: RunningServer, head: bytes, body_chunks: Iterable[bytes] = ()) -> bytes:
    """Send a request head (and body chunks, as long as the server takes them); what the server answers."""
    host, port = server.url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=str(server.ca))
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(head)
        with contextlib.suppress(OSError):
            for chunk in body_chunks:
                tls.sendall(chunk)
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := tls.recv(65536):
                answer += chunk
    return answer


def test_a_body_announced_over_the_limit_is_refused_before_it_is_sent(server: RunningServer) -> None:
    """With `Expect: 100-continue` the client waits for the go-ahead: a 1 GiB Content-Length gets the 413 at
    once (no 100 Continue), and the connection is closed."""
    started = time.monotonic()
    answer = _raw_exchange(server, b"POST /mutate HTTP/1.1\r\nHost: placer\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: 1073741824\r\nExpect: 100-continue\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"100 Continue" not in answer and b"exceeds the 8388608 byte limit" in answer
    assert time.monotonic() - started < 5


def test_a_chunked_body_is_cut_at_the_limit(server: RunningServer) -> None:
    """No Content-Length: the server counts the chunks as they come and refuses the body once it passes 8 MiB,
    without keeping it (then drops what is still on its way, so the client reads the 413)."""
    chunk = b" " * 65536
    framed = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    answer = _raw_exchange(server, b"POST /mutate HTTP/1.1\r\nHost: placer\r\nContent-Type: application/json\r\n"
                                   b"Transfer-Encoding: chunked\r\n\r\n",
                           [b"1\r\n{\r\n", *[framed] * 160, b"1\r\n}\r\n0\r\n\r\n"])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"body exceeds the 8388608 byte limit" in answer
