"""The response's `auditAnnotations` for the Audit policies: one key per policy, within the API server's limits.

The API server adds each key a webhook returns to the audit event of the request, prefixed with the webhook's
name: `mutate.placer.dev/audit-gpu-pool` (kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/admission/
plugin/webhook/mutating/dispatcher.go, `callAttrMutatingHook`: `key := h.Name + "/" + k`). The whole key must
be a qualified name, so the part Placer chooses is at most 63 characters of `[A-Za-z0-9]([-A-Za-z0-9_.]*
[A-Za-z0-9])?`; a key that is not is logged and dropped by the API server (staging/src/k8s.io/apiserver/pkg/
admission/attributes.go, `checkKeyFormat`, called by `AddAnnotation`). A policy name is a DNS subdomain of up to
253 characters: a long one is cut and given a digest of the whole name, so two policies never share a key.

The API server sets no limit on a value, but its audit backends do: an event over `--audit-log-truncate-max-
event-size` (or the webhook backend's) first loses its request and response objects and, if still too large,
is not written at all (staging/src/k8s.io/apiserver/plugin/pkg/audit/truncate/truncate.go, `ProcessEvents`).
So what one request adds is bounded: `VALUE_LIMIT` per policy, `TOTAL_LIMIT` for them all but `SUMMARY_LIMIT`
for each policy past it. A value over its limit keeps the operations that fit and says what was cut (`cut`); a
policy past the total keeps its verdict and rules and says its patch was left out. Nothing is dropped silently.
"""

import hashlib
import json
from typing import Any

from webhook.engine.outcome import AuditRecord

KEY_PREFIX = "audit-"
NAME_LIMIT = 63
"""The name part of a qualified name (`validation.IsQualifiedName`)."""
VALUE_LIMIT = 4096
"""Bytes of one policy's value."""
TOTAL_LIMIT = 16384
"""Bytes of the Audit policies' patches in one response, far below an audit event's default limit."""
SUMMARY_LIMIT = 512
"""Bytes a policy past `TOTAL_LIMIT` still gets: its verdict, rules and a note that its patch was left out."""
WHOLE_PATCH = "the whole patch: the workload's PolicyReport, or placer apply -o explain"


def audit_key(policy: str) -> str:
    """`audit-<policy>`, or for a long name its first characters and a digest of it, within 63 characters."""
    key = KEY_PREFIX + policy
    if len(key) <= NAME_LIMIT:
        return key
    digest = hashlib.sha256(policy.encode()).hexdigest()[:8]
    head = policy[:NAME_LIMIT - len(KEY_PREFIX) - len(digest) - 1].rstrip("-.")
    return f"{KEY_PREFIX}{head}-{digest}"


def audit_annotations(records: list[AuditRecord]) -> dict[str, str]:
    """One annotation per Audit policy that would have written or denied something, or was not evaluated."""
    found: dict[str, str] = {}
    room = TOTAL_LIMIT
    for record in records:
        if record.verdict == "no-change":
            continue
        value = _value(record, min(VALUE_LIMIT, room)) if room >= SUMMARY_LIMIT else _summary(record)
        found[audit_key(record.policy)] = value
        room = max(room - len(value.encode()), 0)
    return found


def _value(record: AuditRecord, limit: int) -> str:
    head: dict[str, Any] = {"verdict": record.verdict}
    if record.rules:
        head["rules"] = record.rules
    if record.detail:
        head["message"] = record.detail
    if not record.patch:
        return _cut_text(_encode(head), limit)
    whole = _encode({**head, "patch": record.patch})
    if len(whole.encode()) <= limit:
        return whole
    size = len(_encode(record.patch).encode())
    kept: list[Any] = []
    for op in record.patch:
        trial = _encode({**head, "patch": [*kept, op], "cut": _cut_note(len(kept) + 1, record, size)})
        if len(trial.encode()) > limit:
            break
        kept.append(op)
    if kept:
        return _encode({**head, "patch": kept, "cut": _cut_note(len(kept), record, size)})
    return _summary(record)


def _summary(record: AuditRecord) -> str:
    """A policy's verdict and rules, its patch left out (past the response's total, or too large alone)."""
    head: dict[str, Any] = {"verdict": record.verdict}
    if record.rules:
        head["rules"] = record.rules
    size = len(_encode(record.patch).encode())
    note = (f"patch of {len(record.patch)} operation(s), {size} bytes, left out: over this response's limit; "
            f"{WHOLE_PATCH}")
    return _cut_text(_encode({**head, "cut": note}), SUMMARY_LIMIT)


def _cut_note(shown: int, record: AuditRecord, size: int) -> str:
    return f"{shown} of {len(record.patch)} operations shown ({size} bytes in all); {WHOLE_PATCH}"


def _cut_text(text: str, limit: int) -> str:
    """A value that is still too long (a very long message): cut, with a marker that says so."""
    if len(text.encode()) <= limit:
        return text
    marker = "...[cut]"
    return text.encode()[:max(limit - len(marker), 0)].decode(errors="ignore") + marker


def _encode(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
