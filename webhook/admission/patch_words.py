"""A JSON Patch in words, for people: `add nodeSelector node-pool=gpu`, `add toleration dedicated=gpu:NoSchedule`.

What an Audit policy would write is shown this way in explain and in PolicyReport messages, where a raw
patch is hard to read; the patch itself goes with it (audit annotations, report properties). Placer's own
mark (`placer.dev/applied`) is left out: it says which rules applied, which the words already do.
"""

import json
from collections.abc import Mapping
from typing import Any

from webhook.actions.metadata import APPLIED_ANNOTATION
from webhook.support.typing import JSONPatch

VERBS = {"add": "add", "replace": "set", "remove": "remove"}
VALUE_LIMIT = 60
"""Characters of a value shown as JSON before it is cut with `...` (the patch itself has it whole)."""


def patch_words(patch: JSONPatch) -> list[str]:
    """One phrase per operation that changes the object (Placer's applied mark left out), in patch order."""
    words: list[str] = []
    for op in patch:
        phrase = _phrase(str(op.get("op")), _tokens(str(op.get("path"))), op.get("value"))
        if phrase:
            words.append(phrase)
    return list(dict.fromkeys(words))


def _tokens(path: str) -> list[str]:
    return [token.replace("~1", "/").replace("~0", "~") for token in path.split("/")[1:]]


def _phrase(op: str, tokens: list[str], value: Any) -> str:
    verb = VERBS.get(op, op)
    inner = tokens[len(tokens) - tokens[::-1].index("template"):] if "template" in tokens else tokens
    if inner[:2] == ["metadata", "labels"] or inner[:2] == ["metadata", "annotations"]:
        return _pairs(verb, "label" if inner[1] == "labels" else "annotation", inner[2:], value)
    if inner[:2] == ["spec", "nodeSelector"]:
        return _pairs(verb, "nodeSelector", inner[2:], value)
    if inner[:2] == ["spec", "tolerations"]:
        items = value if len(inner) == 2 and isinstance(value, list) else [value]
        shown = ", ".join(_toleration(item) for item in items) if op != "remove" else ""
        return f"{verb} toleration{'s' if len(items) > 1 else ''} {shown}".rstrip()
    if inner[:2] == ["spec", "topologySpreadConstraints"] and op != "remove":
        items = value if len(inner) == 2 and isinstance(value, list) else [value]
        return f"{verb} topology spread " + ", ".join(_spread(item) for item in items)
    if len(inner) == 2 and inner[0] == "spec" and not isinstance(value, (dict, list)) and op != "remove":
        return f"{verb} {inner[1]} {value}"
    shown = ""
    if op != "remove":
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
        shown = " " + (text if len(text) <= VALUE_LIMIT else text[:VALUE_LIMIT - 3] + "...")
    return f"{verb} {'.'.join(inner) or '/'}{shown}"


def _pairs(verb: str, noun: str, rest: list[str], value: Any) -> str:
    """Labels, annotations, nodeSelector: `key=value` each (Placer's applied mark left out)."""
    if rest:
        if rest[0] == APPLIED_ANNOTATION:
            return ""
        return f"{verb} {noun} {rest[0]}" + ("" if verb == "remove" else f"={value}")
    pairs = {key: item for key, item in value.items() if key != APPLIED_ANNOTATION} if isinstance(value, dict) else {}
    if not pairs:
        return ""
    return f"{verb} {noun}{'s' if len(pairs) > 1 else ''} " + ", ".join(f"{key}={item}" for key, item in pairs.items())


def _toleration(item: Any) -> str:
    """As `kubectl taint` writes the taint it tolerates: `key=value:Effect`, `key:Effect` for Exists."""
    if not isinstance(item, Mapping):
        return json.dumps(item)
    key = str(item.get("key") or "*")
    value = f"={item['value']}" if item.get("value") else ""
    effect = f":{item['effect']}" if item.get("effect") else ""
    seconds = f" for {item['tolerationSeconds']}s" if item.get("tolerationSeconds") is not None else ""
    return f"{key}{value}{effect}{seconds}"


def _spread(item: Any) -> str:
    if not isinstance(item, Mapping):
        return json.dumps(item)
    return (f"on {item.get('topologyKey')} (maxSkew {item.get('maxSkew')}, "
            f"{item.get('whenUnsatisfiable', 'DoNotSchedule')})")


KEYED: dict[str, tuple[str, ...]] = {
    "add-node-selector": ("spec", "nodeSelector"),
    "add-labels": ("metadata", "labels"),
    "add-annotations": ("metadata", "annotations"),
}
"""Actions that write the keys of their parameters into one map of the template."""
FIELDS: dict[str, tuple[str, ...]] = {
    "add-toleration": ("spec", "tolerations"),
    "add-topology-spread": ("spec", "topologySpreadConstraints"),
    "set-scheduler-name": ("spec", "schedulerName"),
    "set-priority-class": ("spec", "priorityClassName"),
    "add-node-affinity": ("spec", "affinity", "nodeAffinity"),
    "add-pod-affinity": ("spec", "affinity", "podAffinity"),
    "add-pod-anti-affinity": ("spec", "affinity", "podAntiAffinity"),
}
"""Actions that write one field of the template (a Pod's priority goes with its priority class)."""


def rule_operations(action: str, parameters: Mapping[str, Any], patch: JSONPatch) -> JSONPatch | None:
    """The operations of a policy's `patch` that a rule with this action and these parameters writes, by the
    field the action writes (a map's keys for the keyed ones); None for an action whose fields are not known
    here (gangs, spot shares, node pools...), whose part of the patch is not told apart."""
    if action in KEYED:
        keyed = KEYED[action]
        keys = {str(key) for key in parameters}
        found: JSONPatch = []
        for op in patch:
            tokens = _inner(str(op.get("path")))
            if tuple(tokens[:2]) != keyed:
                continue
            if len(tokens) > 2 and tokens[2] in keys:
                found.append(op)
            elif len(tokens) == 2 and isinstance(op.get("value"), dict):
                value = {key: item for key, item in op["value"].items() if key in keys}
                if value:
                    found.append({**op, "value": value})
        return found
    where = FIELDS.get(action)
    if where is None:
        return None
    found = []
    for op in patch:
        inner = tuple(_inner(str(op.get("path"))))
        if inner[:len(where)] == where or (action == "set-priority-class" and inner[:2] in (
                ("spec", "priority"), ("spec", "preemptionPolicy"))):
            found.append(op)
        elif len(where) == 3 and inner == where[:2] and isinstance(op.get("value"), dict) and where[2] in op["value"]:
            found.append({**op, "value": {where[2]: op["value"][where[2]]}})
    return found


def _inner(path: str) -> list[str]:
    tokens = _tokens(path)
    return tokens[len(tokens) - tokens[::-1].index("template"):] if "template" in tokens else tokens
