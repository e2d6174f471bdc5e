"""The label selectors a policy writes (`spec.namespaceSelector`, `spec.exemptions.objectSelector`)."""

from typing import Any

from webhook.policy.errors import ErrorSink
from webhook.support.names import label_value_error, qualified_name_error
from webhook.support.selectors import OPERATORS, LabelSelector, SelectorRequirement
from webhook.support.suggestions import unknown_name

SELECTOR_FIELDS = ("matchExpressions", "matchLabels")
"""The fields of a metav1.LabelSelector."""


def parse_selector(raw: Any, errors: ErrorSink, where: str = "spec.namespaceSelector") -> LabelSelector | None:
    """A label selector, every problem reported at its field; None when there is none or it is invalid."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        errors.add("must be a label selector with matchLabels and/or matchExpressions", field=where)
        return None
    unknown = sorted(str(key) for key in raw if key not in SELECTOR_FIELDS)
    for key in unknown:
        errors.add(unknown_name("unknown field", key, SELECTOR_FIELDS), field=f"{where}.{key}", key=True)
    if unknown:
        return None
    labels = raw.get("matchLabels") or {}
    pairs: list[tuple[str, str]] = []
    if not isinstance(labels, dict):
        errors.add("must be a map", field=f"{where}.matchLabels")
        labels = {}
    for key, value in labels.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        problem = qualified_name_error(str(key)) or label_value_error(text)
        if problem:
            errors.add(problem, field=f"{where}.matchLabels.{key}")
        pairs.append((str(key), text))
    requirements: list[SelectorRequirement] = []
    expressions = raw.get("matchExpressions") or []
    if not isinstance(expressions, list):
        errors.add("must be a list", field=f"{where}.matchExpressions")
        expressions = []
    for index, item in enumerate(expressions):
        field = f"{where}.matchExpressions[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            errors.add("needs key and operator", field=field)
            continue
        operator, values = item.get("operator"), item.get("values") or []
        if operator not in OPERATORS:
            errors.add(f"operator must be In, NotIn, Exists or DoesNotExist, not {operator!r}", field=field)
            continue
        if not isinstance(values, list) or (operator in ("In", "NotIn")) != bool(values):
            errors.add(
                f"operator {operator} {'needs' if operator in ('In', 'NotIn') else 'takes no'} values", field=field
            )
            continue
        requirements.append(SelectorRequirement(item["key"], operator, frozenset(str(v) for v in values)))
    return LabelSelector(tuple(pairs), tuple(requirements))
