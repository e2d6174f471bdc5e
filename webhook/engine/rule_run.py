"""One rule on one template: its condition, variables and parameter expressions, then its action.

Failures become the rule's trace and a warning, or deny the request under `failurePolicy: Fail`."""

from collections.abc import Mapping
from typing import Any

from webhook.actions.base import ActionContext, ActionSkipped, Conflict
from webhook.actions.parameters import parse_parameters
from webhook.engine.enforcement import describe_value, introduced, refusal
from webhook.engine.outcome import DenyRequest, Mutation, Outcome, RuleTrace, rule_id
from webhook.engine.policy_scope import PolicyScope
from webhook.policy.cel import environment as cel
from webhook.policy.model import Policy, Rule
from webhook.support.typing import JSONObject
from webhook.workloads import TemplateSlot


def run_rule(
    policy: Policy,
    rule: Rule,
    scope: "PolicyScope",
    batched: bool | None,
    template: JSONObject,
    *,
    slot: TemplateSlot,
    mutation: Mutation,
    context: "RuleContexts",
) -> RuleTrace:
    def trace(outcome: Outcome, detail: str = "", changed: bool = False) -> RuleTrace:
        return RuleTrace(policy.name, rule.name, slot.name, outcome, detail, changed)

    def fail(detail: str) -> RuleTrace:
        mutation.warnings.append(f"{rule_id(policy, rule)}: {detail}")
        if policy.failure_policy == "Fail":
            raise DenyRequest(f"policy {policy.name}, rule {rule.name}: {detail}")
        if policy.name in context.enforced:  # an Enforced policy that cannot be evaluated fails closed
            raise DenyRequest(f"policy {policy.name}, rule {rule.name}: {detail}; an Enforced policy that cannot "
                              "be evaluated refuses")
        return trace("error", detail)

    def decide(condition: cel.Program, activation: Any) -> RuleTrace | None:
        """None when the condition holds, else the rule's trace. `batched`, the condition's value from its
        batch, holds for the inlined condition as well: the batch of conditions reading variables has them
        written in."""
        result = cel.Result(value=batched) if batched is not None else scope.evaluate(condition, activation)
        if result.missing is not None:
            return trace("missing", result.missing)
        if result.error is not None:
            return fail(f"condition: {result.error}")
        if not isinstance(result.value, bool):
            return fail(f"condition returned {type(result.value).__name__}, not bool")
        return None if result.value else trace("not-matched", "condition is false")

    condition, expressions = rule.condition, rule.parameter_expressions
    if condition is not None and not condition.reads_variables:
        # Variables are evaluated lazily: a condition that reads none decides first, and a
        # variable only the parameters read is not evaluated, nor its failure reported, for a rule that
        # does not match.
        outcome = decide(condition, scope.base)
        if outcome is not None:
            return outcome
        condition = None
    activation, problem = scope.activation_for(rule)
    if problem is not None:
        if rule.inlined is None:
            return trace("missing", problem.missing) if problem.missing else fail(problem.error or "")
        # A variable failed or cannot leave CEL: evaluate with the variables written in, as Kubernetes'
        # lazy variables would (an error in a branch that does not decide is absorbed).
        activation, expressions = scope.base, rule.inlined.parameter_expressions
        condition = rule.inlined.condition if condition is not None else None
    if condition is not None:
        outcome = decide(condition, activation)
        if outcome is not None:
            return outcome
    parameters = rule.parameters
    if expressions:
        computed: dict[str, Any] = dict(rule.raw_parameters)
        for name, program in expressions.items():
            result = scope.evaluate(program, activation)
            if result.missing is not None:
                return trace("missing", f"parameterExpressions.{name}: {result.missing}")
            if result.error is not None:
                return fail(f"parameterExpressions.{name}: {result.error}")
            computed[name] = result.value
        parameters, problems = checked_parameters(rule, computed)
        if problems:
            return fail("; ".join(f"parameters.{name}: {message}" for name, message in problems))
    return act(policy, rule, parameters, template, slot.name, mutation=mutation, context=context)


