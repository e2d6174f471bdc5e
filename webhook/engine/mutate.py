"""Apply a policy snapshot to one admission request: the rule loop (docs/architecture.md).

Every rule of every selected policy is evaluated in order for each pod template of the workload, and its
action changes a working copy of the template. The result must be a fixed point: the API server may call
Placer again on its own output (`reinvocationPolicy: IfNeeded`), a controller creates pods from the mutated
template, and both must get an empty patch. So when a pass changed something, the rules run again on what
it wrote (a label an earlier rule added can make a later condition true, or give a spread its selector)
until a pass changes nothing. The patch is the difference between the object and that fixed point.

Pure: no I/O, no clock other than the deadline, no metrics.
"""

import dataclasses
import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.actions.base import ActionContext, ActionSkipped, working_copy
from webhook.actions.metadata import APPLIED_ANNOTATION
from webhook.actions.parameters import parse_parameters
from webhook.engine.activation import pod_variable, workload_variable
from webhook.gang.facts import GangFacts, gang_facts, lazy
from webhook.gang.pod_groups import owns_pod_groups
from webhook.patches import apply_sharing, diff, unescape
from webhook.policy import cel
from webhook.policy.model import ConditionBatch, Policy, Rule
from webhook.policy.reads import Changes
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot, UnknownNamespace
from webhook.review import AdmissionRequest
from webhook.typing import JSONObject, JSONPatch, as_map
from webhook.volumes import ClaimPlacement
from webhook.workloads import TemplateSlot, WorkloadKind, WorkloadTable, controller_reference

INJECT_LABEL = "placer.dev/inject"
MAX_PASSES = 4
"""Passes over the rules before Placer gives up on reaching a fixed point (only `override: true` rules that
undo each other can keep changing the template; a pass can only add to what the previous one wrote)."""
DEADLINE_WARNING = "deadline reached before every rule was evaluated; admitted unchanged"

Outcome = Literal["applied", "not-matched", "missing", "error", "skipped"]


@dataclass(slots=True)
class RuleTrace:
    """What one rule did to one template, for `placer apply -o explain`, metrics and logs.

    Not frozen: one is made per rule and template on every admission, and a frozen dataclass costs four
    times as much to build. Nothing changes a trace once made."""

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
    """Why no policy was evaluated (kind not handled, opted out, owned by a controller...), else None."""
    notes: list[str] = field(default_factory=list)
    """What was left alone and why, short of passing the whole object through (explain and logs)."""
    placed: dict[str, tuple[JSONObject, JSONObject]] = field(default_factory=dict)
    """Per template Placer changed: (the template as it came, as Placer leaves it), for placement checks."""
    volume_outcomes: dict[str, str] = field(default_factory=dict)
    """Per claim of a Pod, what `pin-to-volume-node` did (pinned, pinned-node-gone, node-gone, volume-missing)."""
    gang: GangFacts | None = None
    """The workload's gang facts when a rule labelled it for a gang scheduler (their `derived` holds each
    flavour's group name and size), for the gang capacity check."""


class _DenyRequest(Exception):
    """A rule failed under `failurePolicy: Fail`."""


class _DeadlineReached(Exception):
    """The API server's deadline came before every rule was evaluated."""


