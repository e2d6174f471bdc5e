"""One rule as the mutations of an exported policy: its action's operations, guarded by its condition, and
the one run after every rule that names it as applied when it matched without changing anything."""

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.export.cel_text import NotExportable, bind
from webhook.export.mutations import (
    annotations,
    applied_annotation,
    has_applied_annotation,
    labels,
    node_affinity,
    node_selector,
    priority_class,
    scheduler_name,
    toleration,
)
from webhook.export.pod_terms import pod_affinity, pod_affinity_skipped, topology_spread, topology_spread_skipped

BUILDERS = {
    "add-node-selector": node_selector,
    "add-labels": labels,
    "add-annotations": annotations,
    "add-toleration": toleration,
    "add-node-affinity": node_affinity,
    "add-pod-affinity": pod_affinity("podAffinity"),
    "add-pod-anti-affinity": pod_affinity("podAntiAffinity"),
    "add-topology-spread": topology_spread,
    "set-scheduler-name": scheduler_name,
    "set-priority-class": priority_class,
}

SKIPPED = {
    "add-pod-affinity": pod_affinity_skipped,
    "add-pod-anti-affinity": pod_affinity_skipped,
    "add-topology-spread": topology_spread_skipped,
}
"""CEL of when the webhook skips the action (a warning, and the rule is not named as applied), by action."""

EXPRESSION_PARAMETERS = {
    "add-node-affinity": frozenset({"values"}),
    "add-pod-affinity": frozenset({"labelSelector"}),
    "add-pod-anti-affinity": frozenset({"labelSelector"}),
    "add-topology-spread": frozenset({"maxSkew", "minDomains", "labelSelector"}),
}
"""Parameters whose value a CEL expression may compute in an exported rule: each lands in one field."""


def rule_expression(action: str, params: Mapping[str, Any], *, override: bool,
                    condition: str | None, rule_id: str, policy_rules: Sequence[str]) -> str:
    """The mutation of one rule: when its condition holds, the action's ops, preceded (when there are any)
    by those naming the rule in the applied annotation."""
    builder = BUILDERS.get(action)
    if builder is None:
        raise NotExportable(f"action {action} is not exported (see the export documentation)")
    ops = builder(params, override)
    body = bind("ops", ops, f"ops.size() > 0 ? ({applied_annotation(rule_id, policy_rules)}) + ops : ops")
    return f"({condition}) ? {body} : []" if condition else body


def matched_rule_expression(condition: str | None, rule_id: str, policy_rules: Sequence[str],
                            *, action: str = "", params: Mapping[str, Any] | None = None) -> str:
    """Run after every rule's mutation: a rule that matched but changed nothing is named in the applied
    annotation too when the template was changed (as Placer lists every rule that applied), unless its
    action was skipped (`SKIPPED`, for the `action` with `params`)."""
    named = applied_annotation(rule_id, policy_rules)
    guards = [f"({condition})"] if condition else []
    guards.append(has_applied_annotation())
    skipped = SKIPPED.get(action)
    if skipped is not None and params is not None:
        guards.append(f"!({skipped(params)})")
    return f"{' && '.join(guards)} ? ({named}) : []"
