"""JSON Patch from the difference between an original and a mutated value.

Only `add`, `remove` and `replace` are produced, with explicit indices, and missing parents are added
whole: the API server fails the user's request on a patch whose path does not exist, even under
`failurePolicy: Ignore` (fixtures, reactions b and g-bad-patch-path-ignore).
"""

from typing import Any

from webhook.typing import JSONPatch


def escape(token: str) -> str:
    """RFC 6901 escaping of one path token (label keys contain `/`)."""
    return token.replace("~", "~0").replace("/", "~1")


def diff(old: Any, new: Any, pointer: str = "") -> JSONPatch:
    """Operations that turn `old` into `new`; unchanged subtrees cost one equality test."""
    if old == new:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        ops: JSONPatch = [{"op": "remove", "path": f"{pointer}/{escape(key)}"} for key in old if key not in new]
        for key, value in new.items():
            path = f"{pointer}/{escape(key)}"
            if key not in old:
                ops.append({"op": "add", "path": path, "value": value})
            elif old[key] != value:
                ops.extend(diff(old[key], value, path))
        return ops
    if isinstance(old, list) and isinstance(new, list):
        if len(new) >= len(old) and new[: len(old)] == old:
            return [
                {"op": "add", "path": f"{pointer}/{index}", "value": new[index]} for index in range(len(old), len(new))
            ]
        if len(new) == len(old):
            return [
                op for index, (a, b) in enumerate(zip(old, new, strict=True)) for op in diff(a, b, f"{pointer}/{index}")
            ]
    return [{"op": "replace", "path": pointer, "value": new}]
