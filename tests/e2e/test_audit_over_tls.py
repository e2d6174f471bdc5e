"""An Audit policy as the API server receives its answer over TLS from the real server: allowed, no patch, the
would-be patch in `auditAnnotations`, counted as `audit`; promoted (one field, picked up while running), the
next review gets that patch."""

import json
import shutil
import time
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import REPO
from tests.e2e.server import RunningServer, running_server
from tests.helpers import decode_patch, review_for

pytestmark = pytest.mark.e2e

EXAMPLES = REPO / "docs/examples/changing-policies/audit"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, certificates: Any) -> Iterator[RunningServer]:
    workdir = tmp_path_factory.mktemp("audit")
    policies = workdir / "policies"
    policies.mkdir()
    shutil.copy(EXAMPLES / "gpu-pool.yaml", policies)
    shutil.copy(EXAMPLES / "ml.yaml", policies)
    with running_server(workdir, certificates, policies=policies) as running:
        yield running


def train() -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((EXAMPLES / "train.yaml").read_text())
    return obj


def test_an_audit_policy_answers_without_a_patch_and_with_the_would_be_patch(server: RunningServer) -> None:
    body = review_for(train())
    reply = server.post("/mutate?timeout=5s", json=body)
    assert reply.status_code == 200
    response = reply.json()["response"]
    assert response["uid"] == body["request"]["uid"] and response["allowed"] is True
    assert "patch" not in response and "patchType" not in response and "warnings" not in response
    value = json.loads(response["auditAnnotations"]["audit-gpu-pool"])
    assert value["verdict"] == "would-change" and value["rules"] == ["gpu-nodes", "gpu-taint"]
    after = jsonpatch.apply_patch(train(), value["patch"])
    assert after["spec"]["template"]["spec"]["nodeSelector"] == {"node-pool": "gpu"}


def test_the_log_line_names_the_verdict_and_rules_never_the_patch(server: RunningServer) -> None:
    body = review_for(train())
    server.post("/mutate?timeout=5s", json=body)
    deadline = time.monotonic() + 5
    while not (entries := [json.loads(line) for line in server.log_text().splitlines()
                           if '"placer.admission"' in line and body["request"]["uid"] in line]):
        assert time.monotonic() < deadline, "no admission log line"
        time.sleep(0.1)
    assert entries[0]["audited"] == {"gpu-pool": {"verdict": "would-change", "rules": ["gpu-nodes", "gpu-taint"]}}
    assert "nodeSelector" not in json.dumps(entries[0])


def test_the_audited_rules_are_counted_as_audit(server: RunningServer) -> None:
    server.post("/mutate?timeout=5s", json=review_for(train()))
    metrics = server.get("/metrics").text
    audited = [line for line in metrics.splitlines() if line.startswith("placer_rule_evaluations_total")
               and 'outcome="audit"' in line and 'policy="gpu-pool"' in line]
    assert len(audited) == 2 and all(float(line.split()[-1]) >= 1 for line in audited), audited
    assert not [line for line in metrics.splitlines() if line.startswith("placer_rule_evaluations_total")
                and 'policy="gpu-pool"' in line and 'outcome="applied"' in line]


def test_promoted_in_place_the_next_review_is_mutated(server: RunningServer) -> None:
    policy = server.workdir / "policies" / "gpu-pool.yaml"
    policy.write_text(policy.read_text().replace("enforcement: Audit", "enforcement: Advisory"))
    deadline = time.monotonic() + 30
    while True:
        response = server.post("/mutate?timeout=5s", json=review_for(train())).json()["response"]
        if "patch" in response or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert response["auditAnnotations"] == {"applied": "gpu-pool/gpu-nodes,gpu-pool/gpu-taint"}
    mutated = jsonpatch.apply_patch(train(), decode_patch({"response": response}))
    assert mutated["spec"]["template"]["spec"]["nodeSelector"] == {"node-pool": "gpu"}
