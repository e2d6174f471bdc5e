"""Compiled SchedulingPolicy objects: immutable, ready to evaluate, shared by every request."""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.actions.base import ActionSpec
from webhook.policy.cel.environment import Program
from webhook.policy.exemptions import Enforcement, Exemptions
from webhook.policy.reads import Reads
from webhook.support.selectors import LabelSelector

FailurePolicy = Literal["Ignore", "Fail"]


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    program: Program


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    action: ActionSpec
    condition: Program | None
    parameters: Mapping[str, Any]
    """Static parameters, already validated and normalised (defaults filled in when nothing is deferred)."""
    raw_parameters: Mapping[str, Any]
    """As written, so computed parameters can be merged over them and validated together."""
    parameter_expressions: Mapping[str, Program]
    override: bool
    reads_variables: frozenset[str]
    """Every policy variable the condition and parameter expressions need, dependencies included."""
    reads: Reads
    """What the rule's expressions (with those variables) read of the template and the object."""
    inlined: "Inlined | None" = None
    """The condition and parameter expressions with the variables written into them, for when a variable
    fails or holds a value that cannot leave CEL (an optional, a type); None without variables."""
    own_pods_fallback: bool = field(init=False, compare=False, repr=False)
    """The action derives the workload's own-pods selector (no `labelSelector` parameter given)."""
    pass_sensitive: bool = field(init=False, compare=False, repr=False)
    """What the rule does may change when a pass writes to the template: it reads the template or the
    object, or derives a selector from labels a rule may add (the engine's fixed point looks at these)."""
    checked: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    """Computed parameters already checked, by their values (`webhook.engine.rule_run`): a rule computing
    `namespaceObject.metadata.labels['node-pool']` computes the same few values over and over."""
    not_matched: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Per template name, the engine's outcome key and trace of this rule not matching (`webhook.engine.passes`):
    the same every time, and most rules on most objects end so (a trace is never changed once made)."""

    def __post_init__(self) -> None:
        fallback = self.action.own_pods != "never" and "labelSelector" not in self.raw_parameters
        object.__setattr__(self, "own_pods_fallback", fallback)
        object.__setattr__(self, "pass_sensitive", bool(self.reads.template or self.reads.object or fallback))


@dataclass(frozen=True, slots=True)
class Inlined:
    condition: Program | None
    parameter_expressions: Mapping[str, Program]


@dataclass(frozen=True, slots=True)
class ConditionBatch:
    """The conditions of several rules compiled into one list-valued expression `[c1, c2, ...]`.

    One evaluation instead of one per rule: each CEL call costs a few µs of fixed overhead, which dominated
    the engine's time. All conditions of a template see the same activation, and CEL has no side effects,
    so evaluating them together gives exactly the per-rule results. When any element fails (a missing key,
    an error), the whole list is an error and the engine evaluates those rules one by one, which yields
    the precise per-rule outcome and message.
    """

    program: Program
    rules: tuple[str, ...]
    """Names of the rules whose conditions are the list's elements, in order."""


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    priority: int
    namespace_selector: LabelSelector | None
    failure_policy: FailurePolicy
    variables: tuple[Variable, ...]
    rules: tuple[Rule, ...]
    source: str
    """Where the policy came from (a file path, or `cluster`), for messages."""
    generation: int | None = None
    enforcement: Enforcement = "Advisory"
    """Enforced: a conflict with a rule is refused, the opt-out label does not exempt, a Pod may not name its
    node, `restrict-tolerations` refuses (`webhook.engine.enforcement`)."""
    exemptions: Exemptions | None = None
    """Who an Enforced policy treats as Advisory (`webhook.policy.exemptions`)."""
    conditions: tuple[ConditionBatch, ...] = ()
    """At most two batches: the conditions that read no policy variable, then those that do, with their
    variables written in (`Rule.inlined`): rules without a batch, or whose batch fails, are evaluated alone.
    Kept apart so that a variable that is missing for some objects (`object.metadata.labels.tier`) fails only
    its own batch."""
    combined: ConditionBatch | None = field(default=None, compare=False, repr=False)
    """Both batches of `conditions` in one program, tried first when there are two: one CEL call instead of
    two on the objects where neither fails; where it fails, the two batches are evaluated as before."""
    document: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    positions: tuple[tuple[int, ...], ...] = field(init=False, compare=False, repr=False)
    """For each batch of `conditions`, the index in `rules` of the rule each of its elements decides."""
    combined_positions: tuple[int, ...] = field(init=False, compare=False, repr=False)
    """The same for `combined` (empty without it)."""
    reads_namespace: bool = field(init=False, compare=False, repr=False)
    """Whether the policy selects namespaces by label or an expression reads `namespaceObject` (`field_reads`;
    one that could not be analysed counts as reading it): it cannot be decided for a namespace Placer could
    not read."""

    def __post_init__(self) -> None:
        index = {rule.name: position for position, rule in enumerate(self.rules)}
        object.__setattr__(self, "positions", tuple(
            tuple(index[name] for name in batch.rules) for batch in self.conditions))
        combined = tuple(index[name] for name in self.combined.rules) if self.combined is not None else ()
        object.__setattr__(self, "combined_positions", combined)
        selects = self.namespace_selector is not None and not self.namespace_selector.empty
        reads = any(program.fields is None or "namespaceObject" in program.fields for program in self.programs())
        object.__setattr__(self, "reads_namespace", selects or reads)

    def keeping(self, rules: tuple[Rule, ...]) -> "Policy":
        """The policy with only `rules` (some of its own, in its order); a condition batch that decides a rule
        left out goes too, and the rules it decided are then evaluated one by one."""
        names = {rule.name for rule in rules}
        batches = tuple(batch for batch in self.conditions if names.issuperset(batch.rules))
        combined = self.combined if self.combined is not None and names.issuperset(self.combined.rules) else None
        return dataclasses.replace(self, rules=rules, conditions=batches, combined=combined)

    def programs(self) -> list[Program]:
        """Every program the engine may evaluate for this policy."""
        found = [variable.program for variable in self.variables]
        for rule in self.rules:
            found.extend(rule.parameter_expressions.values())
            if rule.condition is not None:
                found.append(rule.condition)
            if rule.inlined is not None:
                found.extend(rule.inlined.parameter_expressions.values())
                if rule.inlined.condition is not None:
                    found.append(rule.inlined.condition)
        found.extend(batch.program for batch in self.conditions)
        if self.combined is not None:
            found.append(self.combined.program)
        return found

    @property
    def enforced(self) -> bool:
        """The policy is a boundary (`enforcement: Enforced`), not advice."""
        return self.enforcement == "Enforced"

    @property
    def audited(self) -> bool:
        """The policy is evaluated but never applied (`enforcement: Audit`, `webhook.admission.audit`)."""
        return self.enforcement == "Audit"

    @property
    def order_key(self) -> tuple[int, str]:
        """Lower priority runs first; ties are broken by name."""
        return (self.priority, self.name)

    def applies_to_namespace(self, labels: Mapping[str, str]) -> bool:
        return self.namespace_selector is None or self.namespace_selector.matches(labels)
