"""The AdmissionReview envelope: parsing with precise errors, and building the response.

Two error families, as in kopf: a malformed *request* raises ReviewError and becomes HTTP 400; an object
Placer cannot or will not admit is an ordinary response (`allowed`, `status`, `warnings`).
"""

import base64
import json
from typing import Any

import orjson

from webhook.engine.request import AdmissionRequest
from webhook.support.json_bytes import encode_json
from webhook.support.typing import JSONObject, JSONPatch

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
MAX_WARNINGS = 10
MAX_WARNING_LENGTH = 256
"""Characters (runes) per warning that the API server always passes on whole.

kube-apiserver's warning recorder (kubernetes/kubernetes
`staging/src/k8s.io/apiserver/pkg/endpoints/filters/warning.go`, `(*recorder).AddWarning`, with
`truncateItemRunes = 256` and `truncateAtTotalRunes = 4 * 1024`) keeps every warning whole until the warnings
of one request pass 4096 runes; from then on it cuts each one to 256 runes and drops those that no longer
fit. A webhook's warnings reach it through `warning.AddWarning` (the mutating dispatcher,
`staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/mutating/dispatcher.go`). Ten warnings of at most
256 runes (2560) leave room for other webhooks' and the API server's own, and none is ever cut further."""
WARNING_PREFIX = "placer: "

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
"""A `bytes.translate` table: every ASCII digit becomes "0", every other byte a space."""
_LONG_NUMBER = b"0" * 19
"""19 digits in a row, once digits are "0": maybe an integer beyond int64 (9223372036854775807 has 19).
Translating and searching scan an 8.5 KB body in 6 µs; RE2's `[0-9]{19}` took 17, Python's `re` 110."""
_STATUS_REASONS = {403: "Forbidden", 422: "Invalid"}
_TYPED_ELSEWHERE = frozenset({"object", "oldObject", "uid"})
"""Fields of `request` that `AdmissionRequest.fields` leaves out: the uid is its own field (and what tells
sibling Pods' reviews apart, `webhook.admission.sibling_cache`), the objects are the object's."""


class ReviewError(ValueError):
    """The body is not a usable AdmissionReview: answered with HTTP 400 and this message."""


