"""Apply a policy snapshot to one admission request: the rule loop of DESIGN §1.

For each pod template of the workload, every rule of every selected policy is evaluated in order on one
activation, and its action changes a working copy of the template; the patch is the difference between
the original template and the copy. Pure: no I/O, no clock other than the deadline, no metrics.
"""

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.actions.base import ActionContext, ActionSkipped, working_copy
from webhook.actions.metadata import APPLIED_ANNOTATION
from webhook.actions.parameters import parse_parameters
from webhook.engine.activation import pod_variable, workload_variable
from webhook.gang.facts import GangFacts, gang_facts, lazy
from webhook.policy import cel
from webhook.policy.model import ConditionBatch, Policy, Rule
from webhook.policy.snapshot import PolicySnapshot
from webhook.review import AdmissionRequest
from webhook.typing import JSONObject, JSONPatch
from webhook.workloads import TemplateSlot, WorkloadKind, WorkloadTable

INJECT_LABEL = "placer.dev/inject"

Outcome = Literal["applied", "not-matched", "missing", "error", "skipped"]


@dataclass(frozen=True, slots=True)
class RuleTrace:
    """What one rule did to one template, for `placer apply -o explain`, metrics and logs."""

    policy: str
    rule: str
    template: str
    outcome: Outcome
    detail: str = ""
    changed: bool = False


@dataclass(slots=True)
class Mutation:
    """The engine's answer. `denial` set means the request must be refused (failurePolicy: Fail)."""

    patch: JSONPatch = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    traces: list[RuleTrace] = field(default_factory=list)
    denial: str | None = None
    passed_through: str | None = None
    """Why no policy was evaluated (kind not handled, opted out, template unchanged...), else None."""


class _DenyRequest(Exception):
    """A rule failed under `failurePolicy: Fail`."""


def mutate(
    request: AdmissionRequest,
    snapshot: PolicySnapshot,
    workloads: WorkloadTable,
    *,
    deadline: float | None = None,
) -> Mutation:
    """Evaluate the snapshot's policies against the request's object and return the patch to send."""
    obj = request.object
    kind = workloads.lookup(request.group, request.kind)
    if kind is None:
        unhandled = f"{request.kind} is not a workload kind Placer handles; admitted unchanged"
        return Mutation(passed_through=unhandled, warnings=[unhandled])
    reason = _pass_through_reason(request, kind, obj)
    if reason is not None or obj is None:
        return Mutation(passed_through=reason or "no object")
    namespace = snapshot.namespace(request.namespace)
    policies = [policy for policy in snapshot.policies if policy.applies_to_namespace(namespace.labels)]
    if not policies:
        return Mutation(passed_through="no policy selects this namespace")
    mutation = Mutation()
    base = {
        "object": obj,
        "oldObject": request.old_object,
        "request": request.as_cel(),
        "namespaceObject": namespace.as_cel(),
        "workload": workload_variable(request, kind, obj),
    }
    gang = lazy(lambda: gang_facts(kind, obj, request.name or ""))
    try:
        for slot in kind.templates(obj):
            raw = slot.read(obj)
            if raw is not None:
                _mutate_template(
                    slot=slot,
                    raw=raw,
                    obj=obj,
                    kind=kind,
                    policies=policies,
                    base=base,
                    snapshot=snapshot,
                    mutation=mutation,
                    deadline=deadline,
                    gang=gang,
                )
    except _DenyRequest as denial:
        return Mutation(warnings=mutation.warnings, traces=mutation.traces, denial=str(denial))
    mutation.applied = list(dict.fromkeys(mutation.applied))
    return mutation


def _pass_through_reason(request: AdmissionRequest, kind: WorkloadKind, obj: JSONObject | None) -> str | None:
    if request.sub_resource:
        return f"subresource {request.sub_resource}"
    if request.operation not in kind.operations:
        return f"{request.operation} of {kind.kind} is not mutated"
    if obj is None:
        return "no object"
    labels = (obj.get("metadata") or {}).get("labels") if isinstance(obj.get("metadata"), dict) else None
    if isinstance(labels, dict) and labels.get(INJECT_LABEL) == "disabled":
        return f"labelled {INJECT_LABEL}=disabled"
    if request.operation == "UPDATE" and not kind.template_changed(obj, request.old_object):
        return "the update does not change the pod template"
    return None


def _mutate_template(
    *,
    slot: TemplateSlot,
    raw: JSONObject,
    obj: JSONObject,
    kind: WorkloadKind,
    policies: list[Policy],
    base: Mapping[str, Any],
    snapshot: PolicySnapshot,
    mutation: Mutation,
    deadline: float | None,
    gang: Callable[[], GangFacts],
) -> None:
    original = slot.view(obj, raw)
    template = working_copy(original)
    pod, resources, notes = pod_variable(original)
    mutation.warnings.extend(f"{slot.name or kind.kind}: {note}" for note in notes)
    data = {**base, "pod": pod, "resources": resources, "variables": {}}
    activation = cel.activation(snapshot.environment, data)
    default_selector = kind.own_pods(obj, original)
    protected = kind.selector_labels(obj)
    applied: list[str] = []
    for policy in policies:
        scope = _PolicyScope(policy, data, activation, snapshot.environment)
        for rule in policy.rules:
            if deadline is not None and time.monotonic() > deadline:
                mutation.warnings.append("deadline reached: remaining rules were not evaluated")
                _finish(
                    slot=slot,
                    obj=obj,
                    raw=raw,
                    original=original,
                    template=template,
                    applied=applied,
                    mutation=mutation,
                )
                return
            trace = _run_rule(
                policy=policy,
                rule=rule,
                scope=scope,
                template=template,
                slot=slot,
                mutation=mutation,
                context=ActionContext(rule.override, default_selector, protected, slot.name, gang),
            )
            mutation.traces.append(trace)
            if trace.outcome == "applied":
                applied.append(f"{policy.name}/{rule.name}")
    _finish(slot=slot, obj=obj, raw=raw, original=original, template=template, applied=applied, mutation=mutation)


