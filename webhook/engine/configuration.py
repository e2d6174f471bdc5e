"""Rules that load but cannot do what they say in the cluster as it is: said at load time and on admission.

Two configurations compile and then silently do less than the user meant:

- A coscheduling gang (`add-gang-labels` with `scheduler: coscheduling`) whose pods keep `default-scheduler`:
  scheduler-plugins' Coscheduling plugin waits for the whole group only in the scheduler profile that enables
  it, which is usually a second scheduler (`scheduler-plugins-scheduler` in scheduler-plugins' own install).
  The pods then start one by one, as if no gang were asked for. Setting the scheduler in the same rule
  (`schedulerName` parameter, set under `set-scheduler-name`'s conflict rule) enforces it.
- `createPodGroup: true` while the API server does not serve PodGroups (scheduler-plugins' CRD
  `podgroups.scheduling.x-k8s.io` is not installed): the controller cannot create the group the pods name.

`placer lint` prints the first as a warning, the controller puts both on the policy's `Healthy` condition,
and an admission that meets them says so in a warning naming the rule.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.actions.scheduling import DEFAULT_SCHEDULER
from webhook.gang.flavours import FLAVOURS
from webhook.gang.pod_groups import API_VERSION, POD_GROUP_LABEL
from webhook.policy.model import Policy, Rule
from webhook.support.typing import JSONObject, as_map

GANG_ACTION = "add-gang-labels"
SET_SCHEDULER_ACTION = "set-scheduler-name"
COSCHEDULING = "coscheduling"
GANG_NOT_ENFORCED = "GangNotEnforced"
POD_GROUPS_NOT_SERVED = "PodGroupCRDNotServed"
POD_GROUP_CRD = f"podgroups.{API_VERSION.split('/')[0]}"
"""The CRD scheduler-plugins installs for PodGroups (its `manifests/crds`)."""
SCHEDULER_HINT = "set schedulerName in this rule's parameters (e.g. scheduler-plugins-scheduler)"


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule that cannot work as written: `reason` is the condition reason, `message` starts with the rule."""

    rule: str
    reason: str
    message: str


def gang_not_enforced(policy: Policy) -> list[Finding]:
    """Coscheduling gang rules that leave the scheduler as it is, in a policy where no rule sets it.

    A rule with a `schedulerName` parameter (fixed or computed), or a `set-scheduler-name` rule in the same
    policy, is taken to choose the scheduler; a template that names its scheduler itself is checked on
    admission (`gang_warnings`)."""
    if any(rule.action.name == SET_SCHEDULER_ACTION for rule in policy.rules):
        return []
    return [
        Finding(rule.name, GANG_NOT_ENFORCED,
                f"rule {policy.name}/{rule.name}: coscheduling gang on default-scheduler unless the pods name "
                f"another scheduler: the gang is not enforced and pods start one by one; {SCHEDULER_HINT}")
        for rule in policy.rules if _coscheduling_without_scheduler(rule)
    ]


def creates_pod_groups(policy: Policy) -> list[str]:
    """The rules of the policy that ask the controller for a PodGroup (`createPodGroup: true`)."""
    return [rule.name for rule in policy.rules
            if rule.action.name == GANG_ACTION and _parameter(rule, "createPodGroup") in ("true", True)]


def pod_groups_not_served(policy: Policy) -> list[Finding]:
    """Findings for the rules that want PodGroups, when the API server does not serve them."""
    return [
        Finding(name, POD_GROUPS_NOT_SERVED,
                f"rule {policy.name}/{name}: createPodGroup: the API server does not serve {API_VERSION} "
                f"PodGroups; install scheduler-plugins' CRD {POD_GROUP_CRD}")
        for name in creates_pod_groups(policy)
    ]


def gang_warnings(
    policies: Iterable[Policy], applied: Mapping[str, Iterable[str]], templates: Mapping[str, JSONObject],
    marks: Mapping[tuple[str, str], str | None] | None, *, pod_groups_served: bool | None,
) -> list[str]:
    """Admission warnings: per template a coscheduling gang rule labelled, whether its pods keep
    `default-scheduler`; and whether the PodGroup a rule asked for can be created.

    `applied`: per template slot, the rules (`policy/rule`) that applied; `templates`: each slot's template
    as Placer leaves it; `marks`: what rules put on the workload's metadata (the PodGroup request);
    `pod_groups_served`: what the controller last found (None: not known, nothing said)."""
    wants_group = pod_groups_served is False and marks is not None and bool(marks.get(("labels", POD_GROUP_LABEL)))
    if not wants_group:
        for placed in templates.values():
            if _in_coscheduling_gang(placed):
                break
        else:
            return []  # the usual admission: no gang here, nothing to look up
    rules = {f"{policy.name}/{rule.name}": rule for policy in policies for rule in policy.rules}
    warnings = []
    for slot, names in applied.items():
        template = templates.get(slot)
        if template is None:
            continue
        scheduler = as_map(template.get("spec")).get("schedulerName")
        if scheduler not in (None, "", DEFAULT_SCHEDULER) or not _in_coscheduling_gang(template):
            continue  # another scheduler, or not a member (a RayJob's submitter)
        for name in names:
            rule = rules.get(name)
            if rule is not None and _is_coscheduling(rule):
                warnings.append(f"rule {name}: coscheduling gang on {DEFAULT_SCHEDULER}: not enforced, pods start "
                                f"one by one; {SCHEDULER_HINT}")
    if wants_group:
        wanting = [name for names in applied.values() for name in names
                   if (rule := rules.get(name)) is not None and rule.action.name == GANG_ACTION
                   and _parameter(rule, "createPodGroup") in ("true", True)]
        for name in dict.fromkeys(wanting):
            warnings.append(f"rule {name}: createPodGroup: PodGroups ({API_VERSION}) are not served, so none is "
                            f"created; install scheduler-plugins' CRD {POD_GROUP_CRD}")
    return warnings


def _in_coscheduling_gang(template: JSONObject) -> bool:
    key = FLAVOURS[COSCHEDULING].group
    return bool(as_map(as_map(template.get("metadata")).get(key.where)).get(key.name))


def _is_coscheduling(rule: Rule) -> bool:
    return rule.action.name == GANG_ACTION and _parameter(rule, "scheduler") == COSCHEDULING


def _coscheduling_without_scheduler(rule: Rule) -> bool:
    return _is_coscheduling(rule) and not rule.raw_parameters.get("schedulerName") and (
        "schedulerName" not in rule.parameter_expressions)


def _parameter(rule: Rule, name: str) -> Any:
    value = rule.parameters.get(name)
    return value if value is not None else rule.raw_parameters.get(name)
