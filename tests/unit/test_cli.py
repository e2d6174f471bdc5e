"""`placer lint`, `placer apply` and `placer certs` as a user runs them."""

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from tests.conftest import FIXTURES, REPO
from webhook.commands.cli import main

BROKEN = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: broken}
spec:
  rules:
  - {name: multi-zone-ha, condition: "replica >= 3", action: add-topology-spread, parameters: {topologyKey: z}}
  - {name: bad-action, action: add-magic}
"""


def test_lint_passes_on_the_shipped_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(REPO / "policies")]) == 0
    shipped = sum(1 for path in (REPO / "policies").glob("*.yaml") if "kind: SchedulingPolicy" in path.read_text())
    assert f"{shipped} policies OK" in capsys.readouterr().err
    assert shipped >= 9


def test_lint_fails_with_every_error_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "org.yaml").write_text(BROKEN)
    (tmp_path / "bad.yaml").write_text("a: [")
    assert main(["lint", str(tmp_path)]) == 1
    out = capsys.readouterr().err.splitlines()
    assert out[0] == f"{tmp_path}/bad.yaml:2:1: cannot read: did not find expected node content"
    assert f"{tmp_path}/org.yaml:6:39: policy broken, rule multi-zone-ha, condition: undeclared reference to " \
           "'replica'" in out, "the file's line and column of the expression's character"
    assert any("rule bad-action, action: unknown action 'add-magic'" in line for line in out)


def test_lint_says_which_kubernetes_library_an_expression_needs(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "vap.yaml").write_text(BROKEN.replace('"replica >= 3"', '"quantity(object.spec.x).div(2).isInteger()"')
                                       .replace("  - {name: bad-action, action: add-magic}\n", ""))
    assert main(["lint", str(tmp_path)]) == 1
    out = capsys.readouterr().err
    assert "vap.yaml:6:66: policy broken, rule multi-zone-ha, condition: undeclared reference to 'div'" in out
    assert "div() is from Kubernetes' quantity division CEL library, which Placer does not support yet: " \
           "compare with `mul()` instead" in out


def test_lint_of_a_missing_path_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(tmp_path / "nope")]) == 1
    assert "no such file or directory" in capsys.readouterr().err


def test_apply_outputs_yaml_patch_and_explain(capsys: pytest.CaptureFixture[str]) -> None:
    manifest = str(FIXTURES / "manifests" / "deployment.yaml")
    assert main(["apply", "--policies", str(REPO / "policies"), "-f", manifest]) == 0
    mutated = yaml.safe_load(capsys.readouterr().out)
    assert mutated["spec"]["template"]["spec"]["nodeSelector"] == {"environment": "production"}

    assert main(["apply", "--policies", str(REPO / "policies"), "-f", manifest, "-o", "patch"]) == 0
    patches = json.loads(capsys.readouterr().out)
    assert patches[0]["object"] == "Deployment team-a/trainer"
    assert {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"environment": "production"}} in \
        patches[0]["patch"]

    assert main(["apply", "--policies", str(REPO / "policies"), "-f", manifest, "-o", "explain"]) == 0
    explain = capsys.readouterr().out
    assert "production-isolation: matched, changed the object" in explain
    assert "same-rack-as-stack: not matched" in explain
    assert "policy dedicated-team-pool: namespaceSelector does not select team-a" in explain


def test_explain_says_why_a_controllers_replicaset_is_left_alone(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    replicaset = yaml.safe_load((FIXTURES / "manifests" / "replicaset.yaml").read_text())
    replicaset["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                                  "uid": "1", "controller": True}]
    manifest = tmp_path / "rs.yaml"
    manifest.write_text(yaml.safe_dump(replicaset))
    assert main(["apply", "--policies", str(REPO / "policies"), "-f", str(manifest), "-o", "explain"]) == 0
    explain = capsys.readouterr().out
    assert "not evaluated: managed by its controller Deployment/web: its template is the controller's" in explain
    assert "patch: 0 operation(s)" in explain


def test_apply_namespace_labels_and_warnings_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(BROKEN.replace("broken", "ok").replace('condition: "replica >= 3", ', "")
                      .replace("  - {name: bad-action, action: add-magic}\n", "")
                      + "  - {name: pool, condition: \"namespaceObject.metadata.labels['tier'] == 'gold'\","
                        " action: add-node-selector, parameters: {pool: gold}}\n"
                      + "  - {name: div, condition: '1 / 0 > 1', action: add-labels, parameters: {a: b}}\n")
    manifest = str(FIXTURES / "manifests" / "pod-bare.yaml")
    assert main(["apply", "--policies", str(policy), "-f", manifest, "--namespace-labels", "tier=gold", "-o",
                 "json"]) == 1, "a rule that errors fails the command"
    captured = capsys.readouterr()
    assert json.loads(captured.out)["spec"]["nodeSelector"] == {"pool": "gold"}, "what the other rules do is shown"
    assert "Warning: Pod team-a/gpu-pod: placer: ok/div: condition: divide by zero" in captured.err
    assert "error: Pod team-a/gpu-pod: rule ok/div errors: condition: divide by zero" in captured.err


def test_apply_reports_broken_policies_with_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "org.yaml").write_text(BROKEN)
    assert main(["apply", "--policies", str(tmp_path), "-f", str(FIXTURES / "manifests" / "pod-bare.yaml")]) == 1
    assert "undeclared reference to 'replica'" in capsys.readouterr().err


def test_certs_writes_sans_and_a_private_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "--out", str(tmp_path), "--service", "placer", "--namespace", "placer-system",
                 "--host", "10.0.0.7", "--days", "30"]) == 0
    bundle = capsys.readouterr().out.strip()
    assert bundle and (tmp_path / "ca.crt").read_bytes().startswith(b"-----BEGIN CERTIFICATE")
    certificate = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {
        "placer", "placer.placer-system", "placer.placer-system.svc", "placer.placer-system.svc.cluster.local"}
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["10.0.0.7"]
    assert stat.S_IMODE((tmp_path / "tls.key").stat().st_mode) == 0o600


def test_flags_read_placer_environment_variables(tmp_path: Path) -> None:
    (tmp_path / "org.yaml").write_text(BROKEN)
    result = subprocess.run([sys.executable, "-m", "webhook", "lint"], capture_output=True, text=True,
                            env={"PLACER_POLICIES": str(tmp_path), "PATH": "/usr/bin:/bin"}, cwd=tmp_path,
                            check=False)
    assert result.returncode == 1 and "undeclared reference" in result.stderr