def mutate(
    request: AdmissionRequest,
    snapshot: PolicySnapshot,
    workloads: WorkloadTable,
    *,
    deadline: float | None = None,
    namespace: NamespaceInfo | UnknownNamespace | None = None,
    claims: Mapping[str, ClaimPlacement] | None = None,
) -> Mutation:
    """Evaluate the snapshot's policies against the request's object and return the patch to send.

    `namespace` is what the caller learnt about the request's namespace; by default the snapshot's entry
    (a namespace the snapshot does not know has no labels, which is right when no cluster is connected).
    `claims`: for a Pod, where the data of each claim it mounts lives (`pin-to-volume-node`), when known.
    """
    obj = request.object
    kind = workloads.lookup(request.group, request.kind)
    if kind is None:
        unhandled = f"{request.kind} is not a workload kind Placer handles; admitted unchanged"
        return Mutation(passed_through=unhandled, warnings=[unhandled])
    if obj is None:
        return Mutation(passed_through="no object")
    pod_only = claims is not None and kind.kind == "Pod" and _from_mutated_template(obj)
    reason = pass_through_reason(request, kind, obj, pod_only_rules=pod_only)
    if reason is not None:
        return Mutation(passed_through=reason)
    mutation = Mutation()
    info = namespace if namespace is not None else snapshot.namespace(request.namespace)
    try:
        policies = _selected_policies(snapshot, info, mutation)
    except _DenyRequest as denial:
        return Mutation(warnings=mutation.warnings, denial=str(denial))
    if pod_only:
        policies = _pod_only_rules(policies)
        if not policies:
            return Mutation(passed_through=_controller_owned(kind, obj))
    if not policies:
        if not mutation.warnings:
            mutation.passed_through = "no policy selects this namespace"
        return mutation
    known = info if isinstance(info, NamespaceInfo) else NamespaceInfo(info.name)
    run = _Run(
        request=request,
        kind=kind,
        snapshot=snapshot,
        policies=policies,
        namespace=known,
        mutation=mutation,
        deadline=deadline,
        claims=claims,
        applied_before=_applied_rules(obj) if pod_only else (),
    )
    try:
        patch = run.settle(obj)
    except _DenyRequest as denial:
        return Mutation(warnings=_unique(mutation.warnings), traces=run.trace_list(), denial=str(denial))
    except _DeadlineReached:
        return Mutation(warnings=[DEADLINE_WARNING], traces=run.trace_list(), passed_through="deadline reached")
    mutation.patch = patch + _marks_patch(obj, run.marks)
    facts = run.gang.value
    if facts is not None and facts.derived:
        mutation.gang = facts
    mutation.applied = list(dict.fromkeys(mutation.applied))
    mutation.warnings = _unique(mutation.warnings)
    return mutation


def pass_through_reason(
    request: AdmissionRequest, kind: WorkloadKind, obj: JSONObject, *, pod_only_rules: bool = False
) -> str | None:
    """Why Placer must leave this object as it is, or None when its policies apply.

    `pod_only_rules`: the object is a Pod created from a template Placer already mutated, and only the rules
    that read what the Pod alone has (`ActionSpec.pod_only`) will run on it: that is no reason to pass."""
    if request.sub_resource:
        return f"subresource {request.sub_resource}"
    if request.operation not in kind.operations:
        return f"{request.operation} of {kind.kind} is not mutated"
    if _labelled_disabled(obj):
        return f"labelled {INJECT_LABEL}=disabled"
    owned = None if pod_only_rules else _controller_owned(kind, obj)
    if owned is not None:
        return owned
    if request.operation == "UPDATE" and not kind.template_changed(obj, request.old_object):
        return "the update does not change the pod template"
    views = [slot.view(obj, raw) for slot in kind.templates(obj) if (raw := slot.read(obj)) is not None]
    if views and all(_labelled_disabled(view) for view in views):
        return f"pod template labelled {INJECT_LABEL}=disabled"
    return None


def _patch(kind: WorkloadKind, original: JSONObject, final: JSONObject) -> JSONPatch:
    """Operations turning each template of the original into the final one (templates are all that change)."""
    patch: JSONPatch = []
    for slot in kind.templates(original):
        raw, settled = slot.read(original), slot.read(final)
        if raw is not None and settled is not None and raw is not settled:
            patch.extend(slot.patch(original, raw, slot.view(final, settled)))
    return patch


def _marks_patch(obj: JSONObject, marks: Mapping[tuple[str, str], str | None] | None) -> JSONPatch:
    """Operations putting the rules' marks on the workload's own metadata (labels and annotations; nothing
    under the pod template, so no rollout): what the controller reads (`webhook.gang.pod_groups`)."""
    if not marks:
        return []
    metadata = as_map(obj.get("metadata"))
    wanted = {part: dict(as_map(metadata.get(part))) for part in ("labels", "annotations")}
    for (part, key), value in marks.items():
        if value is None:
            wanted[part].pop(key, None)
        else:
            wanted[part][key] = value
    patch: JSONPatch = []
    for part, values in wanted.items():
        current = metadata.get(part)
        if not isinstance(current, dict):
            if values:  # no map yet (or null): add it whole, a patch must create parents
                patch.append({"op": "add", "path": f"/metadata/{part}", "value": values})
        elif values != current:
            patch.extend(diff(current, values, f"/metadata/{part}"))
    return patch


