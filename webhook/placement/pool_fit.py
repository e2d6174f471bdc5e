"""A warning when none of the node pools a `prefer-node-pools` rule lists can ever host a pod.

Preferences never keep a pod Pending: with no listed pool able to host it, the scheduler puts it on any
other node that passes the filters, which is what the rule was written to avoid (a pool dropped or
renamed, every node of it cordoned, a taint the pod does not tolerate). Each listed pool is checked with
the scheduler's node filters that depend only on the pod and the node (`webhook.placement.node_fit`), among the
nodes whose pool label names it. When the pod can land nowhere at all, the placement check already says
so, and this one is silent.
"""

from collections.abc import Mapping
from typing import Any

from webhook.actions.metadata import rules_applied
from webhook.actions.node_pools import PREFER_NODE_POOLS
from webhook.engine.mutate import Mutation
from webhook.placement.node_fit import Nodes, node_fit, pod_spec_of
from webhook.policy.snapshot import PolicySnapshot


def pool_warnings(mutation: Mutation, snapshot: PolicySnapshot, nodes: Nodes) -> list[str]:
    """One warning per template and `prefer-node-pools` rule whose pools can none of them host its pods."""
    found = []
    for slot, (_, after) in mutation.placed.items():
        applied = set(rules_applied(after))
        rules = [(f"{policy.name}/{rule.name}", str(rule.parameters.get("key") or "")) for policy in snapshot.policies
                 for rule in policy.rules if rule.action.name == PREFER_NODE_POOLS]
        rules = [(name, key) for name, key in rules if name in applied and key]
        if not rules:
            continue
        spec = pod_spec_of(after)
        if not node_fit(spec, nodes, any_host=True).hosts:
            continue  # nowhere at all: the placement check's own warning
        where = f" of {slot}" if slot else ""
        for name, key in rules:
            pools = preferred_pools(spec, key)
            reasons = [_why_not(spec, nodes, key, pool) for pool in pools]
            if pools and all(reason is not None for reason in reasons):
                detail = "; ".join(f"{pool}: {reason}" for pool, reason in zip(pools, reasons, strict=True))
                found.append(f"rule {name}: none of the preferred pools can ever host the pods{where} ({detail}); "
                             "they go to other nodes")
    return found


def preferred_pools(spec: Mapping[str, Any], key: str) -> list[str]:
    """The pools a template prefers on `key`, in the order of its preferred node affinity terms."""
    affinity = spec.get("affinity") if isinstance(spec.get("affinity"), dict) else {}
    terms = ((affinity or {}).get("nodeAffinity") or {}).get("preferredDuringSchedulingIgnoredDuringExecution")
    pools = []
    for term in terms if isinstance(terms, list) else []:
        expressions = ((term or {}).get("preference") or {}).get("matchExpressions") or []
        for item in expressions:
            if item.get("key") == key and item.get("operator") == "In" and len(item.get("values") or []) == 1:
                pools.append(str(item["values"][0]))
    return list(dict.fromkeys(pools))


def _why_not(spec: Mapping[str, Any], nodes: Nodes, key: str, pool: str) -> str | None:
    """None when some node of the pool can host the pod, else why none can."""
    members = [(name, facts) for name, facts in nodes if (facts.get("labels") or {}).get(key) == pool]
    if not members:
        return "no node"
    fit = node_fit(spec, members, any_host=True)
    if fit.hosts:
        return None
    return ", ".join(f"{count} {reason}" for reason, count in sorted(fit.rejections.items(), key=lambda i: -i[1]))