def decode_json(body: bytes) -> Any:
    """Decode a request body; integers beyond int64 become floats.

    CEL cannot hold such integers: one anywhere in an object would turn every expression reading that
    object into an error. The API server would reject the object anyway; Placer must only not fail on it.
    A body with no run of 19 digits (no integer that could pass int64) is decoded by orjson, 3-4 times
    faster; any other, and any orjson refuses, by the standard decoder with the int64 check.
    """
    if _LONG_NUMBER not in body.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(body)  # the fast path: no integer here can exceed int64
        except orjson.JSONDecodeError:
            pass  # the standard decoder says what is wrong (and takes what JSON allows, e.g. lone surrogates)
    try:
        return json.loads(body, parse_int=_bounded_int)
    except RecursionError:
        raise ReviewError("invalid JSON: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise ReviewError(f"invalid JSON: {error}") from None


def parse_review(body: Any) -> AdmissionRequest:
    """Check the envelope and return the request, or raise ReviewError saying exactly what is wrong."""
    if not isinstance(body, dict):
        raise ReviewError("body must be a JSON object (an AdmissionReview)")
    api_version = body.get("apiVersion")
    if body.get("kind") != "AdmissionReview":
        raise ReviewError(f"kind must be AdmissionReview, not {_brief(body.get('kind'))}")
    if api_version not in API_VERSIONS:
        raise ReviewError(f"apiVersion must be one of {', '.join(API_VERSIONS)}, not {_brief(api_version)}")
    request = body.get("request")
    if not isinstance(request, dict):
        raise ReviewError("request is missing or not an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid is missing or not a non-empty string")
    kind = request.get("kind")
    if type(kind) is not dict:
        kind = _map(request, "kind")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise ReviewError(f"request.operation must be one of {', '.join(OPERATIONS)}, not {_brief(operation)}")
    # each value as the API server sends it is taken as it is; any other goes through its check (`_string`...)
    group, version, kind_name = kind.get("group"), kind.get("version"), kind.get("kind")
    resource, user_info = request.get("resource"), request.get("userInfo")
    sub_resource, name, namespace = request.get("subResource"), request.get("name"), request.get("namespace")
    dry_run, obj, old_object = request.get("dryRun", False), request.get("object"), request.get("oldObject")
    fields = request.copy()  # the request less what has a field of its own, in its order
    for key in _TYPED_ELSEWHERE:
        fields.pop(key, None)
    return AdmissionRequest(
        api_version=api_version,
        uid=uid,
        group=group if type(group) is str else _string(kind, "group", "request.kind.group"),
        version=version if type(version) is str else _string(kind, "version", "request.kind.version"),
        kind=kind_name if type(kind_name) is str and kind_name else _string(
            kind, "kind", "request.kind.kind", required=True),
        resource=resource if type(resource) is dict else _map(request, "resource", required=False),
        sub_resource=sub_resource if type(sub_resource) is str else _string(
            request, "subResource", "request.subResource"),
        name=name if type(name) is str else _string(request, "name", "request.name"),
        namespace=namespace if type(namespace) is str else _string(request, "namespace", "request.namespace"),
        operation=operation,
        user_info=user_info if type(user_info) is dict else _map(request, "userInfo", required=False),
        dry_run=dry_run if type(dry_run) is bool else _bool(request, "dryRun"),
        object=obj if obj is None or type(obj) is dict else _optional_map(request, "object"),
        old_object=old_object if old_object is None or type(old_object) is dict else _optional_map(
            request, "oldObject"),
        fields=fields,
    )


def build_response(
    request_uid: str,
    api_version: str,
    *,
    allowed: bool = True,
    patch: JSONPatch | None = None,
    warnings: list[str] | None = None,
    audit_annotations: dict[str, str] | None = None,
    denial: str | None = None,
    code: int = 403,
    details: JSONObject | None = None,
) -> JSONObject:
    """An AdmissionReview response in the version it was asked in. `patch` only when non-empty."""
    response: JSONObject = {"uid": request_uid, "allowed": allowed}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(encode_json(patch)).decode()
    if denial is not None:
        response["status"] = {
            "code": code,
            "reason": _STATUS_REASONS.get(code, "InternalError"),
            "message": denial,
            "status": "Failure",
            "metadata": {},
        }
        if details is not None:
            response["status"]["details"] = details
    if warnings:
        response["warnings"] = format_warnings(warnings)
    if audit_annotations:
        response["auditAnnotations"] = audit_annotations
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


def format_warnings(messages: list[str]) -> list[str]:
    """At most 10 warnings, each prefixed `placer:` and at most 256 characters (MAX_WARNING_LENGTH).

    kubectl prints every warning on its own line; more than ten would drown the user's output, so the
    tenth says how many were left out. A message names its rule first (`policy/rule: what happened`), so
    cutting a long one keeps the rule and loses the end of the detail; the whole text of every warning is in
    the webhook's log line for the admission (`warnings`).
    """
    unique = list(dict.fromkeys(messages))
    if len(unique) > MAX_WARNINGS:
        unique = [*unique[: MAX_WARNINGS - 1], f"{len(unique) - MAX_WARNINGS + 1} more warnings in the webhook log"]
    formatted = []
    for message in unique:
        text = WARNING_PREFIX + " ".join(message.split())
        formatted.append(text if len(text) <= MAX_WARNING_LENGTH else text[: MAX_WARNING_LENGTH - 3] + "...")
    return formatted


def _bounded_int(text: str) -> int | float:
    value = int(text)
    if _INT64_MIN <= value <= _INT64_MAX:
        return value
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"integer out of range: {text[:40]}...") from None


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _map(parent: JSONObject, key: str, *, required: bool = True) -> JSONObject:
    value = parent.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise ReviewError(f"request.{key} is missing or not an object")
    return value


def _optional_map(parent: JSONObject, key: str) -> JSONObject | None:
    value = parent.get(key)
    if value is not None and not isinstance(value, dict):
        raise ReviewError(f"request.{key} must be an object or null")
    return value


def _string(parent: JSONObject, key: str, where: str, *, required: bool = False) -> str:
    value = parent.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ReviewError(f"{where} must be a {'non-empty ' if required else ''}string")
    return value


def _bool(parent: JSONObject, key: str) -> bool:
    value = parent.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ReviewError(f"request.{key} must be true or false")
    return value
