"""JSON Patch generation and the AdmissionReview envelope."""

import base64
import json
from typing import Any

import jsonpatch
import pytest

from tests.conftest import fixture_request
from webhook.admission.review import ReviewError, build_response, decode_json, format_warnings, parse_review
from webhook.support.patches import diff


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({}, {"a": {"b/c": [1]}}),
        ({"a": [1, 2]}, {"a": [1, 2, 3, 4]}),
        ({"a": [1, 2]}, {"a": [2]}),
        ({"a": [{"x": 1}, {"y": 2}]}, {"a": [{"x": 1, "z": 3}, {"y": 2}]}),
        ({"a": 1, "b": 2}, {"b": 3}),
        ({"a": {"~k": 1}}, {"a": {"~k": 2, "k~/": None}}),
        ({"a": "x"}, {"a": {"b": 1}}),
    ],
)
def test_diff_produces_a_patch_that_applies(old: dict[str, Any], new: dict[str, Any]) -> None:
    patch = diff(old, new)
    assert jsonpatch.apply_patch(old, patch) == new
    assert {op["op"] for op in patch} <= {"add", "remove", "replace"}


def test_diff_of_equal_values_is_empty_and_adds_parents_whole() -> None:
    assert diff({"a": [1]}, {"a": [1]}) == []
    assert diff({"spec": {}}, {"spec": {"tolerations": [{"key": "k"}]}}) == [
        {"op": "add", "path": "/spec/tolerations", "value": [{"key": "k"}]}
    ]


def test_parse_real_review() -> None:
    request = parse_review(fixture_request("deployment-create-dryrun"))
    assert (request.kind, request.group, request.operation, request.dry_run) == ("Deployment", "apps", "CREATE", True)
    assert request.old_object is None and request.object is not None


def test_pod_with_generate_name_has_no_name() -> None:
    request = parse_review(fixture_request("pod-rs-owned-generatename-create-real"))
    assert request.name == ""


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b.update(apiVersion="admission.k8s.io/v2"), "apiVersion must be one of"),
        (lambda b: b.pop("request"), "request is missing"),
        (lambda b: b["request"].update(uid=5), "request.uid"),
        (lambda b: b["request"].update(kind="Deployment"), "request.kind is missing or not an object"),
        (lambda b: b["request"].update(operation="PATCH"), "request.operation must be one of"),
        (lambda b: b["request"].update(object=[1]), "request.object must be an object or null"),
        (lambda b: b["request"].update(dryRun="yes"), "request.dryRun must be true or false"),
        (lambda b: b["request"]["kind"].update(kind=""), "request.kind.kind must be a non-empty string"),
    ],
)
def test_envelope_errors_are_precise(mutate: Any, message: str) -> None:
    body = fixture_request("pod-bare-create-dryrun")
    mutate(body)
    with pytest.raises(ReviewError, match=message):
        parse_review(body)


def test_decode_json_turns_huge_integers_into_floats_and_reports_bad_json() -> None:
    assert decode_json(b'{"a": 99999999999999999999999, "b": 5}') == {"a": 1e23, "b": 5}
    # between int64 and uint64 (orjson would keep it an int) and negative beyond int64: floats too
    for literal in (b"9223372036854775808", b"18446744073709551615", b"-9223372036854775809"):
        value = decode_json(b'{"a": [' + literal + b"]}")["a"][0]
        assert type(value) is float and value == float(literal)
    for literal in (b"9223372036854775807", b"-9223372036854775808", b"123456789012345678"):
        value = decode_json(b'{"a": ' + literal + b', "id": "1234567890123456789"}')["a"]
        assert type(value) is int and value == int(literal)
    with pytest.raises(ReviewError, match="invalid JSON"):
        decode_json(b'{"a": ')
    with pytest.raises(ReviewError, match=r"nested too deeply|invalid JSON"):
        decode_json(b"[" * 100000 + b"]" * 100000)


def test_response_has_patch_only_when_non_empty_and_echoes_uid() -> None:
    empty = build_response("u1", "admission.k8s.io/v1")["response"]
    assert empty == {"uid": "u1", "allowed": True}
    patched = build_response("u2", "admission.k8s.io/v1beta1", patch=[{"op": "add", "path": "/a", "value": 1}])
    assert patched["apiVersion"] == "admission.k8s.io/v1beta1"
    assert json.loads(base64.b64decode(patched["response"]["patch"])) == [{"op": "add", "path": "/a", "value": 1}]
    assert patched["response"]["patchType"] == "JSONPatch"
    denied = build_response("u3", "admission.k8s.io/v1", allowed=False, denial="no")["response"]
    assert denied["status"]["code"] == 403 and denied["status"]["message"] == "no"


def test_warnings_are_prefixed_short_and_at_most_ten() -> None:
    warnings = format_warnings([f"rule {i}: " + "x" * 300 for i in range(15)])
    assert len(warnings) == 10
    assert all(w.startswith("placer: rule ") and len(w) == 256 and w.endswith("...") for w in warnings[:9])
    assert warnings[-1] == "placer: 6 more warnings in the webhook log"
    assert format_warnings(["same", "same"]) == ["placer: same"]
