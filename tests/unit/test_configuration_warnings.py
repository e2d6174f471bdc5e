"""Rules that load but cannot work as written are said at load time (lint) and on admission, rule first."""

import dataclasses
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import fixture_request
from tests.helpers import compile_policies, review_for, run, snapshot_of
from webhook.admission.review import format_warnings, parse_review
from webhook.admission.validation import validate_policy_review
from webhook.commands.cli import main
from webhook.engine.configuration import (
    GANG_NOT_ENFORCED,
    creates_pod_groups,
    gang_not_enforced,
    pod_groups_not_served,
)
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.model import Policy
from webhook.policy.snapshot import NamespaceInfo

TEAM_A = NamespaceInfo("team-a")


def policy(*rules: str, name: str = "train") -> str:
    body = "".join(f"  - {rule}\n" for rule in rules)
    return (f"apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: {name}}}\n"
            f"spec:\n  rules:\n{body}")


GANG = "{name: gang, action: add-gang-labels, parameters: {scheduler: coscheduling}}"
GANG_WITH_SCHEDULER = ("{name: gang, action: add-gang-labels, parameters: {scheduler: coscheduling, "
                       "schedulerName: scheduler-plugins-scheduler}}")
GANG_WITH_POD_GROUP = ("{name: gang, action: add-gang-labels, parameters: {scheduler: coscheduling, "
                       "schedulerName: scheduler-plugins-scheduler, createPodGroup: 'true'}}")
SCHEDULER = "{name: scheduler, action: set-scheduler-name, parameters: {schedulerName: scheduler-plugins-scheduler}}"


def compiled(text: str) -> Policy:
    return compile_policies([text])[0][0]


def test_a_coscheduling_gang_left_on_the_default_scheduler_is_found_at_load_time() -> None:
    (finding,) = gang_not_enforced(compiled(policy(GANG)))
    assert finding.rule == "gang" and finding.reason == GANG_NOT_ENFORCED
    assert finding.message.startswith("rule train/gang: coscheduling gang on default-scheduler")
    assert "set schedulerName in this rule's parameters" in finding.message
    assert gang_not_enforced(compiled(policy(GANG_WITH_SCHEDULER))) == []
    assert gang_not_enforced(compiled(policy(GANG, SCHEDULER))) == [], "another rule of the policy sets it"


def test_lint_warns_and_still_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "gang.yaml").write_text(policy(GANG))
    assert main(["lint", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.err.endswith("\n1 policy OK: train\n")
    assert captured.err.startswith(f"Warning: {tmp_path}/gang.yaml: rule train/gang: coscheduling gang on "
                                   "default-scheduler")


def test_kubectl_apply_of_such_a_policy_prints_a_warning() -> None:
    body = fixture_request("deployment-create-dryrun")
    body["request"]["kind"] = {"group": "placer.dev", "version": "v1alpha1", "kind": "SchedulingPolicy"}
    body["request"]["object"] = yaml.safe_load(policy(GANG))
    response = validate_policy_review(parse_review(body), PolicyCompiler())["response"]
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert warning.startswith("placer: rule train/gang: coscheduling gang on default-scheduler") and len(warning) <= 256
    body["request"]["object"] = yaml.safe_load(policy(GANG_WITH_SCHEDULER))
    assert "warnings" not in validate_policy_review(parse_review(body), PolicyCompiler())["response"]


def job() -> dict[str, Any]:
    obj = fixture_request("job-create-dryrun")["request"]["object"]
    obj["spec"]["template"]["spec"].pop("schedulerName", None)
    return obj


def test_an_admission_of_a_gang_on_the_default_scheduler_warns_naming_the_rule() -> None:
    mutation = run(snapshot_of(policy(GANG), namespaces=[TEAM_A]), review_for(job(), namespace="team-a"))
    warnings = format_warnings(mutation.warnings)
    assert any(w.startswith("placer: rule train/gang: coscheduling gang on default-scheduler: not enforced, pods "
                            "start one by one; set schedulerName in this rule's parameters")
               for w in warnings), warnings
    fixed = run(snapshot_of(policy(GANG_WITH_SCHEDULER), namespaces=[TEAM_A]), review_for(job(), namespace="team-a"))
    assert not any("coscheduling gang" in w for w in fixed.warnings)
    stored = jsonpatch.apply_patch(job(), fixed.patch)
    assert stored["spec"]["template"]["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


@pytest.mark.parametrize(("served", "warned"), [(False, True), (True, False), (None, False)])
def test_create_pod_group_without_the_crd_warns_naming_what_to_install(served: bool | None, warned: bool) -> None:
    snapshot = dataclasses.replace(snapshot_of(policy(GANG_WITH_POD_GROUP), namespaces=[TEAM_A]),
                                   pod_groups_served=served)
    mutation = run(snapshot, review_for(job(), namespace="team-a"))
    expected = ("rule train/gang: createPodGroup: PodGroups (scheduling.x-k8s.io/v1alpha1) are not served, so none "
                "is created; install scheduler-plugins' CRD podgroups.scheduling.x-k8s.io")
    assert (expected in mutation.warnings) is warned


def test_the_controller_knows_which_rules_want_pod_groups() -> None:
    p = compiled(policy(GANG_WITH_POD_GROUP))
    assert creates_pod_groups(p) == ["gang"]
    (finding,) = pod_groups_not_served(p)
    assert finding.reason == "PodGroupCRDNotServed" and "install scheduler-plugins' CRD" in finding.message
    assert creates_pod_groups(compiled(policy(GANG_WITH_SCHEDULER))) == []


def test_a_long_warning_keeps_its_rule_and_fits_the_api_servers_limit() -> None:
    long_rule = "r" * 60
    (warning,) = format_warnings([f"policy-with-a-long-name/{long_rule}: condition: " + "no such key " * 40])
    assert warning.startswith(f"placer: policy-with-a-long-name/{long_rule}: condition: no such key")
    assert len(warning) == 256 and warning.endswith("...")
