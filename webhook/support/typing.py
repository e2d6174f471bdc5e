"""Type aliases shared by every layer.

Kubernetes objects travel as decoded JSON. Naming the shapes once keeps signatures readable and lets mypy
catch a list passed where a map was expected.
"""

from typing import Any, TypeAlias

JSON: TypeAlias = Any
"""Any decoded JSON value (object, array, string, number, bool or null)."""

JSONObject: TypeAlias = dict[str, Any]
"""A decoded JSON object, e.g. a Kubernetes object or one of its sub-structures."""

JSONPatch: TypeAlias = list[dict[str, Any]]
"""An RFC 6902 JSON Patch: a list of operations."""


def as_map(value: Any) -> JSONObject:
    """`value` when it is a JSON object, else an empty one: optional sub-structures read without checks."""
    return value if isinstance(value, dict) else {}