def _controller_owned(kind: WorkloadKind, obj: JSONObject) -> str | None:
    """Objects whose template belongs to their controller are never changed.

    A controller that made an object from its own template compares them: the Deployment controller finds
    its ReplicaSet by template (any difference makes it create another ReplicaSet, forever), operators
    reconcile their StatefulSets and Jobs back. Placer acts on the owner. A Pod is different: no controller
    compares a Pod with its template, so a Pod is left alone only when its template already came through
    Placer (the `placer.dev/applied` annotation), which also keeps pods and their template in agreement.
    """
    owner = controller_reference(obj)
    if owner is None:
        return None
    name = f"{owner.get('kind') or 'controller'}/{owner.get('name') or '?'}"
    if kind.kind != "Pod":
        return f"managed by its controller {name}: its template is the controller's, Placer acts on the owner"
    if _from_mutated_template(obj):
        return f"created by {name} from a template Placer already mutated"
    return None


def _from_mutated_template(pod: JSONObject) -> bool:
    """A controller's Pod that carries `placer.dev/applied`: its template came through Placer."""
    annotations = as_map(as_map(pod.get("metadata")).get("annotations"))
    return APPLIED_ANNOTATION in annotations and controller_reference(pod) is not None


def _applied_rules(obj: JSONObject) -> tuple[str, ...]:
    value = as_map(as_map(obj.get("metadata")).get("annotations")).get(APPLIED_ANNOTATION)
    return tuple(part for part in value.split(",") if part) if isinstance(value, str) else ()


def _pod_only_rules(policies: list[Policy]) -> list[Policy]:
    """The policies cut down to their rules whose action reads what only a Pod has: on a Pod made from a
    template Placer already mutated, every other rule did its work on the template."""
    kept = []
    for policy in policies:
        rules = tuple(rule for rule in policy.rules if rule.action.pod_only)
        if rules:
            kept.append(dataclasses.replace(policy, rules=rules))
    return kept


def _labelled_disabled(template: JSONObject) -> bool:
    """A pod template (or Pod) opted out with `placer.dev/inject: disabled`."""
    return as_map(as_map(template.get("metadata")).get("labels")).get(INJECT_LABEL) == "disabled"


def _selected_policies(
    snapshot: PolicySnapshot, namespace: NamespaceInfo | UnknownNamespace, mutation: Mutation
) -> list[Policy]:
    if isinstance(namespace, NamespaceInfo):
        return [policy for policy in snapshot.policies if policy.applies_to_namespace(namespace.labels)]
    selected = []
    for policy in snapshot.policies:
        if not policy.reads_namespace:
            selected.append(policy)
            continue
        problem = f"namespace {namespace.name} could not be read ({namespace.reason})"
        if policy.failure_policy == "Fail":
            raise _DenyRequest(f"policy {policy.name}: {problem}; failurePolicy Fail")
        mutation.warnings.append(f"{policy.name}: skipped: {problem}")
    return selected


