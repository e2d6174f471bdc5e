"""The stumbles of a second hour, writing real policies: misspelt names, broken files, where policies come
from, what each command writes where (issue 61)."""

from pathlib import Path

import pytest

from webhook.commands.cli import main
from webhook.export.helpers import MATCHED_KINDS, RESOURCE_RULES
from webhook.support.suggestions import closest, unknown_name

TYPOS = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata:
  name: typos
spec:
  namespaceSelctor:
    matchLabels: {team: ml}
  rules:
  - name: spot
    action: spot-share
    parameters:
      capacity: spot
      maxSpotPercent: 50
  - name: sel
    action: add-node-selectors
    parameters: {a: b}
---
apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata:
  name: typos2
spec:
  namespaceSelector:
    matchLabel: {team: ml}
  rules:
  - name: spread
    action: add-topology-spread
    parameters: {topologyKey: zone, maxSkw: 2, labelSelector: {matchLabel: {app: web}}}
    condtion: "true"
"""


def test_every_misspelt_name_gets_the_closest_and_its_keys_place(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Spec and rule fields, action parameters, selector fields, action names: one did-you-mean, and an unknown
    key is placed on the key (its value may be lines below it)."""
    path = tmp_path / "typos.yaml"
    path.write_text(TYPOS)
    assert main(["lint", str(path)]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert f"{path}:6:3: policy typos, spec.namespaceSelctor: unknown field; did you mean `namespaceSelector`?" \
        in errors
    assert f"{path}:13:7: policy typos, rule spot, parameters.maxSpotPercent: unknown parameter for spot-share; " \
           "did you mean `maxSpotPercentage`?" in errors
    assert f"{path}:15:13: policy typos, rule sel, action: unknown action 'add-node-selectors'; did you mean " \
           "`add-node-selector`?" in errors
    assert f"{path}:24:5: policy typos2, spec.namespaceSelector.matchLabel: unknown field; did you mean " \
           "`matchLabels`?" in errors
    assert f"{path}:29:5: policy typos2, rule spread, condtion: unknown field; did you mean `condition`?" in errors
    assert f"{path}:28:37: policy typos2, rule spread, parameters.maxSkw: unknown parameter for " \
           "add-topology-spread; did you mean `maxSkew`?" in errors
    assert any(line.startswith(f"{path}:28:") and "parameters.labelSelector: label selector: unknown field "
               "'matchLabel'; did you mean `matchLabels`?" in line for line in errors), errors


def test_the_did_you_mean_lists_the_names_when_none_is_close() -> None:
    assert closest("maxSpotPercent", ["capacity", "maxSpotPercentage"]) == "maxSpotPercentage"
    assert closest("colour", ["key", "value", "effect"]) is None
    assert unknown_name("unknown action 'magic'", "magic", ["add-labels", "spot-share"]) == \
        "unknown action 'magic' (known: add-labels, spot-share)"


ONE = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: one}
spec:
  rules:
  - {name: place, action: add-node-selector, parameters: {pool: a}}
