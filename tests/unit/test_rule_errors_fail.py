"""A rule that errors on an input is a failing policy, not a pass: `placer apply` and `placer test` exit 1."""

import shutil
from pathlib import Path

import pytest
import yaml

from webhook.commands.cli import main

FIXTURES = Path(__file__).parent.parent / "fixtures" / "manifests"

POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: spread}
spec:
  rules:
  - name: pool
    action: add-node-selector
    parameters: {pool: gpu}
  - name: per-replica
    condition: 100 / (workload.replicas - 4) > 1
    action: add-labels
    parameters: {spread: wide}
"""
"""Type-checks (an int divided by an int), loads, and divides by zero on a Deployment of 4 replicas."""


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "policy.yaml").write_text(POLICY)
    shutil.copy(FIXTURES / "deployment.yaml", tmp_path / "deployment.yaml")
    shutil.copy(FIXTURES / "pod-bare.yaml", tmp_path / "pod.yaml")
    return tmp_path


def test_apply_exits_1_and_says_which_rule_errors_on_which_object(
        files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", "--policies", str(files / "policy.yaml"), "-f", str(files / "deployment.yaml")]) == 1
    err = capsys.readouterr().err
    assert "error: Deployment team-a/trainer: rule spread/per-replica errors: condition: " \
           "divide by zero" in err, err
    assert main(["apply", "--policies", str(files / "policy.yaml"), "-f", str(files / "pod.yaml")]) == 0, \
        "the same policy on a Pod (one replica) works"


def test_a_case_about_an_object_a_rule_errors_on_fails(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (files / "spread-test.yaml").write_text(
        "apiVersion: placer.dev/v1alpha1\nkind: PolicyTest\nmetadata: {name: spread}\npolicies: [policy.yaml]\n"
        "resources: [deployment.yaml, pod.yaml]\nresults:\n"
        "- resource: Deployment/team-a/trainer\n  applied: [spread/pool]\n")
    assert main(["test", str(files)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  " in out and "results[0] Deployment/team-a/trainer" in out
    assert "rule spread/per-replica errors: condition: divide by zero" in out
    assert "0 passed, 1 failed" in out, "the applied rule is there, but a rule errors: the case fails"


def test_a_rule_erroring_on_a_resource_no_result_names_is_a_failing_case(
        files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (files / "spread-test.yaml").write_text(
        "apiVersion: placer.dev/v1alpha1\nkind: PolicyTest\nmetadata: {name: spread}\npolicies: [policy.yaml]\n"
        "resources: [deployment.yaml, pod.yaml]\nresults:\n"
        f"- resource: Pod/{pod_reference(files)}\n  applied: [spread/pool]\n")
    assert main(["test", str(files)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  " in out and "rules on Deployment/team-a/trainer" in out
    assert "1 passed, 1 failed" in out


def pod_reference(files: Path) -> str:
    pod = yaml.safe_load((files / "pod.yaml").read_text())
    return f"{pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}"