class _Run:
    """One request's evaluation: passes over the rules until the object stops changing."""

    def __init__(
        self,
        *,
        request: AdmissionRequest,
        kind: WorkloadKind,
        snapshot: PolicySnapshot,
        policies: list[Policy],
        namespace: NamespaceInfo,
        mutation: Mutation,
        deadline: float | None,
        claims: Mapping[str, ClaimPlacement] | None = None,
        applied_before: tuple[str, ...] = (),
    ) -> None:
        """`applied_before`: rules an earlier admission applied to this template (a Pod's template), kept
        first in the applied annotation when this one adds more."""
        self.request = request
        self.kind = kind
        self.snapshot = snapshot
        self.policies = policies
        self.mutation = mutation
        self.deadline = deadline
        self.request_cel = request.as_cel()
        self.namespace_cel = namespace.as_cel()
        obj = request.object or {}
        self.gang = lazy(lambda: gang_facts(kind, obj, request.name or "", unique_suffix=_uid_suffix(request.uid)))
        self.protected = kind.selector_label_keys(obj)
        self.default_priority_class = snapshot.default_priority_class if kind.kind == "Pod" else None
        self.claims = claims
        self.marks: dict[tuple[str, str], str | None] | None = {} if owns_pod_groups(kind) else None
        self.volume_outcomes: dict[str, str] = mutation.volume_outcomes
        """Marks rules put on the workload's own metadata (see ActionContext.workload_marks)."""
        self.applied: dict[str, dict[str, None]] = {"": dict.fromkeys(applied_before)} if applied_before else {}
        """Per template, the rules that applied in any pass, in order (a dict used as an ordered set)."""
        self.traces: dict[tuple[str, str, str], RuleTrace] = {}
        self.outcomes: dict[tuple[str, str, str], Outcome] = {}
        """Each rule's outcome per template in the current pass."""
        self.selector_changed: set[str] = set()
        """Templates whose own-pods selector the current pass changed (it changed labels it comes from)."""
        self.selector_rules = False
        self.sensitive: list[tuple[Policy, Rule]] = []
        for policy in policies:
            for rule in policy.rules:
                if rule.pass_sensitive:
                    self.sensitive.append((policy, rule))
                    self.selector_rules = self.selector_rules or rule.own_pods_fallback
        """The rules whose outcome can depend on what a pass writes: only they can make another pass useful."""

    def settle(self, obj: JSONObject) -> JSONPatch:
        """The patch to the object once a pass over every template changes nothing (at most MAX_PASSES)."""
        current = obj
        passes: list[JSONPatch] = []
        for _ in range(MAX_PASSES):
            patch: JSONPatch = []
            self.outcomes = {}
            self.selector_changed = set()
            slots = self.kind.templates(current)
            for slot in slots:
                raw = slot.read(current)
                if raw is None:
                    continue
                view = slot.view(current, raw)
                if _labelled_disabled(view):
                    self.mutation.notes.append(f"template {slot.name}: labelled {INJECT_LABEL}=disabled, left alone")
                    continue
                template = self._one_pass(slot, current, view)
                if template != view:
                    first_seen = self.mutation.placed.get(slot.name, (view, template))[0]
                    self.mutation.placed[slot.name] = (first_seen, template)
                    if self.selector_rules and self.kind.own_pods(current, view) != self.kind.own_pods(
                        current, template
                    ):
                        self.selector_changed.add(slot.name)
                    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
                    if not isinstance(annotations, dict):
                        annotations = template["metadata"]["annotations"] = {}
                    annotations[APPLIED_ANNOTATION] = ",".join(self.applied.get(slot.name, {}))
                    patch.extend(slot.patch(current, raw, template))
            if not patch:
                break
            passes.append(patch)
            if not self._another_pass_may_change(slots, Changes([pointer_tokens(op["path"]) for op in patch])):
                break
            current = apply_sharing(current, patch)
            patch = []
        else:
            self.mutation.warnings.append(f"policies did not settle after {MAX_PASSES} passes (override rules?)")
        self.mutation.notes = _unique(self.mutation.notes)
        self.mutation.traces.extend(self.trace_list())
        for names in self.applied.values():
            self.mutation.applied.extend(names)
        if len(passes) <= 1:  # the usual case: the first pass was already a fixed point
            return passes[0] if passes else []
        return _patch(self.kind, obj, apply_sharing(current, patch) if patch else current)

    def _another_pass_may_change(self, slots: list[TemplateSlot], changed: Changes) -> bool:
        """Whether some rule could act differently on what this pass wrote (else the pass was a fixed point).

        A rule that applied does the same again (actions are idempotent) unless its parameters are computed
        or its action derives the own-pods selector from labels that changed; a rule that did not apply may
        now, if anything it reads changed.
        """
        for slot in slots:
            for policy, rule in self.sensitive:
                outcome = self.outcomes.get((policy.name, rule.name, slot.name))
                if outcome is None or (outcome == "applied" and _repeats_itself(rule)):
                    continue  # did not run on this template, or will do exactly the same again
                if slot.projection is not None and (rule.reads.template or rule.reads.object):
                    return True  # the template is a view: its paths are not the object's
                if _derives_selector(rule, outcome) and slot.name in self.selector_changed:
                    return True
                if (outcome != "applied" or rule.parameter_expressions) and rule.reads.touched_by(changed, slot.path):
                    return True
        return False

    def trace_list(self) -> list[RuleTrace]:
        """One trace per rule and template: the pass where it changed the template, else its first pass."""
        return list(self.traces.values())

    def _one_pass(self, slot: TemplateSlot, obj: JSONObject, original: JSONObject) -> JSONObject:
        template = working_copy(original)
        pod, resources, notes = pod_variable(original)
        self.mutation.warnings.extend(f"{slot.name or self.kind.kind}: {note}" for note in notes)
        data = self.snapshot.observable({
            "object": obj,
            "oldObject": self.request.old_object,
            "request": self.request_cel,
            "namespaceObject": self.namespace_cel,
            "workload": workload_variable(self.request, self.kind, obj),
            "pod": pod,
            "resources": resources,
            "variables": {},
        })
        environment = self.snapshot.environment
        activation = cel.activation(environment, data, self.deadline)
        kind = self.kind
        own_pods: Callable[[JSONObject], JSONObject | None] = lambda current: kind.own_pods(obj, current)  # noqa: E731
        applied = self.applied.setdefault(slot.name, {})
        context = _RuleContexts(ActionContext(
            False, own_pods, self.protected, slot.name, self.gang, workload_marks=self.marks,
            claims=self.claims if kind.kind == "Pod" else None, volume_outcomes=self.volume_outcomes,
            default_priority_class=self.default_priority_class,
        ))
        outcomes, traces, deadline, mutation = self.outcomes, self.traces, self.deadline, self.mutation
        for policy in self.policies:
            scope = _PolicyScope(policy, data, activation, environment)
            for rule, batched in zip(policy.rules, scope.batched, strict=True):
                if deadline is not None and time.monotonic() > deadline:
                    raise _DeadlineReached
                key = (policy.name, rule.name, slot.name)
                if batched is False:  # most rules, on most objects: nothing else to do
                    outcomes[key] = "not-matched"
                    if key not in traces:
                        traces[key] = RuleTrace(policy.name, rule.name, slot.name, "not-matched", "condition is false")
                    continue
                if batched and not rule.parameter_expressions:
                    # matched by its batch, which read any variable written in: nothing else to evaluate
                    trace = _act(policy, rule, rule.parameters, template, slot.name, mutation=mutation, context=context)
                else:
                    trace = _run_rule(policy, rule, scope, batched, template, slot=slot, mutation=mutation,
                                      context=context)
                outcomes[key] = trace.outcome
                previous = traces.get(key)
                if previous is None or (trace.changed and not previous.changed):
                    traces[key] = trace
                if trace.outcome == "applied":
                    applied[_rule_id(policy, rule)] = None
        return template


