"""`add-gang-labels` with `scheduler: native`: the member pods name kube-scheduler's PodGroup of the gang.

The template gets `spec.schedulingGroup.podGroupName` (an operator's templates get Placer's annotations
instead, and each pod names its group at its own admission: `webhook.gang.native_operators`), and the
workload is marked for the controller, which keeps the PodGroup (`webhook.gang.pod_groups`,
`webhook.cluster.podgroups.pod_groups`, `webhook.cluster.podgroups.native_operators`). A pod naming a
group that never comes stays Pending with no event at all (captured from kube-apiserver v1.36.2), so the
field is written only where the group will exist: never when the API server serves no PodGroup API, never
for a workload Placer cannot keep the group of, never when the size of the gang is unknown. In each of those
cases the object is admitted unchanged and the rule says why (a warning, and `placer apply -o explain`).
"""

from collections.abc import Mapping
from typing import Any

from webhook.actions.base import ActionContext, ActionSkipped, ensure_map
from webhook.actions.scheduling import apply_scheduler_name
from webhook.gang.facts import GangFacts
from webhook.gang.native import (
    GATES_HINT,
    JOB_FIELD,
    JOB_SCHEDULING_MARK,
    NATIVE,
    NO_PODGROUP_API,
    NOT_SERVED,
    POD_GROUP_API_ANNOTATION,
    job_field_stalls,
    pod_group_name,
    scheduling_group,
    set_scheduling_group,
)
from webhook.gang.native_members import left_out
from webhook.gang.native_operators import GROUP_ANNOTATION, PER_GROUP, SHAPES, run_marks, shape_named, template_marks
from webhook.gang.pod_groups import (
    MIN_MEMBER_ANNOTATION,
    OWNER_KINDS,
    POD_GROUP_LABEL,
)
from webhook.support.typing import JSONObject
from webhook.workloads import default_workload_table


def native_gang(template: JSONObject, params: Mapping[str, Any], context: ActionContext, facts: GangFacts,
                *, group: str) -> bool:
    """Name the gang's PodGroup on the template and ask the controller for it; False (and the reason among
    the rule's conflicts) when the template is left as it is. ActionSkipped when the workload's pods already
    run without a gang (`webhook.gang.native_lifecycle.joins_running`): the warning and the report say why."""
    name = pod_group_name(group)
    reason = _left_alone(template, context, facts, params.get("minAvailable"), name)
    if reason is not None:
        context.conflict(f"native gang: {reason}")
        return False
    if _counts_part(facts) and context.template not in (facts.per_gang or {}):
        context.notes.append(f"native gang: {left_out(facts.kind, context.template)}")
        return False
    if facts.running is not None:
        raise ActionSkipped(f"native gang: {facts.running}")
    marks = context.workload_marks
    assert marks is not None  # checked in _left_alone
    shape = shape_named(facts.kind)
    if facts.job_gangs and facts.kind in ("Job", "CronJob"):
        handed = _job_field(template, params, context, facts)
        if handed is not None:
            return handed
    if facts.kind == "CronJob":  # a group per run: each Job names its own at its creation (`engine.native_pods`)
        annotations = ensure_map(template, "metadata", "annotations")
        changed = False
        for key, value in run_marks(name, params.get("minAvailable")).items():
            changed = context.set_scalar(annotations, key, value, f"annotation {key}") or changed
        context.notes.append("native gang: each run is a gang of its own: its Job names a PodGroup of the Job's "
                             "name at its creation, kept by Placer's controller and owned by that Job")
    elif shape is None:
        changed = set_scheduling_group(template, name)
    else:  # each pod names its group at its own admission (`webhook.gang.native_operators`)
        annotations = ensure_map(template, "metadata", "annotations")
        changed = False
        for key, value in template_marks(shape, name).items():
            changed = context.set_scalar(annotations, key, value, f"annotation {key}") or changed
    if facts.kind != "CronJob":
        marks[("labels", POD_GROUP_LABEL)] = name
        marks[("annotations", POD_GROUP_API_ANNOTATION)] = NATIVE
        minimum = params.get("minAvailable")
        marks[("annotations", MIN_MEMBER_ANNOTATION)] = str(minimum) if minimum is not None else None
    if params.get("schedulerName"):
        changed = apply_scheduler_name(template, params["schedulerName"], context) or changed
    return changed


