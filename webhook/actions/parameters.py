"""Turning a rule's `parameters` (strings or native YAML values) into the typed values an action uses.

The original SchedulingPolicy CRD wrote every parameter as a string (`maxSkew: "1"`), so numeric strings are
accepted wherever a number is expected, and comma-separated strings wherever a list is.
"""

from collections.abc import Mapping
from typing import Any

from webhook.actions.base import ActionSpec, Param
from webhook.support.names import label_value_error, qualified_name_error
from webhook.support.suggestions import unknown_name

Problem = tuple[str, str]
"""(parameter name, message)."""


def parse_parameters(
    spec: ActionSpec, raw: Mapping[str, Any], *, deferred: frozenset[str] = frozenset()
) -> tuple[dict[str, Any], list[Problem]]:
    """Validate and normalise parameters; `deferred` names are computed later by parameterExpressions.

    Returns the normalised parameters (defaults filled in) and every problem found. Cross-parameter rules
    run only when nothing is deferred, since they need every value.
    """
    problems: list[Problem] = []
    result: dict[str, Any] = {}
    if spec.free_form is not None:
        for key, value in raw.items():
            try:
                text = _as_text(value)
            except ValueError as error:
                problems.append((str(key), str(error)))
                continue
            problem = _free_form_problem(spec, str(key), text)
            if problem:
                problems.append((str(key), problem))
            else:
                result[str(key)] = text
        if not raw and not deferred:
            problems.append(("parameters", "at least one key: value pair is required"))
        return result, problems

    for key in raw:
        if spec.param(str(key)) is None:
            problems.append((str(key), unknown_name(f"unknown parameter for {spec.name}", str(key),
                                                    [param.name for param in spec.params])))
    for param in spec.params:
        if param.name in raw and raw[param.name] is not None:
            try:
                result[param.name] = coerce(param, raw[param.name])
            except ValueError as error:
                problems.append((param.name, str(error)))
        elif param.name in deferred:
            continue
        elif param.required:
            problems.append((param.name, "required parameter is missing"))
        elif param.default is not None:
            result[param.name] = param.default
    if not problems and not deferred and spec.cross_check is not None:
        problems.extend(spec.cross_check(result))
    return result, problems


def coerce(param: Param, value: Any) -> Any:
    """Convert one value to the parameter's kind; ValueError says what was expected."""
    if param.kind == "integer":
        return _integer(param, value)
    if param.kind in ("values", "keys"):
        items = _string_list(value)
        for item in items:
            _check_text(param, item)
        return items
    if param.kind == "selector":
        return parse_selector(value)
    if param.kind == "tolerations":
        return parse_tolerations(value)
    text = _as_text(value)
    if param.kind == "enum" and text not in param.choices:
        raise ValueError(f"must be one of {', '.join(repr(c) for c in param.choices)}, not {text!r}")
    _check_text(param, text)
    return text


def parse_selector(value: Any) -> dict[str, Any]:
    """A metav1.LabelSelector from its full form, a plain label map, or `k=v,k2=v2`."""
    if isinstance(value, str):
        labels: dict[str, str] = {}
        for pair in filter(None, (part.strip() for part in value.split(","))):
            key, equals, label = pair.partition("=")
            if not equals:
                raise ValueError(f"label selector term {pair!r} is not key=value")
            labels[key.strip()] = label.strip()
        value = {"matchLabels": labels}
    if not isinstance(value, dict):
        raise ValueError("must be a label selector (matchLabels/matchExpressions, a label map, or k=v,...)")
    if not set(value) <= {"matchLabels", "matchExpressions"}:
        for key, item in value.items():  # a label map's values are scalars: a map or list is a misspelt field
            if isinstance(item, (dict, list)):
                raise ValueError(unknown_name(f"label selector: unknown field {key!r}", str(key),
                                              ["matchExpressions", "matchLabels"]))
        value = {"matchLabels": value}
    selector: dict[str, Any] = {}
    match_labels = value.get("matchLabels") or {}
    if not isinstance(match_labels, dict):
        raise ValueError("matchLabels must be a map")
    if match_labels:
        selector["matchLabels"] = {}
        for key, label in match_labels.items():
            text = _as_text(label)
            problem = qualified_name_error(str(key)) or label_value_error(text)
            if problem:
                raise ValueError(f"label selector {key}={text}: {problem}")
            selector["matchLabels"][str(key)] = text
    expressions = value.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise ValueError("matchExpressions must be a list")
    if expressions:
        selector["matchExpressions"] = [_selector_requirement(item) for item in expressions]
    if not selector:
        raise ValueError("label selector must not be empty (it would select every pod)")
    return selector


TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def parse_tolerations(value: Any) -> list[dict[str, Any]]:
    """A non-empty list of tolerations (key, operator, value, effect, tolerationSeconds), checked as the API
    server checks a Pod's (pkg/apis/core/validation/validation.go, ValidateTolerations): an empty key needs
    operator Exists, Exists takes no value, tolerationSeconds only with NoExecute."""
    if not isinstance(value, list) or not value:
        raise ValueError("must be a non-empty list of tolerations (key, operator, value, effect)")
    tolerations = []
    for index, item in enumerate(value):
        where = f"[{index}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where} must be a toleration (key, operator, value, effect)")
        unknown = sorted(str(key) for key in item if key not in TOLERATION_FIELDS)
        if unknown:
            raise ValueError(unknown_name(f"{where}: unknown field {unknown[0]!r}", unknown[0], TOLERATION_FIELDS))
        toleration: dict[str, Any] = {}
        key = _as_text(item.get("key") or "")
        operator = _as_text(item.get("operator") or "Equal")
        text = _as_text(item.get("value") or "")
        effect = _as_text(item.get("effect") or "")
        if key and qualified_name_error(key):
            raise ValueError(f"{where}.key {key!r} {qualified_name_error(key)}")
        if operator not in ("Equal", "Exists"):
            raise ValueError(f"{where}.operator must be Equal or Exists, not {operator!r}")
        if operator == "Exists" and text:
            raise ValueError(f"{where}.value must be empty when operator is Exists")
        if not key and operator != "Exists":
            raise ValueError(f"{where}: an empty key requires operator Exists")
        if effect and effect not in TOLERATION_EFFECTS:
            raise ValueError(f"{where}.effect must be one of {', '.join(TOLERATION_EFFECTS)}, not {effect!r}")
        if text and label_value_error(text):
            raise ValueError(f"{where}.value {text!r} {label_value_error(text)}")
        toleration = {"key": key, "operator": operator, "value": text, "effect": effect}
        seconds = item.get("tolerationSeconds")
        if seconds is not None:
            if effect != "NoExecute" or isinstance(seconds, bool) or not isinstance(seconds, int):
                raise ValueError(f"{where}.tolerationSeconds must be an integer, and only with effect NoExecute")
            toleration["tolerationSeconds"] = seconds
        tolerations.append(toleration)
    return tolerations


def _selector_requirement(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict) or not isinstance(item.get("key"), str):
        raise ValueError("each matchExpressions entry needs a key")
    operator = item.get("operator")
    if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
        raise ValueError(f"matchExpressions operator must be In, NotIn, Exists or DoesNotExist, not {operator!r}")
    problem = qualified_name_error(item["key"])
    if problem:
        raise ValueError(f"matchExpressions key {item['key']!r}: {problem}")
    values = _string_list(item.get("values") or [])
    if operator in ("In", "NotIn") and not values:
        raise ValueError(f"matchExpressions {item['key']} {operator} needs values")
    if operator in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"matchExpressions {item['key']} {operator} takes no values")
    requirement: dict[str, Any] = {"key": item["key"], "operator": operator}
    if values:
        requirement["values"] = values
    return requirement


def _free_form_problem(spec: ActionSpec, key: str, value: str) -> str | None:
    assert spec.free_form is not None
    if key in spec.free_form.reserved_keys:
        return "is reserved for Placer"
    problem = spec.free_form.key_check(key)
    if problem:
        return f"key {problem}"
    if spec.free_form.value_check is not None:
        problem = spec.free_form.value_check(value)
        if problem:
            return f"value {value!r} {problem}"
    return None


def _integer(param: Param, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"must be an integer, not {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError(f"must be an integer, not {value!r}") from None
    if not isinstance(value, int):
        raise ValueError(f"must be an integer, not {value!r}")
    if param.minimum is not None and value < param.minimum:
        raise ValueError(f"must be at least {param.minimum}, not {value}")
    if param.maximum is not None and value > param.maximum:
        raise ValueError(f"must be at most {param.maximum}, not {value}")
    return value


def _string_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list):
        return [_as_text(item) for item in value]
    raise ValueError(f"must be a list or a comma-separated string, not {type(value).__name__}")


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ValueError(f"must be a string, not {type(value).__name__}")


def _check_text(param: Param, text: str) -> None:
    if param.check is not None:
        problem = param.check(text)
        if problem:
            raise ValueError(f"{text!r} {problem}")