def _repeats_itself(rule: Rule) -> bool:
    """An applied rule whose parameters are fixed and whose action needs no derived selector: idempotent."""
    return not rule.parameter_expressions and not rule.own_pods_fallback


def _derives_selector(rule: Rule, outcome: Outcome) -> bool:
    """The rule's action falls back to the own-pods selector and may act differently on a new one: one that
    was skipped for want of a selector may find one now, and a term keyed by its selector is added again."""
    return rule.own_pods_fallback and (outcome != "applied" or rule.action.own_pods == "keyed-by-selector")


def pointer_tokens(pointer: str) -> tuple[str, ...]:
    if "~" not in pointer:  # nothing escaped: the usual case
        return tuple(pointer.split("/")[1:])
    return tuple(unescape(token) for token in pointer.split("/")[1:])


def _uid_suffix(uid: str) -> str:
    """A short, stable stand-in for a name the API server has not generated yet (unique per request)."""
    return hashlib.sha256(uid.encode()).hexdigest()[:5]


def _unique(messages: list[str]) -> list[str]:
    return list(dict.fromkeys(messages))


def _run_rule(
    policy: Policy,
    rule: Rule,
    scope: "_PolicyScope",
    batched: bool | None,
    template: JSONObject,
    *,
    slot: TemplateSlot,
    mutation: Mutation,
    context: "_RuleContexts",
) -> RuleTrace:
    def trace(outcome: Outcome, detail: str = "", changed: bool = False) -> RuleTrace:
        return RuleTrace(policy.name, rule.name, slot.name, outcome, detail, changed)

    def fail(detail: str) -> RuleTrace:
        mutation.warnings.append(f"{_rule_id(policy, rule)}: {detail}")
        if policy.failure_policy == "Fail":
            raise _DenyRequest(f"policy {policy.name}, rule {rule.name}: {detail}")
        return trace("error", detail)

    def decide(condition: cel.Program, activation: Any) -> RuleTrace | None:
        """None when the condition holds, else the rule's trace. `batched`, the condition's value from its
        batch, holds for the inlined condition as well: the batch of conditions reading variables has them
        written in."""
        result = cel.Result(value=batched) if batched is not None else cel.evaluate(condition, activation)
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
            result = cel.evaluate(program, activation)
            if result.missing is not None:
                return trace("missing", f"parameterExpressions.{name}: {result.missing}")
            if result.error is not None:
                return fail(f"parameterExpressions.{name}: {result.error}")
            computed[name] = result.value
        parameters, problems = parse_parameters(rule.action, computed)
        if problems:
            return fail("; ".join(f"parameters.{name}: {message}" for name, message in problems))
    return _act(policy, rule, parameters, template, slot.name, mutation=mutation, context=context)


