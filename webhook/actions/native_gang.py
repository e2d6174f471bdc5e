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

from webhook.actions.base import ActionContext, ensure_map
from webhook.actions.scheduling import apply_scheduler_name
from webhook.gang.facts import GangFacts
from webhook.gang.native import (
    GATES_HINT,
    NATIVE,
    NOT_SERVED,
    VERSIONS,
    pod_group_name,
    scheduling_group,
    set_scheduling_group,
)
from webhook.gang.native_operators import GROUP_ANNOTATION, SHAPES, shape_named, template_marks
from webhook.gang.pod_groups import (
    MIN_MEMBER_ANNOTATION,
    OWNER_KINDS,
    POD_GROUP_API_ANNOTATION,
    POD_GROUP_LABEL,
)
from webhook.support.typing import JSONObject
from webhook.workloads import default_workload_table


def native_gang(template: JSONObject, params: Mapping[str, Any], context: ActionContext, facts: GangFacts,
                *, group: str, sized: bool) -> bool:
    """Name the gang's PodGroup on the template and ask the controller for it; False (and the reason among
    the rule's conflicts) when the template is left as it is."""
    reason = _left_alone(template, context, facts, sized, pod_group_name(group))
    if reason is not None:
        context.conflict(f"native gang: {reason}")
        return False
    marks = context.workload_marks
    assert marks is not None  # checked in _left_alone
    name = pod_group_name(group)
    shape = shape_named(facts.kind)
    if shape is None:
        changed = set_scheduling_group(template, name)
    else:  # each pod names its group at its own admission (`webhook.gang.native_operators`)
        annotations = ensure_map(template, "metadata", "annotations")
        changed = False
        for key, value in template_marks(shape, name).items():
            changed = context.set_scalar(annotations, key, value, f"annotation {key}") or changed
    marks[("labels", POD_GROUP_LABEL)] = name
    marks[("annotations", POD_GROUP_API_ANNOTATION)] = NATIVE
    minimum = params.get("minAvailable")
    marks[("annotations", MIN_MEMBER_ANNOTATION)] = str(minimum) if minimum is not None else None
    if params.get("schedulerName"):
        changed = apply_scheduler_name(template, params["schedulerName"], context) or changed
    return changed


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


def _left_alone(template: JSONObject, context: ActionContext, facts: GangFacts, sized: bool,
                name: str) -> str | None:
    existing = scheduling_group(template)
    if existing is not None:
        return f"spec.schedulingGroup already names {existing}: left alone (the pods keep the group they name)"
    if facts.managed:
        return f"{facts.managed}: left alone"
    if shape_named(facts.kind) is not None:
        named = _named_elsewhere(facts, name)
        if named is not None:
            return named
    if facts.native_version == NOT_SERVED:
        return (f"the API server serves no PodGroup API (scheduling.k8s.io {' or '.join(VERSIONS)}): admitted "
                f"unchanged, pods schedule one by one; {GATES_HINT}")
    if context.workload_marks is None:
        return (f"Placer keeps kube-scheduler PodGroups for {_kept_kinds()}; this {facts.kind} is admitted unchanged "
                "(its pods would wait for a group no one creates)")
    if not sized:
        return (f"group size unknown ({facts.kind} does not say how many pods it runs): admitted unchanged; "
                "set minAvailable")
    return None


def _kept_kinds() -> str:
    """The kinds whose PodGroups Placer keeps: the built-in owners and the operator kinds it handles."""
    table = default_workload_table()
    operators = [kind for group, kind in SHAPES if table.lookup(group, kind) is not None]
    return ", ".join([*(kind for _, kind in OWNER_KINDS), *operators])
