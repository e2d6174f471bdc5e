"""Native gangs of operator resources, after the rules: a member Pod names its group; explain names them all.

A Pod an operator made from a template Placer marked (`webhook.gang.native_operators.GROUP_ANNOTATION`) gets
`spec.schedulingGroup` at its own CREATE: the field is immutable, so CREATE is the only moment
(kubernetes/kubernetes `staging/src/k8s.io/api/core/v1/types.go`, `PodSpec.SchedulingGroup`: "This field is
immutable"). Such a Pod usually passes the rules untouched (its template came through Placer), which is why
this step runs on the engine's answer whatever the rules did. Nothing is named when the API server serves no
PodGroup API (the pod would wait for a group that cannot exist), nor when the Pod already names a group.

On the operator resource itself, explain lists the PodGroups Placer's controller will keep for it.

A Job a CronJob makes from a template Placer marked for a group per run (`PER_RUN`) names a PodGroup of its
own, the Job's name, on its template (a Job's template is immutable after its CREATE, so again the only
moment) and carries the marks the controller watches, so each run is a gang of its own, owned by its Job
and garbage-collected with it: runs that overlap (`concurrencyPolicy: Allow`) never share one.
"""

from webhook.engine.outcome import Mutation
from webhook.engine.patch_assembly import marks_patch
from webhook.engine.request import AdmissionRequest
from webhook.gang.native import (
    NATIVE,
    NOT_SERVED,
    POD_GROUP_API_ANNOTATION,
    pod_group_name,
    scheduling_group,
)
from webhook.gang.native_members import pod_left_out
from webhook.gang.native_operators import (
    GROUP_ANNOTATION,
    PER_ANNOTATION,
    PER_RUN,
    marked_groups,
    member_group,
    operator_shape,
)
from webhook.gang.pod_groups import MIN_MEMBER_ANNOTATION, POD_GROUP_LABEL
from webhook.support.patches import apply_sharing
from webhook.support.typing import JSONObject, JSONPatch, as_map
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
    if kind.kind == "Job":
        return _name_run_group(obj, native_version, mutation)
    if operator_shape(kind) is not None and mutation.patch:
        _note_groups(kind, apply_sharing(obj, mutation.patch), mutation)
    return mutation


def _name_pod_group(pod: JSONObject, native_version: str | None, mutation: Mutation) -> Mutation:
    name, why = member_group(pod)
    if not why:
        return mutation  # not a member of an operator's native gang: the usual Pod
    out = pod_left_out(pod)
    if out is not None:
        mutation.notes.append(f"native gang: {out}; no group named")
        return mutation
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


def _name_run_group(job: JSONObject, native_version: str | None, mutation: Mutation) -> Mutation:
    """A Job made from a CronJob's template marked for a group per run: its template names the Job's own
    PodGroup and the Job is marked for the controller (`run_group_patch`)."""
    found = run_group_patch(job, native_version == NOT_SERVED)
    if found is None:
        return mutation
    ops, note = found
    if ops:
        mutation.patch = [*mutation.patch, *ops]
    if mutation.passed_through is not None:
        note = f"{note}; no rule ran: {mutation.passed_through}"
        mutation.passed_through = None
    mutation.notes.append(note)
    if not ops:
        mutation.warnings.append(note)
    return mutation


def run_group_patch(job: JSONObject, not_served: bool) -> tuple[JSONPatch, str] | None:
    """For a Job whose template carries a CronJob's per-run marks: the operations naming the Job's own PodGroup
    on its template and marking the Job for the controller, and what explain says; None for any other Job."""
    template = as_map(as_map(job.get("spec")).get("template"))
    annotations = as_map(as_map(template.get("metadata")).get("annotations"))
    if annotations.get(PER_ANNOTATION) != PER_RUN or not annotations.get(GROUP_ANNOTATION):
        return None
    existing = scheduling_group(template)
    if existing is not None:
        return [], f"native gang: spec.schedulingGroup already names {existing}: left alone"
    if not_served:
        return [], "native gang: the API server serves no PodGroup API: this run is admitted without a group"
    name = as_map(job.get("metadata")).get("name")
    if not isinstance(name, str) or not name:
        return [], "native gang: the Job has no name yet, so no group of its own: admitted without one"
    group = pod_group_name(name)
    spec = as_map(template.get("spec"))
    ops: JSONPatch = [{"op": "add", "path": "/spec/template/spec/schedulingGroup", "value": {"podGroupName": group}}]
    if not spec:
        ops = [{"op": "add", "path": "/spec/template/spec", "value": {"schedulingGroup": {"podGroupName": group}}}]
    marks: dict[tuple[str, str], str | None] = {
        ("labels", POD_GROUP_LABEL): group, ("annotations", POD_GROUP_API_ANNOTATION): NATIVE}
    minimum = annotations.get(MIN_MEMBER_ANNOTATION)
    if isinstance(minimum, str) and minimum.isdigit():
        marks[("annotations", MIN_MEMBER_ANNOTATION)] = minimum
    return [*ops, *marks_patch(job, marks)], (
        f"native gang: spec.schedulingGroup names PodGroup {group}, this run's own (a CronJob's {PER_ANNOTATION}="
        f"{PER_RUN}); kept by Placer's controller and owned by the Job")


def _note_groups(kind: WorkloadKind, after: JSONObject, mutation: Mutation) -> None:
    shape = operator_shape(kind)
    groups = marked_groups(kind, after)
    if shape is None or isinstance(groups, str):
        return
    shown = ", ".join(f"{name} (minCount {size})" for name, size in groups[:SHOWN_GROUPS])
    more = f" and {len(groups) - SHOWN_GROUPS} more" if len(groups) > SHOWN_GROUPS else ""
    mutation.notes.append(f"native gang: {shape.gangs}, kept by Placer's controller and owned by the "
                          f"{kind.kind}: {shown}{more}; each pod names its own at its creation")
