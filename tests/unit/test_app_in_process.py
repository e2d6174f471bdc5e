"""The application without a server (tests.rsgi_client): readiness, /validate, fail-open, the opt-in mode,
the refusals of a body, and the admission recorded once it is answered."""

import json
import logging
from typing import Any

from tests.conftest import fixture_request
from tests.helpers import snapshot_of
from tests.rsgi_client import AppClient
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot, SnapshotHolder
from webhook.server.app import create_app
from webhook.support.config import Settings
from webhook.support.logs import ADMISSION_LOGGER
from webhook.support.metrics import Metrics

POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: p}
spec:
  rules:
  - {name: r, action: add-node-selector, parameters: {pool: x}}
"""


def client(snapshot: PolicySnapshot, **settings: Any) -> Any:
    app = create_app(holder=SnapshotHolder(snapshot), settings=Settings(**settings), metrics=Metrics())
    return AppClient(app)


def test_readyz_reflects_whether_policies_are_loaded() -> None:
    snapshot = snapshot_of(POLICY)
    assert client(snapshot).get("/readyz").status_code == 200
    not_ready = PolicySnapshot.build([], {}, [], snapshot.environment, ready=False)
    assert client(not_ready).get("/readyz").status_code == 503


def test_validate_denies_a_broken_policy_with_every_error_and_admits_a_good_one() -> None:
    body = fixture_request("deployment-create-dryrun")
    request = body["request"]
    request["kind"] = {"group": "placer.dev", "version": "v1alpha1", "kind": "SchedulingPolicy"}
    request["object"] = {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "x"},
                         "spec": {"rules": [{"name": "a", "condition": "replica > 1", "action": "add-labels",
                                             "parameters": {"k": "v"}}, {"name": "b", "action": "nope"}]}}
    app = client(snapshot_of(POLICY))
    response = app.post("/validate", json=body).get_json()["response"]
    status = response["status"]
    assert response["allowed"] is False and (status["code"], status["reason"]) == (422, "Invalid")
    message = status["message"]
    assert message.startswith('SchedulingPolicy.placer.dev "x" is invalid: 2 error(s): ')
    causes = status["details"]["causes"]
    assert [(c["field"], c["message"].split(" (known")[0]) for c in causes] == [
        ("spec.rules[0].condition", "rule a: <input>:1:1: undeclared reference to 'replica'"),
        ("spec.rules[1].action", "rule b: unknown action 'nope'"),
    ]
    assert all(c["reason"] == "FieldValueInvalid" for c in causes)
    assert status["details"]["kind"] == "SchedulingPolicy" and status["details"]["group"] == "placer.dev"
    request["object"]["spec"]["rules"] = [{"name": "a", "action": "add-labels", "parameters": {"k": "v"}}]
    assert app.post("/validate", json=body).get_json()["response"] == {"uid": request["uid"], "allowed": True}


def test_label_or_annotation_opt_in_passes_through_namespaces_without_either() -> None:
    opted = NamespaceInfo("team-a", annotations={"placer.dev/inject": "enabled"})
    body = fixture_request("pod-bare-create-dryrun")
    mode = {"opt_in": "label-or-annotation"}
    assert "patch" in client(snapshot_of(POLICY, namespaces=[opted]), **mode).post("/mutate", json=body).get_json()[
        "response"]
    plain = NamespaceInfo("team-a")
    assert "patch" not in client(snapshot_of(POLICY, namespaces=[plain]), **mode).post("/mutate", json=body).get_json()[
        "response"]
    assert "patch" in client(snapshot_of(POLICY, namespaces=[plain])).post("/mutate", json=body).get_json()["response"]


def test_object_placer_cannot_handle_is_admitted_with_a_warning() -> None:
    body = fixture_request("pod-bare-create-dryrun")
    body["request"]["kind"] = {"group": "", "version": "v1", "kind": "ConfigMap"}
    response = client(snapshot_of(POLICY)).post("/mutate", json=body).get_json()["response"]
    assert response["allowed"] is True and "patch" not in response
    assert response["warnings"] == ["placer: ConfigMap is not a workload kind Placer handles; admitted unchanged"]


def test_hostile_object_shapes_fail_open() -> None:
    app = client(snapshot_of(POLICY))
    for spec in ("a string", [1, 2], {"containers": "x", "tolerations": 5, "nodeSelector": [1]}, None):
        body = fixture_request("pod-bare-create-dryrun")
        body["request"]["object"]["spec"] = spec
        reply = app.post("/mutate", json=body)
        assert reply.status_code == 200
        assert reply.get_json()["response"]["allowed"] is True


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _admissions_counted(metrics: Metrics) -> float:
    samples = [line for line in metrics.render()[0].decode().splitlines()
               if line.startswith("placer_admission_requests_total{")]
    return sum(float(line.split()[-1]) for line in samples)


def test_the_admission_is_logged_and_counted_once_its_response_is_handed_over(caplog: Any) -> None:
    """The API server waits for the response, not for Placer's bookkeeping: the log line and the metrics
    are written after the response is handed to the server, and a failure there costs no response."""
    metrics = Metrics()
    app = create_app(holder=SnapshotHolder(snapshot_of(POLICY)), settings=Settings(), metrics=metrics)
    lines = _Lines()
    admission_logger = logging.getLogger(ADMISSION_LOGGER)
    level = admission_logger.level
    admission_logger.addHandler(lines)
    admission_logger.setLevel(logging.INFO)
    seen_when_answered: list[tuple[int, float]] = []
    try:
        client = AppClient(app)
        original = app.reviews.reply

        def reply(*args: Any) -> Any:
            answer = original(*args)
            seen_when_answered.append((len(lines.records), _admissions_counted(metrics)))
            return answer

        app.reviews.reply = reply  # type: ignore[method-assign]
        response = client.post("/mutate?timeout=10s", json=fixture_request("pod-bare-create-dryrun"))
        answered = response.get_json()
        assert "patch" in answered["response"]
        assert seen_when_answered == [(0, 0)]  # nothing written when the reply was made
        assert [record.getMessage() for record in lines.records] == ["admission"]
        assert lines.records[0].fields["uid"] == answered["response"]["uid"]  # type: ignore[attr-defined]
        assert lines.records[0].fields["applied"] == ["p/r"]  # type: ignore[attr-defined]
        assert _admissions_counted(metrics) == 1

        metrics.observe_admission = None  # type: ignore[assignment,method-assign]  # recording now fails
        response = client.post("/mutate", json=fixture_request("pod-bare-create-dryrun"))
        assert response.status_code == 200 and "patch" in response.get_json()["response"]
        assert "recording an admission that was answered" in caplog.text
    finally:
        admission_logger.removeHandler(lines)
        admission_logger.setLevel(level)


def test_bodies_over_the_limit_are_refused_unkept_and_bad_requests_get_precise_errors() -> None:
    client = AppClient(create_app(holder=SnapshotHolder(snapshot_of(POLICY)), settings=Settings(max_body_bytes=1000),
                                  metrics=Metrics()))
    review = json.dumps(fixture_request("pod-bare-create-dryrun"))
    over = client.post("/mutate", data=review + " " * 1000, content_type="application/json")
    assert over.status_code == 413 and "exceeds the 1000 byte limit" in over.get_json()["error"]
    assert over.headers["connection"] == "close"
    chunked = client.post("/mutate", data=review + " " * 1000, content_type="application/json", chunked=True)
    assert chunked.status_code == 413 and over.headers["connection"] == "close"
    assert client.post("/mutate", data="{}", content_type="text/plain").status_code == 415
    assert client.get("/mutate").status_code == 405 and client.get("/mutate").headers["allow"] == "POST"
    assert client.post("/healthz").status_code == 405
    assert client.get("/nowhere").status_code == 404
    assert client.get("/healthz").text == "ok\n"
