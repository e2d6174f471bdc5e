"""`enforcement: Audit` offline: explain says what it would write, lint and the validating webhook accept it,
export refuses it with the reason, and promoting it is one field."""

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import REPO
from tests.helpers import compile_errors
from tests.rsgi_client import AppClient
from webhook.commands.cli import main
from webhook.policy.exemptions import ENFORCEMENTS
from webhook.policy.snapshot import PolicySnapshot, SnapshotHolder
from webhook.server.app import create_app
from webhook.support.config import Settings
from webhook.support.metrics import Metrics

EXAMPLES = REPO / "docs/examples/changing-policies/audit"
AUDIT = EXAMPLES / "gpu-pool.yaml"
PROMOTED = EXAMPLES / "promoted/gpu-pool.yaml"
MANIFESTS = ["-f", str(EXAMPLES / "ml.yaml"), "-f", str(EXAMPLES / "train.yaml")]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_explain_says_what_the_audit_policy_would_write(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "apply", "--policies", str(AUDIT), *MANIFESTS, "-o", "explain")
    assert status == 0
    assert out.splitlines()[1:] == [
        "  not mutated: only Audit policies select this namespace",
        "  policy gpu-pool (priority 100, failurePolicy Ignore, Audit)",
        "    gpu-nodes: audit: would add nodeSelector node-pool=gpu",
        "    gpu-taint: audit: would add toleration nvidia.com/gpu:NoSchedule",
        "  patch: 0 operation(s)",
        "",
    ]
    status, out, _ = run(capsys, "apply", "--policies", str(AUDIT), *MANIFESTS, "-o", "yaml")
    assert "nodeSelector" not in out and "tolerations" not in out


def test_promoting_is_one_field_and_the_next_answer_writes_what_the_audit_said(
        capsys: pytest.CaptureFixture[str]) -> None:
    audit, promoted = yaml.safe_load(AUDIT.read_text()), yaml.safe_load(PROMOTED.read_text())
    assert audit["spec"].pop("enforcement") == "Audit" and promoted["spec"].pop("enforcement") == "Advisory"
    assert audit == promoted
    _, out, _ = run(capsys, "apply", "--policies", str(PROMOTED), *MANIFESTS, "-o", "yaml")
    template = yaml.safe_load(out)["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {"node-pool": "gpu"}
    assert template["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_lint_accepts_it_and_says_what_audit_does(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "lint", str(AUDIT))
    assert status == 0
    assert out == ""
    assert err.splitlines() == ["gpu-pool: Audit: evaluated on every admission as Advisory, never applied; what it "
                                "would write goes to audit annotations, PolicyReports and metrics (promote: "
                                "spec.enforcement: Advisory)",
                                "1 policy OK: gpu-pool"]


def test_export_refuses_an_audit_policy_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "export", "--policies", str(AUDIT))
    assert status == 1 and out == ""
    assert "gpu-pool/gpu-nodes: not exported: enforcement: Audit: a MutatingAdmissionPolicy has no audit mode" in err
    _, _, err = run(capsys, "export", "--policies", str(PROMOTED))  # judged on its rules once promoted
    assert "enforcement: Audit" not in err and "gpu-pool/gpu-nodes: not exported: reads `resources`" in err


def test_the_crd_the_compiler_and_the_validating_webhook_agree_on_the_values() -> None:
    crd = yaml.safe_load((REPO / "deploy/base/crd.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["enforcement"]["enum"] == list(ENFORCEMENTS) == ["Advisory", "Enforced", "Audit"]
    document: dict[str, Any] = yaml.safe_load(AUDIT.read_text())
    jsonschema.validate(document["spec"], {k: v for k, v in spec.items() if not k.startswith("x-kubernetes")})
    assert compile_errors(AUDIT.read_text()) == []
    app = create_app(holder=SnapshotHolder(PolicySnapshot.build([], {}, [], None)), settings=Settings(),
                     metrics=Metrics())
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "placer.dev", "version": "v1alpha1", "kind": "SchedulingPolicy"},
        "resource": {"group": "placer.dev", "version": "v1alpha1", "resource": "schedulingpolicies"},
        "operation": "CREATE", "userInfo": {"username": "admin"}, "object": document, "name": "gpu-pool"}}
    answered = AppClient(app).post("/validate", json=review).get_json()["response"]
    assert answered["allowed"] is True, answered
    document["spec"]["enforcement"] = "Shadow"
    answered = AppClient(app).post("/validate", json=review).get_json()["response"]
    assert answered["allowed"] is False and "must be Advisory, Enforced or Audit" in answered["status"]["message"]


def test_an_audit_rule_that_errors_fails_placer_apply_as_any_rule(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path) -> None:
    """An Audit policy is on trial: a rule that errors on a manifest is a policy that does not work there."""
    policy = tmp_path / "broken.yaml"
    policy.write_text(AUDIT.read_text().replace("\"'nvidia.com/gpu' in resources.limits\"",
                                                "\"int(workload.name) > 0\"", 1))
    status, out, err = run(capsys, "apply", "--policies", str(policy), *MANIFESTS, "-o", "yaml")
    assert status == 1 and "nodeSelector" not in out
    assert "rule gpu-pool/gpu-nodes errors" in err
