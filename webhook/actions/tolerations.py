"""`add-toleration`: let pods onto tainted nodes (dedicated pools, GPU nodes)."""

from collections.abc import Mapping
from typing import Any

from webhook.actions.base import ActionContext, ActionSpec, Param, ensure_list
from webhook.support.names import label_value_error, qualified_name_error
from webhook.support.typing import JSONObject

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute", "")


def add_toleration(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    """Append the toleration unless one with the same key, operator, value and effect is there."""
    wanted = toleration_from(params)
    tolerations = ensure_list(template, "spec", "tolerations")
    identity = _identity(wanted)
    key = identity[0]
    # the key first: most tolerations differ by it, and it is the cheap part of the identity
    context.placer_tolerations.append(wanted)
    for existing in tolerations:  # a loop, not any() over a generator: a Pod's tolerations are looked at per rule
        if isinstance(existing, dict) and str(existing.get("key") or "") == key and _identity(existing) == identity:
            return False
    tolerations.append(wanted)
    return True


def toleration_from(params: Mapping[str, Any]) -> JSONObject:
    """The toleration object, with the operator defaulted: Exists when no value is given, else Equal."""
    operator = params.get("operator") or ("Equal" if params.get("value") else "Exists")
    toleration: JSONObject = {"key": params["key"]} if params.get("key") else {}
    toleration["operator"] = operator
    if params.get("value"):
        toleration["value"] = params["value"]
    if params.get("effect"):
        toleration["effect"] = params["effect"]
    if params.get("tolerationSeconds") is not None:
        toleration["tolerationSeconds"] = params["tolerationSeconds"]
    return toleration


def _identity(toleration: Any) -> tuple[str, str, str, str]:
    if not isinstance(toleration, dict):
        return ("", "", "", "")
    return (
        str(toleration.get("key") or ""),
        str(toleration.get("operator") or "Equal"),
        str(toleration.get("value") or ""),
        str(toleration.get("effect") or ""),
    )


def _check(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The API server's own toleration rules: a patch breaking them fails the user's request."""
    operator = toleration_from(params)["operator"]
    problems = []
    if operator == "Exists" and params.get("value"):
        problems.append(("value", "must be empty when operator is Exists"))
    if not params.get("key") and operator != "Exists":
        problems.append(("key", "an empty key requires operator Exists"))
    if params.get("tolerationSeconds") is not None and params.get("effect") != "NoExecute":
        problems.append(("tolerationSeconds", "only applies to effect NoExecute"))
    return problems


SPECS = (
    ActionSpec(
        name="add-toleration",
        apply=add_toleration,
        params=(
            Param("key", "string", check=lambda key: qualified_name_error(key) if key else None),
            Param("operator", "enum", choices=("Equal", "Exists")),
            Param("value", "string", check=label_value_error),
            Param("effect", "enum", choices=EFFECTS),
            Param("tolerationSeconds", "integer"),
        ),
        cross_check=_check,
    ),
)
