"""`placer serve --kube` end to end: a rule that fails is seen in the warnings (over TLS, as the API server gets
them), in the log (whole), and in the policy's status, which the replica's own controller writes from what
its real workers counted."""

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fixture_request
from tests.e2e.server import RunningServer, running_server
from tests.kube.fake_apiserver import POLICIES, FakeApiServer, wait_for

pytestmark = pytest.mark.e2e

LONG_POLICY = "gpu-training-placement-for-the-research-teams-" + "x" * 170
FAILING = "spread-when-big"
"""Its condition divides by zero on every Deployment: a CEL error, the rule is skipped with a warning."""


def policy() -> dict[str, Any]:
    return {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": LONG_POLICY},
            "spec": {"rules": [
                {"name": FAILING, "condition": "1 / (object.spec.replicas - object.spec.replicas) > 0",
                 "action": "add-node-selector", "parameters": {"pool": "big"}},
                {"name": "ssd", "condition": "object.spec.template.spec.nodeSelector['disk'] == 'ssd'",
                 "action": "add-toleration",
                 "parameters": {"key": "disk", "operator": "Equal", "value": "ssd", "effect": "NoSchedule"}},
            ]}}


def healthy(apiserver: FakeApiServer) -> dict[str, Any]:
    status = apiserver.objects[POLICIES].get(LONG_POLICY, {}).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "Healthy"), {})


def admit(server: RunningServer) -> dict[str, Any]:
    body = fixture_request("deployment-create-dryrun")
    response = server.post("/mutate", json=body).json()["response"]
    assert response["allowed"] is True
    return dict(response)


def test_a_failing_rule_is_a_warning_a_log_line_and_a_condition(
        apiserver: FakeApiServer, kubeconfig: Path, certificates: Any, tmp_path: Path) -> None:
    namespace = fixture_request("deployment-create-dryrun")["request"]["namespace"]
    apiserver.put_namespace(namespace)
    apiserver.put_policy(policy())
    empty = tmp_path / "no-policies"
    empty.mkdir()
    with running_server(tmp_path, certificates, policies=empty,
                        extra=["--kube", "--kubeconfig", str(kubeconfig)],
                        env={"PLACER_HEALTH_INTERVAL": "0.5", "POD_NAME": "placer-e2e-0"}) as server:
        response = wait_for(lambda: (r := admit(server)).get("warnings") and r, timeout=10, what="a warning")
        (warning,) = response["warnings"]
        assert warning.startswith(f"placer: {LONG_POLICY}/{FAILING}: condition:"), "the rule first"
        assert len(warning) == 256 and warning.endswith("..."), "cut to what the API server keeps whole"
        for _ in range(5):  # six admissions the policy saw
            admit(server)

        time.sleep(0.3)
        logged = [json.loads(line) for line in server.log_text().splitlines() if '"placer.admission"' in line]
        whole = f"{LONG_POLICY}/{FAILING}: condition: divide by zero"
        assert any(whole in entry.get("warnings", []) for entry in logged), "the whole text is in the log"

        condition = wait_for(lambda: (c := healthy(apiserver)).get("reason") == "RuleErrors"
                             and "6 error(s)" in c["message"] and c, timeout=20, what="Healthy=False, RuleErrors")
        assert condition["status"] == "False"
        assert condition["message"] == (
            f"rule {LONG_POLICY}/{FAILING}: 6 error(s) in the last 15m; last: condition: divide by zero; "
            f"rule {LONG_POLICY}/ssd: 6 missing key(s) and never applied in the last 15m; "
            'last: Key not found in map : "nodeSelector"')
        recent = apiserver.objects[POLICIES][LONG_POLICY]["status"]["recent"]
        assert (recent["replicas"], recent["errors"], recent["evaluated"], recent["missingKeys"]) == (1, 6, 6, 6)
        assert "placer-rule-counts-placer-e2e-0" in apiserver.leases
