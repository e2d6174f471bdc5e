"""`add-topology-spread`: spread a workload's pods across zones, hosts or racks."""

from collections.abc import Mapping
from typing import Any

from webhook.actions.base import ActionContext, ActionSkipped, ActionSpec, Param, ensure_list
from webhook.json_copy import copy_json
from webhook.names import qualified_name_error
from webhook.typing import JSONObject


def add_topology_spread(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    """Append a constraint unless one with the same topologyKey and whenUnsatisfiable exists."""
    key = (params["topologyKey"], params["whenUnsatisfiable"])
    for existing in (template.get("spec") or {}).get("topologySpreadConstraints") or []:
        if isinstance(existing, dict) and (existing.get("topologyKey"), existing.get("whenUnsatisfiable")) == key:
            return False
    selector = params.get("labelSelector") or context.default_selector(template)
    if selector is None:
        raise ActionSkipped("no labelSelector given and none can be derived from the workload")
    overlap = set(params.get("matchLabelKeys") or []) & _selector_keys(selector)
    if overlap:
        raise ActionSkipped(f"matchLabelKeys {sorted(overlap)} also in the labelSelector")
    constraint: JSONObject = {
        "maxSkew": params["maxSkew"],
        "topologyKey": params["topologyKey"],
        "whenUnsatisfiable": params["whenUnsatisfiable"],
        "labelSelector": copy_json(selector),
    }
    for optional in ("minDomains", "matchLabelKeys", "nodeAffinityPolicy", "nodeTaintsPolicy"):
        if params.get(optional):
            constraint[optional] = copy_json(params[optional])
    ensure_list(template, "spec", "topologySpreadConstraints").append(constraint)
    return True


def _selector_keys(selector: JSONObject) -> set[str]:
    keys = set(selector.get("matchLabels") or {})
    keys.update(item["key"] for item in selector.get("matchExpressions") or [])
    return keys


def _check(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    if params.get("minDomains") is not None and params["whenUnsatisfiable"] != "DoNotSchedule":
        return [("minDomains", "requires whenUnsatisfiable DoNotSchedule")]
    return []


POLICIES = ("Honor", "Ignore")

SPECS = (
    ActionSpec(
        name="add-topology-spread",
        apply=add_topology_spread,
        params=(
            Param("topologyKey", "string", required=True, check=qualified_name_error),
            Param("maxSkew", "integer", default=1, minimum=1),
            Param("whenUnsatisfiable", "enum", default="DoNotSchedule", choices=("DoNotSchedule", "ScheduleAnyway")),
            Param("minDomains", "integer", minimum=1),
            Param("labelSelector", "selector"),
            Param("matchLabelKeys", "keys", check=qualified_name_error),
            Param("nodeAffinityPolicy", "enum", choices=POLICIES),
            Param("nodeTaintsPolicy", "enum", choices=POLICIES),
        ),
        cross_check=_check,
        own_pods="keyed-elsewhere",
    ),
)
