"""`add-node-affinity`, `add-pod-affinity`, `add-pod-anti-affinity`.

Node affinity terms are ORed and the requirements inside a term are ANDed, so a required requirement is
added to every existing term: appending a new term would *widen* the choice of nodes instead of narrowing it.

A pod (anti-)affinity term on the workload's own pods selects those of the new pod's revision by default
(`matchLabelKeys: [pod-template-hash]` on a Deployment): otherwise new pods keep away from old ones that are
about to go (a required term can block the rollout), or join them where they are. kube-apiserver merges the
keys into the selector when it creates the Pod (pkg/registry/core/pod/strategy.go mutatePodAffinity);
MatchLabelKeysInPodAffinity is GA since 1.33 (pkg/features/kube_features.go), so every supported version
(1.34-1.37) accepts the field.
"""

from collections.abc import Mapping
from typing import Any

from webhook.actions.base import (
    ActionContext,
    ActionSkipped,
    ActionSpec,
    Param,
    child_map,
    ensure_list,
    ensure_map,
    selector_keys,
    selector_matches,
)
from webhook.support.json_copy import copy_json
from webhook.support.names import label_value_error, qualified_name_error
from webhook.support.typing import JSONObject

NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
AFFINITY_TYPES = ("required", "preferred")


def add_node_affinity(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    """AND a requirement into every required term, or append a weighted preferred term."""
    requirement: JSONObject = {"key": params["key"], "operator": params["operator"]}
    if params.get("values"):
        requirement["values"] = list(params["values"])
    if params["type"] == "required":
        _report_contradiction(template, requirement, context)
        return add_required_requirement(template, requirement)
    return add_preferred_requirement(template, requirement, params["weight"])


REQUIRED_NODE_AFFINITY = ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


def _report_contradiction(template: JSONObject, requirement: JSONObject, context: ActionContext) -> None:
    """A conflict when no required term the template has can hold together with `requirement`.

    Terms are ORed and the requirement is ANDed into each: if each term already asks something of the same
    label that the requirement rules out (`node-pool In [shared]` against `node-pool In [team-a]`), the pod
    can land on no node at all."""
    node_affinity = child_map(template, *REQUIRED_NODE_AFFINITY)
    terms = node_affinity.get("nodeSelectorTerms") if node_affinity is not None else None
    if not isinstance(terms, list) or not terms:
        return
    found = []
    for term in terms:
        same_key = [item for item in (term.get("matchExpressions") or [] if isinstance(term, dict) else [])
                    if isinstance(item, dict) and item.get("key") == requirement["key"]]
        if not same_key or satisfiable([*same_key, requirement]):
            return
        found.extend(same_key)
    context.conflict(
        f"required node affinity {_brief(found)} cannot hold together with {_brief([requirement])}: "
        "the pod fits no node", field="spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        wanted=_brief([requirement]), found=_brief(found), path=REQUIRED_NODE_AFFINITY)


def satisfiable(requirements: list[JSONObject]) -> bool:
    """Whether some node label value meets every requirement on one key (In, NotIn, Exists, DoesNotExist;
    Gt and Lt count as needing the label, with any value)."""
    allowed: set[str] | None = None
    excluded: set[str] = set()
    present = absent = False
    for item in requirements:
        operator, values = item.get("operator"), {str(value) for value in item.get("values") or []}
        if operator == "In":
            allowed = values if allowed is None else allowed & values
            present = True
        elif operator == "NotIn":
            excluded |= values
        elif operator == "DoesNotExist":
            absent = True
        else:
            present = True
    if present and absent:
        return False
    return allowed is None or bool(allowed - excluded)


def _brief(requirements: list[Any]) -> str:
    return ", ".join(
        f"{item.get('key')} {item.get('operator')}" + (f" {list(item['values'])}" if item.get("values") else "")
        for item in requirements if isinstance(item, dict))


def add_pod_affinity(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    """Co-locate with the selected pods in the same topology domain (e.g. a rack)."""
    return _add_pod_term(template, params, context, "podAffinity")


def add_pod_anti_affinity(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    """Keep away from the selected pods (by default the workload's own replicas) per topology domain."""
    return _add_pod_term(template, params, context, "podAntiAffinity")


def _add_pod_term(template: JSONObject, params: Mapping[str, Any], context: ActionContext, kind: str) -> bool:
    """Add a pod (anti-)affinity term unless an equal one is there.

    With the default selector (the workload's own pods), any term on the same topologyKey that already
    selects this pod's labels is the same term: the labels may have grown since it was written (a later
    `add-labels` rule), and a second, narrower copy would make the policies' output change on every pass.
    """
    selector, match_label_keys = context.pod_selection(template, params)
    overlap = set(match_label_keys) & selector_keys(selector)
    if overlap:
        raise ActionSkipped(f"matchLabelKeys {sorted(overlap)} also in the labelSelector")
    term: JSONObject = {"labelSelector": copy_json(selector), "topologyKey": params["topologyKey"]}
    if match_label_keys:
        term["matchLabelKeys"] = match_label_keys
    labels = (template.get("metadata") or {}).get("labels") if "labelSelector" not in params else None

    def same(existing: Any) -> bool:
        if _same_pod_term(existing, term):
            return True
        return (
            labels is not None
            and isinstance(existing, dict)
            and existing.get("topologyKey") == term["topologyKey"]
            and selector_matches(existing.get("labelSelector"), labels)
        )

    affinity = ensure_map(template, "spec", "affinity", kind)
    if params["type"] == "required":
        required = ensure_list(affinity, "requiredDuringSchedulingIgnoredDuringExecution")
        if any(same(existing) for existing in required):
            return False
        required.append(term)
        return True
    preferred = ensure_list(affinity, "preferredDuringSchedulingIgnoredDuringExecution")
    if any(isinstance(e, dict) and same(e.get("podAffinityTerm")) for e in preferred):
        return False
    preferred.append({"weight": params["weight"], "podAffinityTerm": term})
    return True


def add_required_requirement(template: JSONObject, requirement: JSONObject, *, fields: bool = False) -> bool:
    """AND `requirement` into every required nodeSelectorTerm (terms are ORed), creating one term if none;
    `fields`: a `matchFields` requirement (on the node's name) rather than one on its labels."""
    where = "matchFields" if fields else "matchExpressions"
    node_affinity = ensure_map(template, "spec", "affinity", "nodeAffinity")
    selector = ensure_map(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = ensure_list(selector, "nodeSelectorTerms")
    if not terms:
        terms.append({where: [copy_json(requirement)]})
        return True
    changed = False
    for term in terms:
        if isinstance(term, dict):
            items = ensure_list(term, where)
            if not any(same_requirement(existing, requirement) for existing in items):
                items.append(copy_json(requirement))
                changed = True
    return changed


def add_preferred_requirement(
    template: JSONObject, requirement: JSONObject, weight: int, *, fields: bool = False
) -> bool:
    """Append a weighted preferred term holding `requirement`, unless a preferred term already has it."""
    where = "matchFields" if fields else "matchExpressions"
    node_affinity = ensure_map(template, "spec", "affinity", "nodeAffinity")
    preferred = ensure_list(node_affinity, "preferredDuringSchedulingIgnoredDuringExecution")
    for term in preferred:
        existing = (term.get("preference") or {}).get(where) or [] if isinstance(term, dict) else []
        if any(same_requirement(item, requirement) for item in existing):
            return False
    preferred.append({"weight": weight, "preference": {where: [copy_json(requirement)]}})
    return True


def same_requirement(existing: Any, wanted: JSONObject) -> bool:
    """Requirements are equal when key, operator and the *set* of values are."""
    return (
        isinstance(existing, dict)
        and existing.get("key") == wanted["key"]
        and existing.get("operator") == wanted["operator"]
        and sorted(existing.get("values") or []) == sorted(wanted.get("values") or [])
    )


def _same_pod_term(existing: Any, wanted: JSONObject) -> bool:
    return (
        isinstance(existing, dict)
        and existing.get("topologyKey") == wanted["topologyKey"]
        and existing.get("labelSelector") == wanted["labelSelector"]
    )


def _check_node_requirement(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    operator, values = params["operator"], params.get("values") or []
    if operator in ("In", "NotIn") and not values:
        return [("values", f"operator {operator} needs at least one value")]
    if operator in ("Exists", "DoesNotExist") and values:
        return [("values", f"operator {operator} takes no values")]
    if operator in ("Gt", "Lt"):
        if len(values) != 1:
            return [("values", f"operator {operator} needs exactly one value")]
        try:
            int(values[0])
        except ValueError:
            return [("values", f"operator {operator} needs an integer value, not {values[0]!r}")]
    return []


_TOPOLOGY_KEY = Param("topologyKey", "string", required=True, check=qualified_name_error)
_WEIGHT = Param("weight", "integer", default=50, minimum=1, maximum=100)

SPECS = (
    ActionSpec(
        name="add-node-affinity",
        apply=add_node_affinity,
        params=(
            Param("key", "string", required=True, check=qualified_name_error),
            Param("operator", "enum", default="In", choices=NODE_OPERATORS),
            Param("values", "values", check=label_value_error),
            Param("type", "enum", default="required", choices=AFFINITY_TYPES),
            _WEIGHT,
        ),
        cross_check=_check_node_requirement,
    ),
    *(
        ActionSpec(
            name=name,
            apply=apply,
            params=(
                _TOPOLOGY_KEY,
                Param("type", "enum", default="preferred", choices=AFFINITY_TYPES),
                _WEIGHT,
                Param("labelSelector", "selector"),
                Param("matchLabelKeys", "keys", check=qualified_name_error),
            ),
            own_pods="keyed-by-selector",
        )
        for name, apply in (("add-pod-affinity", add_pod_affinity), ("add-pod-anti-affinity", add_pod_anti_affinity))
    ),
)
