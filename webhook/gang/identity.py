"""The group name and size every member of a gang shares, derived in the contract's order.

Both are derived from the whole workload, never from one template, so a SparkApplication's driver and
executors, or a PyTorchJob's Master and Workers, always carry the same identity and the same size.
"""

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.gang.facts import GangFacts
from webhook.gang.flavours import FLAVOURS, OPERATOR_GROUP_LABELS, Flavour, Key
from webhook.gang.members import counted_size
from webhook.support.names import label_value_error

MAX_LABEL_VALUE = 63
HASH_CHARS = 8


@dataclass(frozen=True, slots=True)
class Derived:
    """A derived value and where it came from (shown in warnings and `placer apply -o explain`)."""

    value: str
    source: str
    shared: bool = False
    """The name came from the pod's surroundings (a key, an operator label, its controller), which other
    pods share: the pod is one member of a larger group."""


def label_safe(name: str) -> str:
    """`name` as a label value: at most 63 characters, truncated with a stable hash suffix when longer.

    The suffix is the start of the SHA-256 of the full name, so two long names sharing their first 54
    characters still get different groups, and every member computes the same value.
    """
    if len(name) <= MAX_LABEL_VALUE and label_value_error(name) is None:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:HASH_CHARS]
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    prefix = cleaned[: MAX_LABEL_VALUE - HASH_CHARS - 1].strip("-_.")
    return f"{prefix}-{digest}" if prefix else digest


def read_key(key: Key, labels: Mapping[str, Any], annotations: Mapping[str, Any]) -> str | None:
    value = (labels if key.where == "labels" else annotations).get(key.name)
    return value if isinstance(value, str) and value else None


def _group_keys(flavour: Flavour) -> list[Key]:
    """The flavour's own group key first, then every other flavour's: any of them names an existing gang (a
    flavour that names its group in the pod spec, native, has no key on pods to read)."""
    others = (other.group for other in FLAVOURS.values() if other is not flavour and not other.pod_field)
    return [flavour.group, *others]


def group_name(flavour: Flavour, parameter: str | None, facts: GangFacts) -> Derived:
    """The first of: the parameter; a gang key a member already carries; an operator label; the name."""
    if parameter:
        return Derived(label_safe(parameter), "groupName")
    members = facts.members
    for key in _group_keys(flavour):
        for template in members:
            value = read_key(key, template.labels, template.annotations)
            if value is not None:
                return Derived(label_safe(value), f"existing {key.name}", shared=True)
    for label in OPERATOR_GROUP_LABELS:
        for template in members:
            value = template.labels.get(label)
            if isinstance(value, str) and value:
                return Derived(label_safe(value), f"label {label}", shared=True)
    if facts.kind == "Pod" and facts.owner:
        return Derived(label_safe(facts.owner), "controller owner", shared=True)
    return Derived(label_safe(facts.name), f"{facts.kind} name")


def group_size(flavour: Flavour, parameter: int | None, group: Derived, facts: GangFacts) -> Derived | None:
    """The first of: `minAvailable`; the workload's own count; a size key a member already carries.

    A Pod whose group comes from a key or an operator label is one member of a larger group whose size
    the Pod does not say: it is not counted as a gang of one.
    """
    if parameter is not None:
        return Derived(str(parameter), "minAvailable")
    counted = counted_size(flavour, facts)
    if counted is not None:  # only the pods made together (`webhook.gang.members`)
        return Derived(str(counted), f"{facts.kind} pods made together") if counted > 0 else None
    member_of_larger = facts.kind == "Pod" and group.shared
    if facts.size is not None and facts.size > 0 and not member_of_larger:
        return Derived(str(facts.size), f"{facts.kind} size")
    keys = [flavour.size] if flavour.size else []
    keys += [other.size for other in FLAVOURS.values() if other.size and other is not flavour]
    for key in keys:
        for template in facts.members:
            value = read_key(key, template.labels, template.annotations)
            if value is not None and value.isdigit() and int(value) > 0:
                return Derived(value, f"existing {key.name}")
    return None
