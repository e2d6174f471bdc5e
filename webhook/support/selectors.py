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


class LabelIndex:
    """Names by their labels, so that the names a selector may select are found without testing every name:
    a `matchLabels` pair, an `In` or an `Exists` requirement narrows them to the names with that label;
    `NotIn` and `DoesNotExist` alone do not narrow (every name is a candidate)."""

    def __init__(self) -> None:
        self._labels: dict[str, Mapping[str, str]] = {}
        self._by_pair: dict[tuple[str, str], set[str]] = {}
        self._by_key: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._labels)

    def put(self, name: str, labels: Mapping[str, str]) -> None:
        self.remove(name)
        self._labels[name] = labels
        for key, value in labels.items():
            self._by_pair.setdefault((key, value), set()).add(name)
            self._by_key.setdefault(key, set()).add(name)

    def remove(self, name: str) -> None:
        labels = self._labels.pop(name, None)
        for key, value in (labels or {}).items():
            _discard(self._by_pair, (key, value), name)
            _discard(self._by_key, key, name)

    def candidates(self, selector: LabelSelector | None) -> set[str]:
        """Every name `selector` may select (None or an empty selector: every name)."""
        narrowest: set[str] | None = None
        for term in self._narrowing(selector) if selector is not None else ():
            if narrowest is None or len(term) < len(narrowest):
                narrowest = term
        return set(self._labels if narrowest is None else narrowest)

    def _narrowing(self, selector: LabelSelector) -> list[set[str]]:
        terms = [self._by_pair.get(pair, set()) for pair in selector.match_labels]
        for requirement in selector.requirements:
            if requirement.operator == "In":
                terms.append(set().union(*(self._by_pair.get((requirement.key, value), set())
                                           for value in requirement.values)))
            elif requirement.operator == "Exists":
                terms.append(self._by_key.get(requirement.key, set()))
        return terms


def _discard(index: dict[Any, set[str]], entry: Any, name: str) -> None:
    names = index[entry]
    names.discard(name)
    if not names:
        del index[entry]
