"""`spec.enforcement` and `spec.exemptions`: who an Enforced policy does not hold to.

Under `enforcement: Enforced` the object's own opt-out label no longer exempts it (anyone who may create a
pod may label it); the only exemptions are the ones written in the policy, which only whoever may write the
cluster-scoped SchedulingPolicy can change. An exempt request is treated as under an Advisory policy: the
rules still set what is unset, conflicts are warnings, the opt-out label is honoured.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from webhook.support.names import dns1123_label_error
from webhook.support.selectors import LabelSelector

Enforcement = Literal["Advisory", "Enforced"]
ENFORCEMENTS: tuple[Enforcement, ...] = ("Advisory", "Enforced")
EXEMPTION_FIELDS = ("namespaces", "objectSelector", "users", "groups")


@dataclass(frozen=True, slots=True)
class Exemptions:
    """Requests an Enforced policy does not refuse: by namespace, by the object's labels, by who sends them."""

    namespaces: frozenset[str] = frozenset()
    object_selector: LabelSelector | None = None
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    def reason(self, namespace: str, labels: Mapping[str, Any], user_info: Mapping[str, Any]) -> str | None:
        """Why this request is exempt, or None when the policy holds it to its rules."""
        if namespace in self.namespaces:
            return f"namespace {namespace} is exempt"
        selector = self.object_selector
        if selector is not None and not selector.empty and selector.matches(
                {str(key): str(value) for key, value in labels.items()}):
            return "the object's labels match spec.exemptions.objectSelector"
        username = user_info.get("username")
        if isinstance(username, str) and username in self.users:
            return f"user {username} is exempt"
        groups = user_info.get("groups")
        for group in groups if isinstance(groups, list) else []:
            if group in self.groups:
                return f"group {group} is exempt"
        return None


AddError = Callable[..., None]
"""`add(message, field=...)`: reports one problem of the policy."""
ParseSelector = Callable[[Any, str], LabelSelector | None]


def parse_exemptions(raw: Any, add_error: AddError, parse_selector: ParseSelector) -> Exemptions | None:
    """`spec.exemptions` from a policy document; `add_error(message, field=...)` reports each problem and
    `parse_selector(raw, where)` reads the object selector (the compiler's label selector rules)."""
    if raw is None:
        return None
    where = "spec.exemptions"
    if not isinstance(raw, dict):
        add_error(f"must be a map with {', '.join(EXEMPTION_FIELDS)}", field=where)
        return None
    for unknown in sorted(str(key) for key in raw if key not in EXEMPTION_FIELDS):
        add_error(f"unknown field (known: {', '.join(EXEMPTION_FIELDS)})", field=f"{where}.{unknown}")
    lists: dict[str, frozenset[str]] = {}
    for name in ("namespaces", "users", "groups"):
        value = raw.get(name) or []
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
            add_error("must be a list of non-empty strings", field=f"{where}.{name}")
            value = []
        lists[name] = frozenset(value)
    for namespace in sorted(lists["namespaces"]):
        problem = dns1123_label_error(namespace)
        if problem:
            add_error(f"{namespace!r}: {problem}", field=f"{where}.namespaces")
    selector = parse_selector(raw.get("objectSelector"), f"{where}.objectSelector")
    return Exemptions(lists["namespaces"], selector, lists["users"], lists["groups"])
