"""YuniKorn task groups: one per member pod template, with each member's resource requests.

YuniKorn reserves `minMember` placeholders of `minResource` each per task group before the real pods are
bound (yunikorn-k8shim, user guide "Gang Scheduling"); `minResource` is therefore per pod, not a total.
"""

import json
from dataclasses import dataclass

from webhook.gang.facts import GangFacts, MemberTemplate

_BINARY = (("Ti", 1024**4), ("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024))


@dataclass(frozen=True, slots=True)
class TaskGroups:
    """The `task-groups` annotation and the task-group name of each member template."""

    definition: str
    names: dict[str, str]
    """Template name -> task-group name."""


def quantity(resource: str, value: float) -> str:
    """A canonical Kubernetes quantity: cpu in cores or millicores, bytes with the largest exact binary suffix."""
    millis = round(value * 1000)
    if resource == "cpu" or millis % 1000:
        return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
    whole = millis // 1000
    for suffix, factor in _BINARY:
        if whole and whole % factor == 0:
            return f"{whole // factor}{suffix}"
    return str(whole)


def task_groups(facts: GangFacts, group: str, total: int | None) -> TaskGroups | None:
    """Task groups of the workload's gang; None when a member template's count is unknown.

    A workload with one member template has one task group, named after the gang, of `total` members;
    several templates (driver/executor, Master/Worker, head/workers) give one task group each, named after
    the role as KubeRay's own YuniKorn integration does (`headgroup`, worker group names).
    """
    members = facts.members
    if not members:
        return None
    if len(members) == 1:
        if total is None:
            return None
        counts = [(members[0], group, total)]
    else:
        if any(template.members is None for template in members):
            return None
        # A task group of zero members is not valid YuniKorn configuration: a template that starts no pods (a
        # Spark application with dynamic allocation from zero executors) has none, as spark-operator's own
        # integration leaves it out (internal/scheduler/yunikorn/scheduler.go, Schedule).
        counts = [(template, _task_group_name(template), template.members) for template in members
                  if template.members]
    definition = [
        {
            "name": name,
            "minMember": count,
            "minResource": {resource: quantity(resource, value) for resource, value in sorted(t.requests.items())},
        }
        for t, name, count in counts
    ]
    return TaskGroups(
        json.dumps(definition, separators=(",", ":")),
        {template.name: _task_group_name(template) for template in members} if len(members) > 1 else {
            members[0].name: group},
    )


def _task_group_name(template: MemberTemplate) -> str:
    return template.name.lower()
