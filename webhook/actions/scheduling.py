"""`set-scheduler-name` and `set-priority-class`: single-valued fields of the pod spec."""

from collections.abc import Mapping
from typing import Any

from webhook.actions.base import ActionContext, ActionSpec, Param, ensure_map
from webhook.support.names import dns1123_subdomain_error
from webhook.support.typing import JSONObject

DEFAULT_SCHEDULER = "default-scheduler"


def set_scheduler_name(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    """Set `spec.schedulerName` when unset or the default; another scheduler already chosen is a conflict."""
    return apply_scheduler_name(template, params["schedulerName"], context)


def apply_scheduler_name(template: JSONObject, name: str, context: ActionContext) -> bool:
    """Shared with gang scheduling, which sets its scheduler's name under the same conflict rule."""
    spec = ensure_map(template, "spec")
    if spec.get("schedulerName") == DEFAULT_SCHEDULER and name != DEFAULT_SCHEDULER:
        spec["schedulerName"] = name
        return True
    return context.set_scalar(spec, "schedulerName", name, "schedulerName", field="spec.schedulerName",
                              path=("spec", "schedulerName"))


def set_priority_class(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    """Set `spec.priorityClassName` when unset; drop the priority fields the class will determine.

    On a bare Pod the Priority admission plugin has already written `priority` and `preemptionPolicy`, and
    in a cluster with a `globalDefault` PriorityClass also that class's name (which therefore counts as
    unset); the API server rejects a Pod whose class and integer priority disagree
    (fixtures, reactions i and i3). Priority admission fills both in again from the new class.
    """
    spec = ensure_map(template, "spec")
    wanted = params["priorityClassName"]
    defaulted = context.default_priority_class
    if defaulted is not None and spec.get("priorityClassName") == defaulted and wanted != defaulted:
        spec.pop("priorityClassName")  # written by the Priority plugin from the cluster's globalDefault class
    if context.set_scalar(spec, "priorityClassName", wanted, "priorityClassName", field="spec.priorityClassName",
                          path=("spec", "priorityClassName")):
        spec.pop("priority", None)
        spec.pop("preemptionPolicy", None)
        return True
    return False


SPECS = (
    ActionSpec(
        name="set-scheduler-name",
        apply=set_scheduler_name,
        params=(Param("schedulerName", "string", required=True, check=dns1123_subdomain_error),),
    ),
    ActionSpec(
        name="set-priority-class",
        apply=set_priority_class,
        params=(Param("priorityClassName", "string", required=True, check=dns1123_subdomain_error),),
    ),
)
