"""What kube-apiserver does to requests that the fake API server (`fake_apiserver`) does alike: continue tokens,
JSON merge patches, structural-schema pruning, and the messages it answers with.

Each is written after the Kubernetes source it follows, named where it is used.
"""

import base64
import copy
import json
from typing import Any

CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)
"""`inconsistentContinue` in staging/src/k8s.io/apiserver/pkg/storage/etcd3/errors.go: the 410 Gone (reason
Expired, `errors.NewResourceExpired`) of a list page whose token's resourceVersion was compacted
(`handleCompactedErrorForPaging`), which carries a token to go on at the latest version (rv -1)."""


def encode_continue(resource_version: int, start: str) -> str:
    """A continue token as `storage.EncodeContinue` (staging/src/k8s.io/apiserver/pkg/storage/continue.go)
    makes it: base64 of {"v": "meta.k8s.io/v1", "rv": N, "start": key}; opaque to clients."""
    payload = json.dumps({"v": "meta.k8s.io/v1", "rv": resource_version, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str] | None:
    """(resourceVersion, start key) of a token, or None when it is not one (400 BadRequest, as `DecodeContinue`)."""
    try:
        payload = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        return int(payload["rv"]), str(payload["start"])
    except (ValueError, KeyError, TypeError):
        return None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (application/merge-patch+json): objects merge key by key, null removes a key,
    anything else (lists included) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def prune(value: Any, schema: Any) -> Any:
    """Drop the fields a structural schema does not specify, as kube-apiserver does to custom resources
    (`Prune` in staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning/algorithm.go):
    unknown object keys go unless `x-kubernetes-preserve-unknown-fields`; `additionalProperties` keeps any key
    with its own schema; lists prune each item."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        kept = {}
        for key, item in value.items():
            if key in properties:
                kept[key] = prune(item, properties[key])
            elif isinstance(additional, dict):
                kept[key] = prune(item, additional)
            elif preserve or additional is True:
                kept[key] = item
        return kept
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"]) for item in value]
    return value
