"""metav1.LabelSelector semantics, in one place: namespace selectors of policies, and the actions that
recognise a term already selecting a workload's own pods."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
OPERATORS: tuple[Operator, ...] = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, Any]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """Every matchLabels pair and every requirement must hold; an empty selector selects everything."""

    match_labels: tuple[tuple[str, str], ...] = ()
    requirements: tuple[SelectorRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.requirements

    def matches(self, labels: Mapping[str, Any]) -> bool:
        return all(labels.get(key) == value for key, value in self.match_labels) and all(
            requirement.matches(labels) for requirement in self.requirements
        )

    @classmethod
    def from_object(cls, raw: Any) -> "LabelSelector | None":
        """The selector of a raw Kubernetes object field, or None when it is not a well-formed selector."""
        if not isinstance(raw, dict):
            return None
        match_labels = raw.get("matchLabels") or {}
        expressions = raw.get("matchExpressions") or []
        if not isinstance(match_labels, dict) or not isinstance(expressions, list):
            return None
        requirements = []
        for item in expressions:
            if not isinstance(item, dict) or item.get("operator") not in OPERATORS:
                return None
            values = item.get("values") or []
            requirements.append(
                SelectorRequirement(str(item.get("key")), item["operator"], frozenset(str(v) for v in values))
            )
        return cls(tuple((str(k), str(v)) for k, v in match_labels.items()), tuple(requirements))
