"""CEL source text for export: literals for JSON values, maps of CEL texts, and one-time bindings.

(Placer's variables are renamed in a policy's expressions by `free_identifiers`, on the checked tree.)
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RESERVED = frozenset({"placerPod", "placerWorkload", "placerTemplatePath", "placerTemplateLabels",
                      "placerOwnLabels", "placerOwnPods", "placerSelector", "placerProtected", "placerController",
                      "placerRevisionKeys"})
"""Names of the variables every exported policy declares; a policy variable may not take one."""


class NotExportable(ValueError):
    """What keeps an expression or a rule from running inside the API server, in one sentence."""


def literal(value: Any) -> str:
    """A CEL literal equal to a JSON value (strings double-quoted and escaped as JSON, which CEL accepts)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, Cel):
        return f"({value.source})"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_members(value)) + "]"
    if isinstance(value, dict):
        items = _members(list(value.values()))
        return "{" + ", ".join(f"{json.dumps(str(key))}: {item}" for key, item in zip(value, items, strict=True)) + "}"
    raise TypeError(f"no CEL literal for {type(value).__name__}")


def _members(values: list[Any]) -> list[str]:
    """The members of a list or map literal, each wrapped in `dyn()` when they are not all strings (or all
    integers): the API server checks that aggregate literals are homogeneous, and `dyn` makes them so."""
    kinds = {type(value) for value in values}
    plain = len(values) < 2 or kinds in ({str}, {int})
    return [literal(value) if plain else f"dyn({literal(value)})" for value in values]


@dataclass(frozen=True, slots=True)
class OptionalEntry:
    """A `dyn_map` entry written only when `present` (CEL) holds: `?key: present ? optional.of(dyn(value)) :
    optional.none()`."""

    present: str
    value: str


def dyn_map(entries: Mapping[str, "str | OptionalEntry"]) -> str:
    """A map literal of CEL texts (keys as CEL literals), each value wrapped in `dyn()`, an `OptionalEntry`'s
    too: the API server's checker holds every value of a map literal, an optional one included, to the type
    of the first (cel-go's `homogeneousAggregateLiteralValidator` compares an optional entry's value by the
    type it holds), so a value of its own type (`list(string)` of a typed variable) beside `dyn` ones is
    refused there."""
    written = []
    for key, value in entries.items():
        if key.startswith("?"):
            raise ValueError(f"an optional entry is an OptionalEntry value, not a ?key: {key}")
        if isinstance(value, OptionalEntry):
            written.append(f"?{key}: {value.present} ? optional.of(dyn({value.value})) : optional.none()")
        else:
            written.append(f"{key}: dyn({value})")
    return "{" + ", ".join(written) + "}"


def bind(name: str, value: str, body: str) -> str:
    """`body` with `name` bound to `value`, evaluated once: the API server's CEL has no `cel.bind`, so a
    one-element list is mapped instead."""
    return f"[{value}].map({name}, {body})[0]"


class Cel:
    """A piece of a value that CEL computes at admission (a parameter expression), inside a literal."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __repr__(self) -> str:
        return f"Cel({self.source!r})"