CHECKED_KEPT = 64
"""Checked parameter sets kept per rule; past this, the rule's are dropped and checked afresh."""
_SCALARS = (str, int, float, bool, type(None))


def checked_parameters(rule: Rule, computed: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """`parse_parameters` of the rule's computed parameters, once per set of values for scalar ones (the
    normalised parameters are never changed by an action, as the static ones are not)."""
    key: list[Any] = []
    for name, value in computed.items():
        if not isinstance(value, _SCALARS):
            return parse_parameters(rule.action, computed)
        key += (name, type(value), value)  # True is not 1 here
    kept = tuple(key)
    found = rule.checked.get(kept)
    if found is None:
        if len(rule.checked) >= CHECKED_KEPT:
            rule.checked.clear()
        found = rule.checked[kept] = parse_parameters(rule.action, computed)
    return found


def act(
    policy: Policy,
    rule: Rule,
    parameters: Mapping[str, Any],
    template: JSONObject,
    slot_name: str,
    *,
    mutation: Mutation,
    context: "RuleContexts",
) -> RuleTrace:
    """Apply a matched rule's action to the working template."""
    action_context = context.for_rule(rule)
    try:
        changed = rule.action.apply(template, parameters, action_context)
    except ActionSkipped as skipped:
        mutation.warnings.append(f"{rule_id(policy, rule)}: skipped: {skipped}")
        return RuleTrace(policy.name, rule.name, slot_name, "skipped", str(skipped))
    conflicts = action_context.conflicts
    if not conflicts:
        return RuleTrace(policy.name, rule.name, slot_name, "applied", "", changed)
    refused = context.refused(policy, rule, conflicts)
    mutation.warnings.extend(f"{rule_id(policy, rule)}: {conflict}" for conflict in conflicts
                             if not any(conflict is item for item in refused))
    if refused:
        detail = "; ".join(f"{context.prefix}{item.field}: wanted {describe_value(item.wanted)}, found "
                           f"{describe_value(item.found)}" for item in refused)
        return RuleTrace(policy.name, rule.name, slot_name, "denied", detail, changed)
    return RuleTrace(policy.name, rule.name, slot_name, "applied", "; ".join(map(str, conflicts)), changed)



class RuleContexts:
    """The ActionContext of one template's pass, handed to each rule that acts with that rule's `override`
    and an empty conflict list: what the rules share on a template is built once, not once per rule.

    Also what decides a refusal on this template: `enforced`, the Enforced policies holding the request;
    `exempt`, those that would but exempt it (a conflict of theirs makes the template `exempted`: Placer seals
    it, `webhook.engine.exemption_seal`); `original` and `old`, the template as the request brings it and as it
    was before (UPDATE), since only a conflict the request introduces is refused; `prefix`, the template's
    place in the object."""

    __slots__ = ("_context", "enforced", "exempt", "exempted", "old", "original", "prefix", "refusals")

    def __init__(
        self, context: ActionContext, *, enforced: frozenset[str] = frozenset(), original: JSONObject | None = None,
        old: JSONObject | None = None, prefix: str = "", refusals: list[str] | None = None,
        exempt: frozenset[str] = frozenset(),
    ) -> None:
        self._context = context
        self.enforced = enforced
        self.exempt = exempt
        self.exempted = False
        self.original = original if original is not None else {}
        self.old = old
        self.prefix = prefix
        self.refusals = refusals if refusals is not None else []
        """Every refusal of this pass, for the request's denial."""

    def refused(self, policy: Policy, rule: Rule, conflicts: list[Conflict]) -> list[Conflict]:
        """The conflicts this rule's policy refuses (recorded in `refusals`); the rest are warnings."""
        if policy.name not in self.enforced:
            if policy.name in self.exempt and any(conflict.refusable for conflict in conflicts):
                self.exempted = True
            return []
        found = [conflict for conflict in conflicts
                 if conflict.refusable and introduced(conflict, self.original, self.old)]
        self.refusals.extend(refusal(policy, rule, self.prefix, conflict) for conflict in found)
        return found

    def for_rule(self, rule: Rule) -> ActionContext:
        context = self._context
        context.override = rule.override
        if context.conflicts:
            context.conflicts = []
        return context

