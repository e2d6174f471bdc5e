"""Native gangs of operator resources, after the rules: a member Pod names its group; explain names them all.

A Pod an operator made from a template Placer marked (`webhook.gang.native_operators.GROUP_ANNOTATION`) gets
`spec.schedulingGroup` at its own CREATE: the field is immutable, so CREATE is the only moment
(kubernetes/kubernetes `staging/src/k8s.io/api/core/v1/types.go`, `PodSpec.SchedulingGroup`: "This field is
immutable"). Such a Pod usually passes the rules untouched (its template came through Placer), which is why
this step runs on the engine's answer whatever the rules did. Nothing is named when the API server serves no
PodGroup API (the pod would wait for a group that cannot exist), nor when the Pod already names a group.

On the operator resource itself, explain lists the PodGroups Placer's controller will keep for it.
"""

from webhook.engine.outcome import Mutation
from webhook.engine.request import AdmissionRequest
from webhook.gang.native import NOT_SERVED, scheduling_group
from webhook.gang.native_operators import marked_groups, member_group, operator_shape
from webhook.support.patches import apply_sharing
from webhook.support.typing import JSONObject
from webhook.workloads import WorkloadKind

SHOWN_GROUPS = 8
"""PodGroups named one by one in explain; a JobSet of a thousand Jobs is summed up after these."""


def with_native_groups(request: AdmissionRequest, kind: WorkloadKind, native_version: str | None,
                       mutation: Mutation) -> Mutation:
    """The engine's answer, with the Pod's group named (a Pod) or the resource's PodGroups noted (an operator
    resource); unchanged for everything else and for any denial."""
    obj = request.object
    if obj is None or mutation.denial is not None or request.operation != "CREATE":
        return mutation
    if kind.kind == "Pod":
        return _name_pod_group(obj, native_version, mutation)
    if operator_shape(kind) is not None and mutation.patch:
        _note_groups(kind, apply_sharing(obj, mutation.patch), mutation)
    return mutation


def _name_pod_group(pod: JSONObject, native_version: str | None, mutation: Mutation) -> Mutation:
    name, why = member_group(pod)
    if not why:
        return mutation  # not a member of an operator's native gang: the usual Pod
    existing = scheduling_group(pod)
    if existing is not None:
        mutation.notes.append(f"native gang: spec.schedulingGroup already names {existing}: left alone")
        return mutation
    if name is None or native_version == NOT_SERVED:
        reason = why if name is None else "the API server serves no PodGroup API: no group named"
        mutation.notes.append(f"native gang: {reason}")
        mutation.warnings.append(f"native gang: {reason}; the pod schedules by itself")
        return mutation
    parent = [] if isinstance(pod.get("spec"), dict) else [{"op": "add", "path": "/spec", "value": {}}]
    mutation.patch = [*mutation.patch, *parent,
                      {"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": name}}]
    note = f"native gang: spec.schedulingGroup names PodGroup {name} ({why})"
    if mutation.passed_through is not None:
        note = f"{note}; no rule ran: {mutation.passed_through}"
        mutation.passed_through = None
    mutation.notes.append(note)
    return mutation


def _note_groups(kind: WorkloadKind, after: JSONObject, mutation: Mutation) -> None:
    shape = operator_shape(kind)
    groups = marked_groups(kind, after)
    if shape is None or isinstance(groups, str):
        return
    shown = ", ".join(f"{name} (minCount {size})" for name, size in groups[:SHOWN_GROUPS])
    more = f" and {len(groups) - SHOWN_GROUPS} more" if len(groups) > SHOWN_GROUPS else ""
    mutation.notes.append(f"native gang: {shape.gangs}, kept by Placer's controller and owned by the "
                          f"{kind.kind}: {shown}{more}; each pod names its own at its creation")
