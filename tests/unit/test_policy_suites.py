"""`placer test`: the shipped suites pass, and a failing expectation says exactly what differed."""

import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.conftest import REPO
from webhook.commands.cli import main

POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: pools}
spec:
  failurePolicy: Fail
  rules:
  - name: pool
    condition: "namespaceObject.metadata.labels['team'] == 'ml'"
    action: add-node-selector
    parameters: {pool: gpu}
  - name: broken-for-blue
    condition: "namespaceObject.metadata.labels['team'] == 'blue' && int(object.metadata.name) == 1"
    action: add-labels
    parameters: {never: "true"}
"""
RESOURCES = """apiVersion: v1
kind: Namespace
metadata: {name: ml, labels: {team: ml}}
---
apiVersion: v1
kind: Namespace
metadata: {name: blue, labels: {team: blue}}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: ml}
spec:
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: blue}
spec:
  containers: [{name: c, image: busybox}]
"""


def suite(tmp_path: Path, results: str, name: str = "pools-test.yaml") -> Path:
    (tmp_path / "pools.yaml").write_text(POLICY)
    (tmp_path / "resources.yaml").write_text(RESOURCES)
    path = tmp_path / name
    path.write_text("apiVersion: placer.dev/v1alpha1\nkind: PolicyTest\nmetadata: {name: pools}\n"
                    "policies: [pools.yaml]\nresources: [resources.yaml]\nresults:\n" + results)
    return path


def test_every_shipped_policy_has_a_suite_and_every_suite_passes(capsys: pytest.CaptureFixture[str]) -> None:
    policies = {p.stem for p in (REPO / "policies").glob("*.yaml")} - {"namespaces"}
    suites = {p.name.removesuffix("-test.yaml") for p in (REPO / "policies" / "tests").glob("*-test.yaml")}
    assert policies <= suites, f"policies without a suite: {sorted(policies - suites)}"
    assert main(["test", str(REPO / "policies" / "tests")]) == 0
    output = capsys.readouterr().out
    assert "FAIL" not in output and output.rstrip().endswith(" passed, 0 failed")


def test_a_passing_suite_checks_objects_rules_and_denials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(tmp_path, """- resource: Pod/ml/trainer
  applied: [pools/pool]
  expected: {spec: {nodeSelector: {pool: gpu}}}
- resource: Pod/blue/web
  denied: "broken-for-blue"
""")
    assert main(["test", str(path)]) == 0, capsys.readouterr().out


def test_a_differing_object_fails_with_a_diff_of_what_differed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(tmp_path, """- resource: Pod/ml/trainer
  expected: {spec: {nodeSelector: {pool: cpu}}}
- resource: Pod/ml/trainer
  mutated: false
  applied: [pools/other]
- resource: Pod/blue/web
  denied: false
- resource: Pod/ml/missing
  mutated: true
""")
    assert main(["test", str(path)]) == 1
    output = capsys.readouterr().out
    assert "FAIL" in output and "0 passed, 4 failed" in output
    assert "-    pool: cpu" in output and "+    pool: gpu" in output, output
    assert "expected no mutation, got 2 patch operation(s)" in output
    assert "rule pools/other did not apply (applied: pools/pool)" in output
    assert "expected no denial, got:" in output
    assert "no resource Pod/ml/missing among the suite's resources" in output


def test_junit_output_counts_failures_per_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(tmp_path, "- resource: Pod/ml/trainer\n  expected: {spec: {nodeSelector: {pool: cpu}}}\n"
                           "- resource: Pod/ml/trainer\n  mutated: true\n")
    assert main(["test", str(path), "-o", "junit"]) == 1
    root = ElementTree.fromstring(capsys.readouterr().out.split("?>", 1)[1])
    testsuite = root.find("testsuite")
    assert testsuite is not None and testsuite.get("tests") == "2" and testsuite.get("failures") == "1"
    failure = root.find(".//failure")
    assert failure is not None and "pool: cpu" in (failure.text or "")


@pytest.mark.parametrize(("results", "message"), [
    ("- {expected: {}}\n", "results[0].resource: required"),
    ("- {resource: Pod/ml/trainer, expect: {}}\n", "results[0]: unknown field expect"),
    ("- {resource: Pod/ml/trainer}\n", "results[0]: nothing to check"),
])
def test_a_malformed_suite_is_one_failure_that_says_where(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], results: str, message: str) -> None:
    assert main(["test", str(suite(tmp_path, results))]) == 1
    assert message in capsys.readouterr().out


def test_a_broken_policy_fails_the_suite_with_its_location(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(tmp_path, "- {resource: Pod/ml/trainer, mutated: true}\n")
    (tmp_path / "pools.yaml").write_text(POLICY.replace("== 'ml'\"", "== \""))
    assert main(["test", str(path)]) == 1
    output = capsys.readouterr().out
    assert "policies and resources load" in output and "pools.yaml" in output and "rule pool" in output


def test_no_suite_found_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(tmp_path)]) == 1
    assert "no *-test.yaml" in capsys.readouterr().err
