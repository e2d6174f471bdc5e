"""A deep copy of a JSON value (dicts, lists, scalars), several times faster than `copy.deepcopy`.

Actions copy what they change of every pod template they touch; `copy.deepcopy` spends most of its time on
its memo and dispatch, which JSON (a tree of dicts, lists and immutable scalars) never needs.
"""

from typing import Any


def copy_json(value: Any) -> Any:
    """The same tree with new dicts and lists; scalars (str, int, float, bool, None) are shared."""
    if isinstance(value, dict):
        copied = dict(value)  # scalars stay as they are: only containers below are copied, one call each
        for key, item in value.items():
            if isinstance(item, (dict, list)):
                copied[key] = copy_json(item)
        return copied
    if isinstance(value, list):
        return [copy_json(item) if isinstance(item, (dict, list)) else item for item in value]
    return value
