"""`add-gang-labels`: the group identity and size a gang scheduler needs, on every member pod.

Keys a template already carries are never replaced (unless the rule says `override: true`): a user who
named the group by hand keeps it, and Placer fills in only the missing companions. The scheduler's own name
is set with the same conflict rule as `set-scheduler-name`.
"""

import re
from collections.abc import Mapping
from typing import Any

from webhook.actions.base import BOOLEAN, ActionContext, ActionSpec, Param, child_map, ensure_map
from webhook.actions.native_gang import native_gang
from webhook.actions.scheduling import apply_scheduler_name
from webhook.gang.flavours import FLAVOURS, YUNIKORN_TASK_GROUP_NAME, YUNIKORN_TASK_GROUPS, Flavour, Key
from webhook.gang.identity import Derived, group_name, group_size
from webhook.gang.members import left_out_of_gang
from webhook.gang.native import NATIVE
from webhook.gang.native_operators import PER_GROUP, SHAPES
from webhook.gang.pod_groups import MIN_MEMBER_ANNOTATION, OWNER_KINDS, POD_GROUP_LABEL
from webhook.gang.yunikorn import task_groups
from webhook.support.names import dns1123_subdomain_error, label_value_error
from webhook.support.typing import JSONObject, as_map

KEEPS_COSCHEDULING = frozenset(kind for _, kind in OWNER_KINDS)
"""Kinds whose scheduler-plugins PodGroup Placer keeps (operator resources are marked for native gangs only)."""
PER_GROUP_KINDS = frozenset(shape.kind for shape in SHAPES.values() if shape.per == PER_GROUP)
"""Kinds whose gangs are its groups, not the whole resource (LeaderWorkerSet): one label on the shared templates
cannot say which group a pod is in, so only the native flavour (each pod names its group at creation) handles
them."""
_LABEL_CHARACTERS = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def group_name_error(value: str) -> str | None:
    """Label-value characters; longer names are allowed and truncated with a hash suffix."""
    if not _LABEL_CHARACTERS.match(value):
        return "must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    return None


