"""JSON Patch from the difference between an original and a mutated value.

Only `add`, `remove` and `replace` are produced, with explicit indices, and missing parents are added
whole: the API server fails the user's request on a patch whose path does not exist, even under
`failurePolicy: Ignore` (fixtures, reactions b and g-bad-patch-path-ignore).
"""

from typing import Any

from webhook.support.typing import JSONPatch


def escape(token: str) -> str:
    """RFC 6901 escaping of one path token (label keys contain `/`)."""
    if "/" not in token and "~" not in token:  # most keys: two tests, no new string
        return token
    return token.replace("~", "~0").replace("/", "~1")


def diff(old: Any, new: Any, pointer: str = "") -> JSONPatch:
    """Operations that turn `old` into `new`; unchanged subtrees cost one equality test."""
    if old is new or old == new:
        return []
    return _differing(old, new, pointer)


def _differing(old: Any, new: Any, pointer: str) -> JSONPatch:
    """`diff` of two values known to differ: each subtree is compared once, and a subtree the mutated copy
    still shares with the original (most of it: `actions.base.working_copy`) by identity alone."""
    if isinstance(old, dict) and isinstance(new, dict):
        ops: JSONPatch = [] if old.keys() <= new.keys() else [  # a key removed: rare, and found without a loop
            {"op": "remove", "path": f"{pointer}/{escape(key)}"} for key in old if key not in new]
        for key, value in new.items():
            if key not in old:
                ops.append({"op": "add", "path": f"{pointer}/{escape(key)}", "value": value})
            else:
                before = old[key]
                if before is not value and before != value:
                    ops.extend(_differing(before, value, f"{pointer}/{escape(key)}"))
        return ops
    if isinstance(old, list) and isinstance(new, list):
        if len(new) >= len(old) and new[: len(old)] == old:
            return [
                {"op": "add", "path": f"{pointer}/{index}", "value": new[index]} for index in range(len(old), len(new))
            ]
        if len(new) == len(old):
            return [op for index, (a, b) in enumerate(zip(old, new, strict=True)) if a is not b and a != b
                    for op in _differing(a, b, f"{pointer}/{index}")]
    return [{"op": "replace", "path": pointer, "value": new}]


def apply_sharing(document: Any, patch: JSONPatch) -> Any:
    """Apply `add`/`remove`/`replace` operations (as `diff` makes them) without copying the whole document.

    Only the containers on each operation's path are copied; every other subtree stays shared with
    `document`, which is never modified. The engine uses it to see its own output (a second pass over what
    a first pass wrote) at the cost of the paths it changed, not of the object's size.
    """
    root: Any = {"": document}
    copied: set[int] = set()

    def writable(parent: Any, key: Any) -> Any:
        child = parent[key]
        if id(child) not in copied:
            child = dict(child) if isinstance(child, dict) else list(child)
            parent[key] = child
            copied.add(id(child))
        return child

    copied.add(id(root))
    for operation in patch:
        tokens = [unescape(token) for token in operation["path"].split("/")[1:]]
        if not tokens:
            root[""] = operation.get("value") if operation["op"] != "remove" else None
            continue
        node = writable(root, "")
        for token in tokens[:-1]:
            node = writable(node, int(token) if isinstance(node, list) else token)
        last: Any = tokens[-1]
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if operation["op"] == "add":
                node.insert(index, operation["value"])
            elif operation["op"] == "remove":
                del node[index]
            else:
                node[index] = operation["value"]
        elif operation["op"] == "remove":
            del node[last]
        else:
            node[last] = operation["value"]
    return root[""]


def unescape(token: str) -> str:
    """The inverse of `escape`."""
    return token.replace("~1", "/").replace("~0", "~")
