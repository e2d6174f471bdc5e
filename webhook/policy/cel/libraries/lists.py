"""Kubernetes' lists library: `isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`, `includes`.

Placer's objects are `dyn`, so the overloads take `list(dyn)`; what Kubernetes' type-checker refuses for a
typed list (a list of maps to `sum()`, a mixed list to `min()`) is an evaluation error here, with the same
message shape. Equality is CEL's: `true` is not `1`, `1 == 1.0`.
"""

import itertools
from datetime import timedelta
from typing import Any

from webhook.policy.cel.libraries.functions import (
    BOOL,
    DYN,
    INT,
    LIST_OF_DYN,
    STRING,
    CelFunctionError,
    Function,
)


def cel_equal(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality on the values the binding hands over (bool is never a number)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(cel_equal(a[key], b[key]) for key in a)
    if isinstance(a, list | dict) or isinstance(b, list | dict):
        return False
    try:
        return bool(a == b)
    except TypeError:
        return False


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def _comparable(items: list[Any], name: str) -> list[Any]:
    kinds = {_kind(item) for item in items}
    if len(kinds) > 1 or kinds & {"list", "dict", "NoneType"}:
        raise CelFunctionError(f"no such overload: {name} on a list of {', '.join(sorted(kinds))}")
    return items


def is_sorted(items: list[Any]) -> bool:
    _comparable(items, "isSorted")
    return all(not (later < earlier) for earlier, later in itertools.pairwise(items))


def total(items: list[Any]) -> Any:
    kinds = {_kind(item) for item in items}
    if not kinds <= {"number"} and kinds != {"timedelta"}:
        raise CelFunctionError(f"no such overload: sum on a list of {', '.join(sorted(kinds))}")
    if kinds == {"timedelta"}:
        return sum(items, timedelta())
    if {type(item) for item in items} == {int, float}:
        raise CelFunctionError("no such overload: sum on a list of int and double")
    return sum(items)


def smallest(items: list[Any]) -> Any:
    if not items:
        raise CelFunctionError("min called on empty list")
    return min(_comparable(items, "min"))


def largest(items: list[Any]) -> Any:
    if not items:
        raise CelFunctionError("max called on empty list")
    return max(_comparable(items, "max"))


def index_of(items: list[Any], wanted: Any) -> int:
    return next((index for index, item in enumerate(items) if cel_equal(item, wanted)), -1)


def last_index_of(items: list[Any], wanted: Any) -> int:
    return next((index for index in range(len(items) - 1, -1, -1) if cel_equal(items[index], wanted)), -1)


def includes(target: Any, wanted: Any) -> bool:
    """Kubernetes' `includes`: an element of the list, or the value itself."""
    if isinstance(target, list):
        return any(cel_equal(item, wanted) for item in target)
    return cel_equal(target, wanted)


def functions() -> list[Function]:
    return [
        Function("isSorted", "list_is_sorted_bool", (LIST_OF_DYN,), BOOL, is_sorted, member=True),
        Function("sum", "list_sum", (LIST_OF_DYN,), DYN, total, member=True),
        Function("min", "list_min", (LIST_OF_DYN,), DYN, smallest, member=True),
        Function("max", "list_max", (LIST_OF_DYN,), DYN, largest, member=True),
        Function("indexOf", "list_a_index_of_int", (LIST_OF_DYN, DYN), INT, index_of, member=True),
        Function("lastIndexOf", "list_a_last_index_of_int", (LIST_OF_DYN, DYN), INT, last_index_of, member=True),
        # Kubernetes declares includes(dyn, dyn); the runtime cannot dispatch a dyn receiver to Python.
        Function("includes", "list_includes_dyn", (LIST_OF_DYN, DYN), BOOL, includes, member=True),
        Function("includes", "string_includes_string", (STRING, STRING), BOOL, includes, member=True),
    ]
