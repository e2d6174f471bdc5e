"""What the engine works out from a namespace alone, kept per namespace for as long as one policy snapshot.

Every request in a namespace sees the same `namespaceObject` and, under one snapshot, the same policies: the
policies that select the namespace, `namespaceObject` cut down to what they read, and the outcome of every
expression that reads nothing but the namespace (`parameterExpressions: {pool:
"namespaceObject.metadata.labels['pool']"}`) are the same for all of them. They are worked out for the first
request and recalled for the rest. A namespace that changes is read as a new `NamespaceInfo`, so its facts
start afresh; a new snapshot starts with none, and what the old one kept goes with it.
"""

from typing import Any

NAMESPACES_KEPT = 4096
"""Namespaces whose facts one snapshot keeps; past this, every namespace's are dropped and worked out again."""
FACTS_KEPT = 256
"""Facts kept per namespace (expressions, selections); past this, the namespace's are dropped first."""


class NamespaceFacts:
    """One namespace's facts under one snapshot, each kept for the object it was worked out for (a compiled
    program, a field tree, a selection of policies). The object is held beside its fact, so that the id the
    fact is kept under names no other object while it is kept."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[int, tuple[object, Any]] = {}

    def recall(self, key: object) -> Any:
        """The fact kept for `key`, or None."""
        kept = self._kept.get(id(key))
        return kept[1] if kept is not None and kept[0] is key else None

    def remember(self, key: object, value: Any) -> None:
        """Keep `value` (never None) for `key`."""
        if len(self._kept) >= FACTS_KEPT:
            self._kept.clear()
        self._kept[id(key)] = (key, value)


class FactsByNamespace:
    """The facts of each namespace (a `NamespaceInfo`, by identity) a snapshot's admissions met."""

    __slots__ = ("_namespaces",)

    def __init__(self) -> None:
        self._namespaces: dict[int, tuple[object, NamespaceFacts]] = {}

    def of(self, namespace: object) -> NamespaceFacts:
        """The facts of `namespace`, none yet for a namespace not met before (or changed since)."""
        kept = self._namespaces.get(id(namespace))
        if kept is not None and kept[0] is namespace:
            return kept[1]
        if len(self._namespaces) >= NAMESPACES_KEPT:
            self._namespaces.clear()
        facts = NamespaceFacts()
        self._namespaces[id(namespace)] = (namespace, facts)
        return facts
