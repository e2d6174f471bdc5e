"""`spec.enforcement` and `spec.exemptions`: who an Enforced policy does not hold to.

Under `enforcement: Enforced` the object's own opt-out label no longer exempts it (anyone who may create a
pod may label it); the only exemptions are the ones written in the policy, which only whoever may write the
cluster-scoped SchedulingPolicy can change, and each names what the request's author cannot choose: the
namespace (the API server's), the user and groups (the authenticator's `userInfo`). An exempt request is
treated as under an Advisory policy: the rules still set what is unset, conflicts are warnings, the opt-out
label is honoured.

`objectSelector` was an exemption too, and is refused now: it matched labels on the object, which its author
writes, so a pod could exempt itself.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from webhook.support.names import dns1123_label_error
from webhook.support.suggestions import unknown_name

Enforcement = Literal["Advisory", "Enforced", "Audit"]
ENFORCEMENTS: tuple[Enforcement, ...] = ("Advisory", "Enforced", "Audit")
"""`Audit`: evaluated as Advisory, never applied: what it would write is recorded (`webhook.admission.audit`)."""
EXEMPTION_FIELDS = ("namespaces", "users", "groups")
NEVER_ENFORCED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "placer-system")
"""Namespaces Placer's controller never labels `placer.dev/enforce=true`, whatever an Enforced policy selects,
and the fail-closed webhook entry never serves (deploy/base/webhooks.yaml): the control plane's own and
Placer's, so that both can always start. A policy still applies there through the advisory entry."""
ENFORCED_NEEDS_NAMESPACES = (
    "an Enforced policy must say which namespaces it holds: set a namespaceSelector (`{}` holds every namespace "
    f"except {', '.join(NEVER_ENFORCED_NAMESPACES)}, which are never enforced)")
REMOVED_OBJECT_SELECTOR = ("removed: it matched labels on the object, which the object's author writes, so a pod "
                           "could exempt itself; exempt by namespaces, users or groups")


@dataclass(frozen=True, slots=True)
class Exemptions:
    """Requests an Enforced policy does not refuse: by namespace, or by who sends them."""

    namespaces: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    def reason(self, namespace: str, user_info: Mapping[str, Any]) -> str | None:
        """Why this request is exempt, or None when the policy holds it to its rules."""
        if namespace in self.namespaces:
            return f"namespace {namespace} is exempt"
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


def parse_exemptions(raw: Any, add_error: AddError) -> Exemptions | None:
    """`spec.exemptions` from a policy document; `add_error(message, field=...)` reports each problem."""
    if raw is None:
        return None
    where = "spec.exemptions"
    if not isinstance(raw, dict):
        add_error(f"must be a map with {', '.join(EXEMPTION_FIELDS)}", field=where)
        return None
    if "objectSelector" in raw:
        add_error(REMOVED_OBJECT_SELECTOR, field=f"{where}.objectSelector")
    for unknown in sorted(str(key) for key in raw if key not in (*EXEMPTION_FIELDS, "objectSelector")):
        add_error(unknown_name("unknown field", unknown, EXEMPTION_FIELDS),
                  field=f"{where}.{unknown}", key=True)
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
    return Exemptions(lists["namespaces"], lists["users"], lists["groups"])