def _run_rule(
    *,
    policy: Policy,
    rule: Rule,
    scope: "_PolicyScope",
    template: JSONObject,
    slot: TemplateSlot,
    mutation: Mutation,
    context: ActionContext,
) -> RuleTrace:
    rule_id = f"{policy.name}/{rule.name}"

    def trace(outcome: Outcome, detail: str = "", changed: bool = False) -> RuleTrace:
        return RuleTrace(policy.name, rule.name, slot.name, outcome, detail, changed)

    def fail(detail: str) -> RuleTrace:
        mutation.warnings.append(f"{rule_id}: {detail}")
        if policy.failure_policy == "Fail":
            raise _DenyRequest(f"policy {policy.name}, rule {rule.name}: {detail}")
        return trace("error", detail)

    activation, problem = scope.activation_for(rule)
    if problem is not None:
        return trace("missing", problem.missing) if problem.missing else fail(problem.error or "")
    if rule.condition is not None:
        result = scope.batched_condition(rule) or cel.evaluate(rule.condition, activation)
        if result.missing is not None:
            return trace("missing", result.missing)
        if result.error is not None:
            return fail(f"condition: {result.error}")
        if not isinstance(result.value, bool):
            return fail(f"condition returned {type(result.value).__name__}, not bool")
        if not result.value:
            return trace("not-matched", "condition is false")
    parameters = rule.parameters
    if rule.parameter_expressions:
        computed: dict[str, Any] = dict(rule.raw_parameters)
        for name, program in rule.parameter_expressions.items():
            result = cel.evaluate(program, activation)
            if result.missing is not None:
                return trace("missing", f"parameterExpressions.{name}: {result.missing}")
            if result.error is not None:
                return fail(f"parameterExpressions.{name}: {result.error}")
            computed[name] = result.value
        parameters, problems = parse_parameters(rule.action, computed)
        if problems:
            return fail("; ".join(f"parameters.{name}: {message}" for name, message in problems))
    try:
        changed = rule.action.apply(template, parameters, context)
    except ActionSkipped as skipped:
        mutation.warnings.append(f"{rule_id}: skipped: {skipped}")
        return trace("skipped", str(skipped))
    mutation.warnings.extend(f"{rule_id}: {conflict}" for conflict in context.conflicts)
    return trace("applied", "; ".join(context.conflicts), changed)


def _finish(
    *,
    slot: TemplateSlot,
    obj: JSONObject,
    raw: JSONObject,
    original: JSONObject,
    template: JSONObject,
    applied: list[str],
    mutation: Mutation,
) -> None:
    """Add provenance to a template Placer changed, and its operations to the patch."""
    if template == original:
        return
    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
    if not isinstance(annotations, dict):
        annotations = template["metadata"]["annotations"] = {}
    annotations[APPLIED_ANNOTATION] = ",".join(applied)
    mutation.patch.extend(slot.patch(obj, raw, template))
    mutation.applied.extend(applied)


class _PolicyScope:
    """A policy's variables for one template, evaluated on first use and at most once (lazily)."""

    def __init__(self, policy: Policy, data: Mapping[str, Any], activation: Any, environment: Any) -> None:
        self._policy = policy
        self._data = data
        self._base_activation = activation
        self._environment = environment
        self._values: dict[str, Any] = {}
        self._failures: dict[str, cel.Result] = {}
        self._activation = activation
        self._batch: dict[str, cel.Result] | None = None

    def batched_condition(self, rule: Rule) -> cel.Result | None:
        """The rule's condition from the policy's one-call batch, or None to evaluate it alone.

        The batch is evaluated on first use, on the template's base activation (batched conditions read
        no policy variables). A batch that failed as a whole yields None for every rule: the one-by-one
        evaluation then gives each rule its own outcome and message.
        """
        batch = self._policy.conditions
        if batch is None:
            return None
        if self._batch is None:
            self._batch = _split_batch(batch, cel.evaluate(batch.program, self._base_activation))
        return self._batch.get(rule.name)

    def activation_for(self, rule: Rule) -> tuple[Any, cel.Result | None]:
        """An activation with every variable the rule needs, or the failure of one of them."""
        if not rule.reads_variables:
            return self._base_activation, None
        pending = [v for v in self._policy.variables if v.name in rule.reads_variables and v.name not in self._values]
        for variable in pending:
            if variable.name in self._failures:
                return None, self._failures[variable.name]
            result = cel.evaluate(variable.program, self._activation)
            if result.missing is not None or result.error is not None:
                where = f"variables.{variable.name}: "
                failure = cel.Result(
                    missing=where + result.missing if result.missing else None,
                    error=where + (result.error or "") if result.error else None,
                )
                self._failures[variable.name] = failure
                return None, failure
            self._values[variable.name] = result.value
            self._activation = cel.activation(self._environment, {**self._data, "variables": dict(self._values)})
        for name in rule.reads_variables:
            if name in self._failures:
                return None, self._failures[name]
        return self._activation, None


def _split_batch(batch: ConditionBatch, result: cel.Result) -> dict[str, cel.Result]:
    values = result.value if result.missing is None and result.error is None else None
    if not isinstance(values, list) or len(values) != len(batch.rules):
        return {}
    return {
        name: cel.Result(value=value)
        for name, value in zip(batch.rules, values, strict=True)
        if isinstance(value, bool)
    }