def add_gang_labels(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    flavour = FLAVOURS[params["scheduler"]]
    if context.gang is None:
        return False
    facts = context.gang()
    this = facts.template(context.template)
    if this is not None and not this.gang_member:
        return False  # e.g. a RayJob's submitter: it starts after the gang and is not counted in it
    if facts.kind in PER_GROUP_KINDS and flavour.name != NATIVE:
        context.conflict(f"{facts.kind}: each group (a leader and its workers) is a gang of its own, which only "
                         f"scheduler native names per group; {flavour.name} keys left out")
        return False
    out = left_out_of_gang(flavour, facts, context.template)
    if out is not None:  # made once another member runs: never counted (`webhook.gang.members`)
        context.notes.append(f"{flavour.name} gang: {out}; it gets the scheduler and queue, not the group")
        return _scheduler_and_queue(template, params, context, flavour)
    derived_key = (flavour.name, params.get("groupName"), params.get("minAvailable"))
    if derived_key not in facts.derived:
        group = group_name(flavour, params.get("groupName"), facts)
        facts.derived[derived_key] = (group, group_size(flavour, params.get("minAvailable"), group, facts))
    group, size = facts.derived[derived_key]
    if flavour.name == NATIVE:
        return native_gang(template, params, context, facts, group=group.value)
    writes: list[tuple[Key, str]] = [(flavour.group, group.value)]
    if flavour.queue is not None and params.get("queue"):
        writes.append((flavour.queue, params["queue"]))
    if flavour.size is not None:
        if size is not None:
            writes.append((flavour.size, size.value))
        elif _read(template, flavour.size) is None:
            context.conflict(
                f"group size of {group.value} is unknown ({facts.kind} does not say how many pods it runs): "
                f"{flavour.size.name} left out; set minAvailable"
            )
    if flavour.task_groups:
        writes.extend(_task_group_writes(template, params, context, group.value, size))
    changed = False
    for key, value in writes:
        changed = _write(template, key, value, context) or changed
    scheduler = params.get("schedulerName") or flavour.scheduler_name
    if scheduler:
        changed = apply_scheduler_name(template, scheduler, context) or changed
    if params.get("createPodGroup") == "true":
        _mark_for_pod_group(params, context, group.value, facts.kind)
    return changed


def _scheduler_and_queue(template: JSONObject, params: Mapping[str, Any], context: ActionContext,
                         flavour: Flavour) -> bool:
    """What a pod outside the gang still needs: the gang's scheduler and, where it has one, its queue."""
    changed = False
    if flavour.queue is not None and params.get("queue"):
        changed = _write(template, flavour.queue, params["queue"], context)
    scheduler = params.get("schedulerName") or flavour.scheduler_name
    if scheduler:
        changed = apply_scheduler_name(template, scheduler, context) or changed
    return changed


def _mark_for_pod_group(params: Mapping[str, Any], context: ActionContext, group: str, kind: str) -> None:
    """Ask the controller for the gang's PodGroup: mark the workload itself (`webhook.gang.pod_groups`)."""
    marks = context.workload_marks
    if marks is None or kind not in KEEPS_COSCHEDULING:
        context.conflict(
            f"createPodGroup: a {kind} cannot own a PodGroup Placer keeps; create PodGroup {group} yourself")
        return
    marks[("labels", POD_GROUP_LABEL)] = group
    minimum = params.get("minAvailable")
    marks[("annotations", MIN_MEMBER_ANNOTATION)] = str(minimum) if minimum is not None else None


def _task_group_writes(
    template: JSONObject, params: Mapping[str, Any], context: ActionContext, group: str, size: Derived | None
) -> list[tuple[Key, str]]:
    assert context.gang is not None
    facts = context.gang()
    total = int(size.value) if size is not None else None
    groups = task_groups(facts, group, total)
    if groups is None:
        if _read(template, YUNIKORN_TASK_GROUPS) is None:
            context.conflict(
                f"group size of {group} is unknown: YuniKorn task groups left out; set minAvailable"
            )
        return []
    if params.get("minAvailable") is not None and len(facts.members) > 1:
        context.conflict(
            "minAvailable is not split across YuniKorn task groups: each uses its template's count"
        )
    name = groups.names.get(context.template)
    if name is None:
        return []
    return [(YUNIKORN_TASK_GROUP_NAME, name), (YUNIKORN_TASK_GROUPS, groups.definition)]


def _read(template: JSONObject, key: Key) -> Any:
    return as_map(child_map(template, "metadata", key.where)).get(key.name)


def _write(template: JSONObject, key: Key, value: str, context: ActionContext) -> bool:
    target = ensure_map(template, "metadata", key.where)
    if key.where == "labels" and context.keeps_label(target, key.name, value):
        return False
    return context.set_scalar(target, key.name, value, f"{key.where[:-1]} {key.name}")


def _cross_check(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    flavour: Flavour = FLAVOURS[params["scheduler"]]
    problems = []
    if params.get("queue") and flavour.queue is None:
        problems.append(("queue", f"{flavour.name} has no queue key (queues are set on its PodGroup)"))
    if params.get("createPodGroup") == "true" and flavour.name == NATIVE:
        problems.append(("createPodGroup",
                         "only for scheduler coscheduling (native: Placer always keeps the PodGroup)"))
    elif params.get("createPodGroup") == "true" and flavour.name != "coscheduling":
        problems.append(("createPodGroup", f"only for scheduler coscheduling ({flavour.name} makes its own groups)"))
    return problems


SPECS = (
    ActionSpec(
        name="add-gang-labels",
        apply=add_gang_labels,
        params=(
            Param("scheduler", "enum", required=True, choices=tuple(FLAVOURS)),
            Param("groupName", "string", check=group_name_error),
            Param("minAvailable", "integer", minimum=1),
            Param("queue", "string", check=label_value_error),
            Param("schedulerName", "string", check=dns1123_subdomain_error),
            Param("createPodGroup", "enum", default="false", choices=BOOLEAN),
        ),
        cross_check=_cross_check,
        per_pod=True,
    ),
)
