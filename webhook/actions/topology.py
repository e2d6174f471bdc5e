"""`add-topology-spread`: spread a workload's pods across zones, hosts or racks.

By default a constraint counts the workload's own pods of the new pod's revision (`matchLabelKeys:
[pod-template-hash]` on a Deployment): the scheduler counts only pods that match the selector and carry the
new pod's value of each key (kube-apiserver merges them into the selector when it creates the Pod,
pkg/registry/core/pod/strategy.go mutateTopologySpreadConstraints; MatchLabelKeysInPodTopologySpread beta
and on by default since 1.27, pkg/features/kube_features.go).
"""

from collections.abc import Mapping
from typing import Any

from webhook.actions.base import ActionContext, ActionSkipped, ActionSpec, Param, ensure_list, selector_keys
from webhook.support.json_copy import copy_json
from webhook.support.names import qualified_name_error
from webhook.support.typing import JSONObject


def add_topology_spread(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    """Append a constraint unless one with the same topologyKey and whenUnsatisfiable exists."""
    key = (params["topologyKey"], params["whenUnsatisfiable"])
    for existing in (template.get("spec") or {}).get("topologySpreadConstraints") or []:
        if isinstance(existing, dict) and (existing.get("topologyKey"), existing.get("whenUnsatisfiable")) == key:
            return False
    selector, match_label_keys = context.pod_selection(template, params)
    overlap = set(match_label_keys) & selector_keys(selector)
    if overlap:
        raise ActionSkipped(f"matchLabelKeys {sorted(overlap)} also in the labelSelector")
    constraint: JSONObject = {
        "maxSkew": params["maxSkew"],
        "topologyKey": params["topologyKey"],
        "whenUnsatisfiable": params["whenUnsatisfiable"],
        "labelSelector": copy_json(selector),
    }
    if match_label_keys:
        constraint["matchLabelKeys"] = match_label_keys
    for optional in ("minDomains", "nodeAffinityPolicy", "nodeTaintsPolicy"):
        if params.get(optional):
            constraint[optional] = copy_json(params[optional])
    ensure_list(template, "spec", "topologySpreadConstraints").append(constraint)
    return True


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
