"""A deep copy of a JSON value (dicts, lists, scalars), several times faster than `copy.deepcopy`.

Actions copy what they change of every pod template they touch; `copy.deepcopy` spends most of its time on
its memo and dispatch, which JSON (a tree of dicts, lists and immutable scalars) never needs.
"""

from typing import Any


def copy_json(value: Any) -> Any:
    """The same tree with new dicts and lists; scalars (str, int, float, bool, None) are shared."""
    if isinstance(value, dict):
        return {key: copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_json(item) for item in value]
    return value