def _job_field(template: JSONObject, params: Mapping[str, Any], context: ActionContext, facts: GangFacts,
               ) -> bool | None:
    """Where the Job controller keeps Jobs' gangs (1.37+, WorkloadWithJob): the Job's own `spec.scheduling` (a
    CronJob's job template's, so each run's Job gets it) asks it for the gang, and Placer makes no PodGroup,
    so one gang is never kept twice. Placer cannot lower that `minCount` as pods finish (it never writes a
    workload, and the Job controller keeps its PodGroup to the Job's field: `pkg/controller/job`,
    `syncGangMinCount`), so only a Job that makes no pod once others have finished is handed over
    (`webhook.gang.native.job_field_stalls`). None: not handed over (the reason is a note; Placer keeps the
    PodGroup, and the Job controller stands aside for a template naming one)."""
    marks = context.workload_marks
    assert marks is not None
    stalls = job_field_stalls(facts.job_spec)
    if stalls is not None:
        context.notes.append(f"native gang: not the Job controller's own gang, whose minCount could not follow "
                             f"the pods left to run: {stalls}; Placer keeps the PodGroup")
        return None
    minimum = params.get("minAvailable")
    size = minimum if minimum is not None else min(gang_sizes(facts) or [0])
    marks[JOB_SCHEDULING_MARK] = str(size)
    marks[("annotations", POD_GROUP_API_ANNOTATION)] = JOB_FIELD
    context.notes.append(f"native gang: the Job controller keeps the gang (spec.scheduling, minCount {size}); "
                         "Placer makes no PodGroup of its own")
    if params.get("schedulerName"):
        return apply_scheduler_name(template, params["schedulerName"], context)
    return False


def _counts_part(facts: GangFacts) -> bool:
    """Whether the resource is one gang that counts only some of its member templates' pods (a Spark
    application's executors: `webhook.gang.native_members`)."""
    shape = shape_named(facts.kind)
    return shape is not None and shape.per is None and facts.per_gang is not None


def gang_sizes(facts: GangFacts) -> list[int] | None:
    """The size of each native gang the workload holds (one per JobSet child Job's replicated job, per LWS
    group, else one), None when unknown."""
    shape = shape_named(facts.kind)
    if shape is None or facts.per_gang is None:
        return None if facts.size is None else [facts.size]
    if shape.per is None or shape.per == PER_GROUP:
        return [sum(facts.per_gang.values())]
    return [pods for pods in facts.per_gang.values() if pods > 0]


def _named_elsewhere(facts: GangFacts, name: str) -> str | None:
    """A member template of an operator resource that names another group already: the whole resource is left
    alone, since the gang Placer would keep counts that template's pods, which would never join it."""
    for member in facts.members:
        marked = member.annotations.get(GROUP_ANNOTATION)
        if member.scheduling_group is not None:
            found = f"spec.schedulingGroup {member.scheduling_group}"
        elif marked is not None and marked != name:
            found = f"{GROUP_ANNOTATION} {marked}"
        else:
            continue
        return (f"template {member.name} already names {found}: the whole {facts.kind} left alone (its pods "
                "would never join the gang Placer keeps)")
    return None


def _left_alone(template: JSONObject, context: ActionContext, facts: GangFacts, minimum: int | None,
                name: str) -> str | None:
    existing = scheduling_group(template)
    if existing is not None and existing != name:  # Placer's own group stays, marks and all
        return f"spec.schedulingGroup already names {existing}: left alone (the pods keep the group they name)"
    if facts.managed:
        return f"{facts.managed}: left alone"
    if shape_named(facts.kind) is not None:
        named = _named_elsewhere(facts, name)
        if named is not None:
            return named
    if facts.native_version == NOT_SERVED:
        return f"{NO_PODGROUP_API}: admitted unchanged, pods schedule one by one; {GATES_HINT}"
    if context.workload_marks is None:
        return (f"Placer keeps kube-scheduler PodGroups for {_kept_kinds()}; this {facts.kind} is admitted unchanged "
                "(its pods would wait for a group no one creates)")
    known = [size for size in gang_sizes(facts) or [] if size > 0]
    if not known:
        if minimum is not None:
            return None
        return (f"group size unknown ({facts.kind} does not say how many pods it runs): admitted unchanged; "
                "set minAvailable")
    if minimum is not None and minimum > min(known):
        return (f"minAvailable {minimum} is more than the {min(known)} pods that exist together in a gang of this "
                f"{facts.kind}: the gang could never be complete; admitted unchanged")
    return None


def _kept_kinds() -> str:
    """The kinds whose PodGroups Placer keeps: the built-in owners and the operator kinds it handles."""
    table = default_workload_table()
    operators = [kind for group, kind in SHAPES if table.lookup(group, kind) is not None]
    return ", ".join([*(kind for _, kind in OWNER_KINDS), *operators])
