"""Live workloads judged by the admission engine (`webhook.cluster.reports.compliance`), and the write that
`kubectl placer drift --apply` sends to bring one in step."""

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonpatch

from webhook.cluster.client.workload_lists import Served
from webhook.cluster.reports.compliance import Verdict, evaluate
from webhook.engine.value_drift import ValueCheck
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.support.typing import JSONObject, as_map
from webhook.workloads import default_workload_table


@dataclass(slots=True)
class Judged:
    served: Served
    stored: JSONObject
    verdict: Verdict


def judge(listed: Iterable[tuple[Served, JSONObject]], snapshot: PolicySnapshot,
          namespaces: Mapping[str, NamespaceInfo]) -> list[Judged]:
    """Each listed workload judged against `snapshot`'s policies, with its namespace's real labels
    (`namespaces`, as read from the cluster)."""
    serving = dataclasses.replace(snapshot, namespaces={**snapshot.namespaces, **namespaces})
    workloads = default_workload_table()
    values = ValueCheck(serving)
    return [Judged(served, obj, evaluate(obj, serving, workloads, values)) for served, obj in listed]


def merge_patch(before: Any, after: Any) -> Any:
    """The JSON merge patch (RFC 7386) turning `before` into `after`: maps recursively, anything else whole."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return after
    patch: dict[str, Any] = {}
    for key in before.keys() - after.keys():
        patch[key] = None
    for key, value in after.items():
        if key not in before:
            patch[key] = value
        elif before[key] != value:
            patch[key] = merge_patch(before[key], value)
    return patch


def write_body(item: Judged) -> JSONObject | None:
    """The merge patch bringing the workload in step, guarded by the resourceVersion it was judged on; None
    when applying the verdict's patch would change nothing (no write is ever sent for it)."""
    stored = item.stored
    body: JSONObject = merge_patch(stored, jsonpatch.apply_patch(stored, item.verdict.patch))
    if not body:
        return None
    version = as_map(stored.get("metadata")).get("resourceVersion")
    if version:
        body.setdefault("metadata", {})["resourceVersion"] = version
    return body