"""


def test_lint_says_everything_on_stderr_and_counts_in_words(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Errors, warnings and the summary all go to stderr (stdout stays empty: the verdict is the exit status),
    the summary last, its noun agreeing with its count."""
    (tmp_path / "one.yaml").write_text(ONE)
    assert main(["lint", str(tmp_path / "one.yaml")]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "1 policy OK: one\n"

    (tmp_path / "two.yaml").write_text(ONE.replace("one", "two"))
    assert main(["lint", str(tmp_path)]) == 0
    assert capsys.readouterr().err == "2 policies OK: one, two\n"

    (tmp_path / "two.yaml").write_text(ONE.replace("one", "two").replace("add-node-selector", "add-magic"))
    assert main(["lint", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1] == "1 error"
    assert "unknown action 'add-magic'" in captured.err.splitlines()[0]


POD = """apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec:
  containers: [{name: c, image: nginx}]
"""


def test_apply_says_which_policies_it_loaded_and_from_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """On stderr, so that `-o yaml` stays pipeable; the default directory is named as the flag's default."""
    (tmp_path / "pod.yaml").write_text(POD)
    (tmp_path / "one.yaml").write_text(ONE)
    assert main(["apply", "--policies", str(tmp_path / "one.yaml"), "-f", str(tmp_path / "pod.yaml")]) == 0
    captured = capsys.readouterr()
    assert captured.err == f"placer apply: 1 policy from {tmp_path}/one.yaml: one\n"
    assert "pool: a" in captured.out

    monkeypatch.chdir(tmp_path)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "two.yaml").write_text(ONE.replace("one", "two"))
    (tmp_path / "policies" / "three.yaml").write_text(ONE.replace("one", "three"))
    assert main(["apply", "-f", "pod.yaml", "-o", "patch"]) == 0
    assert capsys.readouterr().err == ("placer apply: 2 policies from ./policies (the default of --policies): "
                                       "three, two\n")


def test_apply_without_policies_names_the_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    monkeypatch.chdir(tmp_path)
    assert main(["apply", "-f", "pod.yaml"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("placer apply: no policies: --policies names none and ./policies (its default) does "
                            "not exist; name policy files or directories with --policies PATH (repeatable)\n")

    (tmp_path / "policies").mkdir()
    assert main(["apply", "-f", "pod.yaml"]) == 1
    assert capsys.readouterr().err == ("placer apply: no SchedulingPolicy in ./policies (the default of "
                                       "--policies); name policy files or directories with --policies PATH\n")
    assert main(["apply", "--policies", "pod.yaml", "-f", "pod.yaml"]) == 1
    assert "no SchedulingPolicy in pod.yaml;" in capsys.readouterr().err


SPARK = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: spark}
spec:
  rules:
  - name: spark-pool
    condition: "object.kind == 'SparkApplication'"
    action: add-node-selector
    parameters: {pool: spark}
  - name: mixed
    condition: "object.kind in ['Deployment', 'RayCluster'] && workload.replicas > 1"
    action: add-node-selector
    parameters: {zone: a}
  - name: spark-pods
    condition: "workload.kind == 'SparkApplication'"
    action: add-labels
    parameters: {spark: "yes"}
"""

GANG_ONLY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: gangs}
spec:
  rules:
  - {name: gang, action: add-gang-labels, parameters: {scheduler: volcano}}
"""


def test_export_says_which_rules_match_kinds_it_does_not(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The exported policy matches the built-in kinds only: a rule for SparkApplications would run on nothing,
    and is said not exported, with why; a rule also for an operator kind, or for the pods of one, says so."""
    (tmp_path / "spark.yaml").write_text(SPARK)
    assert main(["export", str(tmp_path / "spark.yaml")]) == 1
    report = capsys.readouterr().err.splitlines()
    assert report[1] == ("spark/spark-pool: not exported: its condition holds only for SparkApplication, which the "
                         "exported policy does not match: its matchConstraints hold the built-in kinds (Pod, "
                         "Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob); an operator resource's pod "
                         "templates, one per role, stay with the webhook")
    assert ("spark: rule mixed: exported for Deployment only; the exported policy does not match RayCluster "
            "(operator resources stay with the webhook)") in report
    assert any(line.startswith("spark: rule spark-pods: its condition holds only for workloads of kind "
                               "SparkApplication") for line in report)


def test_export_allow_partial_that_writes_nothing_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "gangs.yaml").write_text(GANG_ONLY)
    assert main(["export", "--allow-partial", str(tmp_path / "gangs.yaml")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1] == "placer export: nothing written: no rule of any policy can be exported"

    (tmp_path / "spark.yaml").write_text(SPARK)
    assert main(["export", "--allow-partial", str(tmp_path)]) == 0, "something written: a partial export"
    assert "kind: MutatingAdmissionPolicy" in capsys.readouterr().out


def test_the_kinds_export_matches_are_those_of_its_resource_rules() -> None:
    resources = {resource for rule in RESOURCE_RULES for resource in rule["resources"]}
    assert {kind.lower() + "s" for kind in MATCHED_KINDS} == resources