def _act(
    policy: Policy,
    rule: Rule,
    parameters: Mapping[str, Any],
    template: JSONObject,
    slot_name: str,
    *,
    mutation: Mutation,
    context: "_RuleContexts",
) -> RuleTrace:
    """Apply a matched rule's action to the working template."""
    action_context = context.for_rule(rule)
    try:
        changed = rule.action.apply(template, parameters, action_context)
    except ActionSkipped as skipped:
        mutation.warnings.append(f"{_rule_id(policy, rule)}: skipped: {skipped}")
        return RuleTrace(policy.name, rule.name, slot_name, "skipped", str(skipped))
    if not action_context.conflicts:
        return RuleTrace(policy.name, rule.name, slot_name, "applied", "", changed)
    mutation.warnings.extend(f"{_rule_id(policy, rule)}: {conflict}" for conflict in action_context.conflicts)
    return RuleTrace(policy.name, rule.name, slot_name, "applied", "; ".join(action_context.conflicts), changed)


def _rule_id(policy: Policy, rule: Rule) -> str:
    """How warnings and the applied annotation name a rule (made only when a warning needs it)."""
    return f"{policy.name}/{rule.name}"


class _RuleContexts:
    """The ActionContext of one template's pass, handed to each rule that acts with that rule's `override`
    and an empty conflict list: what the rules share on a template is built once, not once per rule."""

    __slots__ = ("_context",)

    def __init__(self, context: ActionContext) -> None:
        self._context = context

    def for_rule(self, rule: Rule) -> ActionContext:
        context = self._context
        context.override = rule.override
        if context.conflicts:
            context.conflicts = []
        return context


class _PolicyScope:
    """A policy's conditions and variables for one template: the conditions evaluated in their batches when
    the policy's turn comes, the variables on first use and at most once (lazily)."""

    def __init__(self, policy: Policy, data: Mapping[str, Any], activation: Any, environment: Any) -> None:
        self._policy = policy
        self._data = data
        self._base_activation = activation
        self._environment = environment
        self._values: dict[str, Any] = {}
        self._failures: dict[str, cel.Result] = {}
        self._activation = activation
        self.batched = self._batched_conditions()
        """Per rule (in the policy's order), its condition's value from a batch, or None to evaluate it alone:
        no condition, not batched, or its batch failed (the one-by-one evaluation then gives each rule its
        own outcome and message)."""

    @property
    def base(self) -> Any:
        """The activation without policy variables."""
        return self._base_activation

    def _batched_conditions(self) -> list[bool | None]:
        """The policy's batches evaluated on the template's base activation (a batch reads no policy variable:
        those are written in): both in one call when the policy has both and neither fails, else each."""
        policy = self._policy
        values: list[bool | None] = [None] * len(policy.rules)
        if policy.combined is not None and self._fill(values, policy.combined, policy.combined_positions):
            return values
        for batch, positions in zip(policy.conditions, policy.positions, strict=True):
            self._fill(values, batch, positions)
        return values

    def _fill(self, values: list[bool | None], batch: ConditionBatch, positions: tuple[int, ...]) -> bool:
        """Set the value of each rule the batch decides; False when the batch failed as a whole."""
        result = cel.evaluate(batch.program, self._base_activation)
        found = result.value if result.missing is None and result.error is None else None
        if not isinstance(found, list) or len(found) != len(positions):
            return False
        for position, value in zip(positions, found, strict=True):
            if value is True or value is False:  # a non-bool is reported by the rule's own evaluation
                values[position] = value
        return True

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
            self._activation = cel.activation(self._environment, {**self._data, "variables": dict(self._values)},
                                             self._base_activation.deadline)
        for name in rule.reads_variables:
            if name in self._failures:
                return None, self._failures[name]
        return self._activation, None

