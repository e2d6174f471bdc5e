"""Audit policies never change a served answer: every captured request answered with the example policies, with
and without the Audit policies of tests/fixtures/audit beside them, gets the same response byte for byte but
for the `audit-*` audit annotations; and each audit record is exactly what promoting its policy would add."""

import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import FIXTURES, REPO
from tests.helpers import decode_patch
from webhook.admission.offline import load_policies
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.admission.sibling_cache import SiblingCache
from webhook.policy.snapshot import PolicySnapshot
from webhook.workloads import default_workload_table

AUDITS = FIXTURES / "audit" / "audit-policies.yaml"
REQUESTS = sorted([*(FIXTURES / "requests").glob("*.json"), *(FIXTURES / "requests-with-serviceaccount").glob("*.json"),
                   *(FIXTURES / "kube-1.36" / "requests").glob("*.json")])


@pytest.fixture(scope="module")
def snapshots() -> tuple[PolicySnapshot, PolicySnapshot]:
    served = load_policies([str(REPO / "policies")], required=True)
    both = load_policies([str(REPO / "policies"), str(AUDITS)], required=True)
    assert not served.errors and not both.errors
    assert [policy.name for policy in both.audited] == ["audit-first", "audit-fails", "audit-last"]
    assert [policy.name for policy in both.policies] == [policy.name for policy in served.policies]
    return served, both


def body_of(path: Path) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(path.read_text())["body"]
    return body


def served_bytes(response: dict[str, Any]) -> str:
    """The response less the Audit policies' annotations, encoded in its own key order."""
    response = copy.deepcopy(response)
    answer = response["response"]
    kept = {key: value for key, value in answer.get("auditAnnotations", {}).items() if not key.startswith("audit-")}
    if kept:
        answer["auditAnnotations"] = kept
    else:
        answer.pop("auditAnnotations", None)
    return json.dumps(response)


@pytest.mark.parametrize("path", REQUESTS, ids=lambda path: path.stem)
def test_a_served_answer_is_the_same_with_audit_policies_present(
        path: Path, snapshots: tuple[PolicySnapshot, PolicySnapshot]) -> None:
    served, both = snapshots
    table = default_workload_table()
    caches = SiblingCache(), SiblingCache()
    for uid in ("first", "second"):  # the second may be a sibling answered from the cache
        body = body_of(path)
        body["request"]["uid"] = uid
        alone = admit(parse_review(copy.deepcopy(body)), served, table, siblings=caches[0])
        beside = admit(parse_review(copy.deepcopy(body)), both, table, siblings=caches[1])
        assert served_bytes(beside.response) == json.dumps(alone.response)
        assert beside.result == alone.result
        assert beside.mutation.warnings == alone.mutation.warnings


@pytest.fixture(scope="module")
def promoted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, PolicySnapshot]:
    """Per Audit policy, the example policies and it promoted to Advisory: its YAML with one field edited."""
    found = {}
    for document in yaml.safe_load_all(AUDITS.read_text()):
        document["spec"]["enforcement"] = "Advisory"
        path = tmp_path_factory.mktemp("promoted") / "promoted.yaml"
        path.write_text(yaml.safe_dump(document))
        found[document["metadata"]["name"]] = load_policies([str(REPO / "policies"), str(path)], required=True)
    return found


def _without_marks(value: Any) -> Any:
    """`value` less every `placer.dev/applied` annotation (which rules applied, not what they placed)."""
    if isinstance(value, dict):
        return {key: _without_marks(item) for key, item in value.items() if key != "placer.dev/applied"
                and not (key == "annotations" and item == {"placer.dev/applied": item.get("placer.dev/applied")})}
    if isinstance(value, list):
        return [_without_marks(item) for item in value]
    return value


@pytest.mark.parametrize("path", REQUESTS, ids=lambda path: path.stem)
def test_each_audit_record_is_what_promoting_its_policy_adds(
        path: Path, snapshots: tuple[PolicySnapshot, PolicySnapshot], promoted: dict[str, PolicySnapshot]) -> None:
    _, both = snapshots
    table = default_workload_table()
    body = body_of(path)
    admission = admit(parse_review(copy.deepcopy(body)), both, table)
    obj = body["request"]["object"]
    served = jsonpatch.apply_patch(obj, decode_patch(admission.response))
    for record in admission.mutation.audits:
        after = admit(parse_review(copy.deepcopy(body)), promoted[record.policy], table)
        if record.verdict == "would-deny":
            assert after.result == "denied" and record.detail == after.mutation.denial
        elif record.verdict == "would-change":
            promoted_object = jsonpatch.apply_patch(obj, decode_patch(after.response))
            assert jsonpatch.apply_patch(served, record.patch) == promoted_object
        elif record.verdict == "no-change":
            promoted_object = jsonpatch.apply_patch(obj, decode_patch(after.response))
            assert _without_marks(promoted_object) == _without_marks(served)
        else:
            assert admission.result == "denied"
