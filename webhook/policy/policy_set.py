"""What the engine needs to know of one selection of policies, worked out once per snapshot.

A request's evaluation starts from the policies its namespace selects. Which of their rules can make a
second pass useful, whether some rule restricts tolerations, and what the pass-sensitive rules read together
depend on that selection alone, not on the request: the snapshot keeps them per selection
(`PolicySnapshot.policy_set`), so a review pays for a lookup, not for a walk over every rule.
"""

from dataclasses import dataclass
from typing import Any

from webhook.actions.restrictions import RESTRICT_TOLERATIONS
from webhook.policy.model import Policy, Rule
from webhook.policy.reads import Reads
from webhook.policy.selection_conditions import SelectionConditions

ADD_TOLERATION = "add-toleration"
KEPT_SETS = 256
"""Selections a snapshot keeps; past this (namespaces of ever new label sets) it starts again."""


@dataclass(frozen=True, slots=True)
class PolicySet:
    """The selected policies, in evaluation order, and what their rules say about a request's passes."""

    policies: tuple[Policy, ...]
    sensitive: tuple[tuple[Policy, Rule], ...]
    """The rules whose outcome can depend on what a pass writes (`Rule.pass_sensitive`)."""
    selector_rules: bool
    """Some sensitive rule derives the workload's own-pods selector (`Rule.own_pods_fallback`)."""
    sensitive_reads: Reads
    """Everything the sensitive rules read together: a change that touches none of it changes none of them."""
    static_tolerations: tuple[Rule, ...]
    """When some rule restricts tolerations: the add-toleration rules with fixed parameters (what they add is
    let pass); empty otherwise."""
    conditions: SelectionConditions
    """Every policy's batched conditions in one list (`selection_conditions`)."""

    @classmethod
    def of(cls, policies: tuple[Policy, ...], environment: Any, *, kept: bool = True) -> "PolicySet":
        """`kept`: whether the snapshot keeps it (only then is its conditions' list ever compiled)."""
        sensitive = tuple((policy, rule) for policy in policies for rule in policy.rules if rule.pass_sensitive)
        reads = Reads()
        for _, rule in sensitive:
            reads = reads | rule.reads
        rules = [rule for policy in policies for rule in policy.rules]
        restricts = any(rule.action.name == RESTRICT_TOLERATIONS for rule in rules)
        static = tuple(rule for rule in rules if rule.action.name == ADD_TOLERATION
                       and not rule.parameter_expressions) if restricts else ()
        return cls(policies, sensitive, any(rule.own_pods_fallback for _, rule in sensitive), reads, static,
                   SelectionConditions(policies, environment, kept=kept))
