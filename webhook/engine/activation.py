"""The CEL variables of one admission (DESIGN §3.1), built once per request and pod template."""

from typing import Any

from webhook.engine.resources import effective_resources
from webhook.review import AdmissionRequest
from webhook.typing import JSONObject
from webhook.workloads import WorkloadKind


def workload_variable(request: AdmissionRequest, kind: WorkloadKind, obj: JSONObject) -> JSONObject:
    """`workload`: identity, labels and replica count; `name` falls back to `generateName`."""
    metadata = _string_map(obj.get("metadata"))
    name = metadata.get("name") or metadata.get("generateName") or request.name or ""
    workload: JSONObject = {
        "kind": kind.kind,
        "apiVersion": obj.get("apiVersion") or "/".join(filter(None, (request.group, request.version))),
        "name": name if isinstance(name, str) else "",
        "namespace": request.namespace or metadata.get("namespace") or "",
        "labels": _string_map(metadata.get("labels")),
        "annotations": _string_map(metadata.get("annotations")),
    }
    replicas = kind.replicas(obj)
    if replicas is not None:
        workload["replicas"] = replicas
    return workload


def pod_variable(template: JSONObject) -> tuple[JSONObject, JSONObject, list[str]]:
    """`pod` (metadata maps always present) and `resources` for one template, plus quantity notes."""
    metadata = _string_map(template.get("metadata"))
    spec = _string_map(template.get("spec"))
    pod = {
        "metadata": {
            "labels": _string_map(metadata.get("labels")),
            "annotations": _string_map(metadata.get("annotations")),
        },
        "spec": spec,
    }
    resources, notes = effective_resources(spec)
    return pod, resources, notes


def _string_map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
