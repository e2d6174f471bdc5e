"""The CEL variables of one admission, built once per request and pod template."""

from webhook.engine.request import AdmissionRequest
from webhook.pods.resources import effective_resources
from webhook.support.typing import JSONObject, as_map
from webhook.workloads import WorkloadKind, controller_reference


def workload_variable(request: AdmissionRequest, kind: WorkloadKind, obj: JSONObject) -> JSONObject:
    """`workload`: identity, labels and replica count; `name` falls back to `generateName`.

    A Pod that a controller made is one replica of its controller's workload: `workload` names the controller
    (kind, apiVersion, name, from the owner reference) and has no `replicas`, which the Pod cannot know. So
    `workload.replicas < 3` does not match the pods of a 5-replica Deployment whose template no rule changed
    (their template would have said the same), where counting the Pod as a workload of one would.
    """
    metadata = as_map(obj.get("metadata"))
    name = metadata.get("name") or metadata.get("generateName") or request.name or ""
    workload: JSONObject = {
        "kind": kind.kind,
        "apiVersion": obj.get("apiVersion") or "/".join(filter(None, (request.group, request.version))),
        "name": name if isinstance(name, str) else "",
        "namespace": request.namespace or metadata.get("namespace") or "",
        "labels": as_map(metadata.get("labels")),
        "annotations": as_map(metadata.get("annotations")),
    }
    owner = controller_reference(obj) if kind.kind == "Pod" else None
    if owner is not None:
        for key in ("kind", "apiVersion", "name"):
            workload[key] = str(owner.get(key) or "")
        return workload
    replicas = kind.replicas(obj)
    if replicas is not None:
        workload["replicas"] = replicas
    return workload


def pod_variable(template: JSONObject, quantities: dict[str, float] | None = None,
                 role_labels: tuple[tuple[str, str], ...] = ()) -> tuple[JSONObject, JSONObject, list[str]]:
    """`pod` (metadata maps always present) and `resources` for one template, plus quantity notes;
    `quantities`: the values of quantity strings already read (`effective_resources`); `role_labels`: what the
    operator labels every pod of the template with (`TemplateSlot.role_labels`), shown over the template's."""
    metadata = as_map(template.get("metadata"))
    spec = as_map(template.get("spec"))
    labels = as_map(metadata.get("labels"))
    pod = {
        "metadata": {
            "labels": {**labels, **dict(role_labels)} if role_labels else labels,
            "annotations": as_map(metadata.get("annotations")),
        },
        "spec": spec,
    }
    resources, notes = effective_resources(spec, quantities)
    return pod, resources, notes
