"""Passes over the rules until the object stops changing: the fixed point of one request's evaluation.

The result must be a fixed point: the API server may call Placer again on its own output
(`reinvocationPolicy: IfNeeded`), a controller creates pods from the mutated template, and both must get an
empty patch. So when a pass changed something, the rules run again on what it wrote (a label an earlier rule
added can make a later condition true, or give a spread its selector) until a pass changes nothing."""

import hashlib
import time
from collections.abc import Callable, Mapping

from webhook.actions.base import ActionContext, working_copy
from webhook.actions.metadata import APPLIED_ANNOTATION
from webhook.actions.tolerations import toleration_from
from webhook.engine.activation import pod_variable, workload_variable
from webhook.engine.enforcement import field_prefix, template_node_name
from webhook.engine.exemption_seal import SEAL_ANNOTATION, Seals, no_key_warning, seal
from webhook.engine.outcome import DeadlineReached, Mutation, Outcome, RuleTrace, rule_id, unique_messages
from webhook.engine.patch_assembly import pointer_tokens, template_patch
from webhook.engine.policy_scope import PolicyScope
from webhook.engine.request import AdmissionRequest
from webhook.engine.rule_run import RuleContexts, act, run_rule
from webhook.engine.selection import INJECT_LABEL, labelled_disabled
from webhook.gang.facts import gang_facts, lazy
from webhook.gang.native_operators import operator_shape
from webhook.gang.pod_groups import owns_pod_groups
from webhook.pods.pod_share import PodShare
from webhook.pods.volumes import ClaimPlacement
from webhook.policy.cel import environment as cel
from webhook.policy.model import Policy, Rule
from webhook.policy.policy_set import PolicySet
from webhook.policy.reads import Changes
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot, ResourcesOfPod
from webhook.support.patches import apply_sharing
from webhook.support.typing import JSONObject, JSONPatch, as_map
from webhook.workloads import TemplateSlot, WorkloadKind

MAX_PASSES = 4
"""Passes over the rules before Placer gives up on reaching a fixed point (only `override: true` rules that
undo each other can keep changing the template; a pass can only add to what the previous one wrote)."""


class Run:
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
        devices: ResourcesOfPod | None = None,
        applied_before: tuple[str, ...] = (),
        enforced: frozenset[str] = frozenset(),
        exempt: frozenset[str] = frozenset(),
        seals: Seals | None = None,
        sealed_slots: frozenset[str] = frozenset(),
        share: PodShare | None = None,
    ) -> None:
        """`share`: a Pod's workload spot share at its creation (`spot-share`). `applied_before`: rules an
        earlier admission applied to this template (a Pod's template), kept
        first in the applied annotation when this one adds more. `enforced`: the Enforced policies that hold
        this request (`webhook.engine.enforcement`); `exempt`: those that exempt it. `seals`: the key that
        seals an exempt request's templates and honours sealed ones (`webhook.engine.exemption_seal`);
        `sealed_slots`: templates found exempt by a seal outside the object (a Pod's, on its owner)."""
        self.request = request
        self.kind = kind
        self.snapshot = snapshot
        self.policies = policies
        self.mutation = mutation
        self.deadline = deadline
        observed = snapshot.observed  # a variable no expression reads is never built (nor converted)
        self.request_cel = request.as_cel() if "request" in observed else {}
        self.namespace_facts = facts = snapshot.namespace_facts.of(namespace)
        self.namespace_cel = snapshot.namespace_variable(namespace, facts)
        self.reads_workload = "workload" in observed
        obj = request.object or {}
        self.gang = lazy(lambda: gang_facts(kind, obj, request.name or "", unique_suffix=uid_suffix(request.uid),
                                            native_version=snapshot.native_gang_version,
                                            old=request.old_object if request.operation == "UPDATE" else None,
                                            stored=request.stored, job_gangs=snapshot.job_gangs))
        self.protected = kind.selector_label_keys(obj)
        self.default_priority_class = snapshot.default_priority_class if kind.kind == "Pod" else None
        self.claims = claims
        self.share = share
        self.devices = devices if snapshot.reads_resources else None
        """Completes `resources` of a template that claims devices through DRA (read only if a policy does)."""
        self.marks: dict[tuple[str, str], str | None] | None = (
            {} if owns_pod_groups(kind) or operator_shape(kind) is not None else None)
        self.volume_outcomes: dict[str, str] = mutation.volume_outcomes
        """Marks rules put on the workload's own metadata (see ActionContext.workload_marks)."""
        self.enforced = enforced
        self.exempt = exempt
        self.seals = seals
        self.sealed_slots = sealed_slots
        self.namespace_name = namespace.name
        self.refusals: list[str] = []
        """The refusals of the last pass: the request is denied when there are any."""
        selection = facts.recall(policies)  # the namespace's selection, met before (`selected_policies`)
        if selection is None:
            selection = snapshot.policy_set(policies)
            if policies is facts.recall(snapshot.policies):
                facts.remember(policies, selection)
        self.selection: PolicySet = selection
        self.placer_tolerations = [toleration_from(rule.parameters) for rule in selection.static_tolerations
                                   ] if selection.static_tolerations else []
        """What the policies' add-toleration rules add, which restrict-tolerations lets pass (computed ones are
        added as their rules run); shared by every template's pass. Empty unless some rule restricts them."""
        old = request.old_object if request.operation == "UPDATE" else None
        self.old_views = {} if old is None else {
            slot.name: slot.view(old, raw) for slot in kind.templates(old) if (raw := slot.read(old)) is not None}
        """On UPDATE, each template as it was: only a conflict the update introduces is refused."""
        self.applied: dict[str, dict[str, None]] = {"": dict.fromkeys(applied_before)} if applied_before else {}
        """Per template, the rules that applied in any pass, in order (a dict used as an ordered set)."""
        self.traces: dict[tuple[str, str, str], RuleTrace] = {}
        self.outcomes: dict[tuple[str, str, str], Outcome] = {}
        """Each rule's outcome per template in the current pass."""
        self.selector_changed: set[str] = set()
        """Templates whose own-pods selector the current pass changed (it changed labels it comes from)."""
        self.sensitive = selection.sensitive
        """The rules whose outcome can depend on what a pass writes: only they can make another pass useful."""
        self.selector_rules = selection.selector_rules
        self.sensitive_reads = selection.sensitive_reads

    def settle(self, obj: JSONObject) -> JSONPatch:
        """The patch to the object once a pass over every template changes nothing (at most MAX_PASSES)."""
        current = obj
        passes: list[JSONPatch] = []
        for _ in range(MAX_PASSES):
            patch: JSONPatch = []
            self.outcomes = {}
            self.selector_changed = set()
            self.refusals = []
            slots = self.kind.templates(current)
            for slot in slots:
                raw = slot.read(current)
                if raw is None:
                    continue
                view = slot.view(current, raw)
                policies = self.policies
                if labelled_disabled(view):
                    policies = [policy for policy in policies if policy.name in self.enforced]
                    if not policies:
                        self.mutation.notes.append(
                            f"template {slot.name}: labelled {INJECT_LABEL}=disabled, left alone")
                        continue
                    if slot.path:  # a bare Pod's own label is noted once, by the engine
                        self.mutation.notes.append(
                            f"template {slot.name}: labelled {INJECT_LABEL}=disabled, which Enforced policies ignore")
                enforced, exempt, old = self._holding(slot, view)
                template, exempted = self._one_pass(slot, current, view, policies, enforced=enforced, exempt=exempt,
                                                    old=old)
                if slot.path:
                    node = template_node_name(view, old, field_prefix(slot), enforced)
                    if node is not None:
                        self.refusals.append(node)
                    exempted = exempted or (bool(exempt) and bool(as_map(view.get("spec")).get("nodeName")))
                if exempted and self.seals is not None and slot.path and slot.projection is None:
                    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
                    if isinstance(annotations, dict):
                        annotations[SEAL_ANNOTATION] = seal(self.seals.key, self.namespace_name, template)
                elif exempted and slot.path and slot.projection is None:  # no key: no seal, said, not a stall
                    self.mutation.warnings.append(no_key_warning(slot.name))
                if template != view:
                    first_seen = self.mutation.placed.get(slot.name, (view, template))[0]
                    self.mutation.placed[slot.name] = (first_seen, template)
                    if self.selector_rules and _labels(view) != _labels(template) and self.kind.own_pods(
                        current, view) != self.kind.own_pods(current, template):  # read of a template: its labels
                        self.selector_changed.add(slot.name)
                    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
                    if not isinstance(annotations, dict):
                        annotations = template["metadata"]["annotations"] = {}
                    annotations[APPLIED_ANNOTATION] = ",".join(self.applied.get(slot.name, {}))
                    patch.extend(slot.patch(current, raw, template))
            if not patch:
                break
            passes.append(patch)
            if not self.sensitive or not self._another_pass_may_change(
                    slots, Changes([pointer_tokens(op["path"]) for op in patch])):
                break  # no rule reads what a pass writes (nor derives a selector from it): a fixed point
            current = apply_sharing(current, patch)
            patch = []
        else:
            self.mutation.warnings.append(f"policies did not settle after {MAX_PASSES} passes (override rules?)")
        self.mutation.notes = unique_messages(self.mutation.notes)
        self.mutation.traces.extend(self.trace_list())
        for names in self.applied.values():
            self.mutation.applied.extend(names)
        if len(passes) <= 1:  # the usual case: the first pass was already a fixed point
            return passes[0] if passes else []
        return template_patch(self.kind, obj, apply_sharing(current, patch) if patch else current)

    def _another_pass_may_change(self, slots: list[TemplateSlot], changed: Changes) -> bool:
        """Whether some rule could act differently on what this pass wrote (else the pass was a fixed point).

        A rule that applied does the same again (actions are idempotent) unless its parameters are computed
        or its action derives the own-pods selector from labels that changed; a rule that did not apply may
        now, if anything it reads changed.
        """
        for slot in slots:
            if (slot.projection is None and slot.name not in self.selector_changed
                    and not self.sensitive_reads.touched_by(changed, slot.path)):
                continue  # no sensitive rule reads anything the pass wrote here, nor derives a selector from it
            for policy, rule in self.sensitive:
                outcome = self.outcomes.get((policy.name, rule.name, slot.name))
                if outcome is None or (outcome == "applied" and repeats_itself(rule)):
                    continue  # did not run on this template, or will do exactly the same again
                if slot.projection is not None and (rule.reads.template or rule.reads.object):
                    return True  # the template is a view: its paths are not the object's
                if derives_selector(rule, outcome) and slot.name in self.selector_changed:
                    return True
                if (outcome != "applied" or rule.parameter_expressions) and rule.reads.touched_by(changed, slot.path):
                    return True
        return False

    def trace_list(self) -> list[RuleTrace]:
        """One trace per rule and template: the pass where it changed the template, else its first pass."""
        return list(self.traces.values())

    def _holding(self, slot: TemplateSlot, view: JSONObject
                 ) -> tuple[frozenset[str], frozenset[str], JSONObject | None]:
        """For one template: the Enforced policies that hold it, those that exempt it, and the template as it
        was before an UPDATE when that may excuse a conflict it already had. A sealed template is exempt from
        every Enforced policy; an old template that was sealed excuses nothing once the seal no longer holds
        (a tenant's change to a template an exempt user wrote is judged as a creation)."""
        old = self.old_views.get(slot.name)
        if self._sealed(slot, view):
            if self.enforced:
                self.mutation.notes.append(f"template {slot.name or self.kind.kind}: sealed by an exempt request: "
                                           f"exempt from {', '.join(sorted(self.enforced))}")
            return frozenset(), self.enforced | self.exempt, old
        if old is not None and self._sealed(slot, old):
            old = None
        return self.enforced, self.exempt, old

    def _sealed(self, slot: TemplateSlot, template: JSONObject) -> bool:
        if slot.name in self.sealed_slots:
            return True
        return (self.seals is not None and bool(slot.path) and slot.projection is None
                and self.seals.verifies(self.namespace_name, template))

    def _one_pass(self, slot: TemplateSlot, obj: JSONObject, original: JSONObject, policies: list[Policy], *,
                  enforced: frozenset[str], exempt: frozenset[str], old: JSONObject | None
                  ) -> tuple[JSONObject, bool]:
        template = working_copy(original)
        pod, resources, notes = pod_variable(original, self.snapshot.quantities, slot.role_labels)
        if self.devices is not None and pod["spec"].get("resourceClaims"):
            resources = dict(self.devices(pod["spec"], resources))
        if notes:
            self.mutation.warnings.extend(f"{slot.name or self.kind.kind}: {note}" for note in notes)
        data = self.snapshot.observable({
            "object": obj,
            "oldObject": self.request.old_object,
            "request": self.request_cel,
            "workload": workload_variable(self.request, self.kind, obj) if self.reads_workload else {},
            "pod": pod,
            "resources": resources,
            "variables": {},
        })
        if self.namespace_cel is not None:  # cut down already, and kept with the namespace
            data["namespaceObject"] = self.namespace_cel
        environment = self.snapshot.environment
        activation = cel.activation(environment, data, self.deadline)
        kind = self.kind
        own_pods: Callable[[JSONObject], JSONObject | None] = lambda current: kind.own_pods(obj, current)  # noqa: E731
        applied = self.applied.setdefault(slot.name, {})
        context = RuleContexts(
            ActionContext(
                False, own_pods, self.protected, slot.name, self.gang, workload_marks=self.marks,
                claims=self.claims if kind.kind == "Pod" else None, volume_outcomes=self.volume_outcomes,
                default_priority_class=self.default_priority_class,
                placer_tolerations=self.placer_tolerations, share=self.share, notes=self.mutation.notes,
            ),
            enforced=enforced, exempt=exempt, original=original, old=old,
            prefix=field_prefix(slot), refusals=self.refusals,
        )
        outcomes, traces, deadline, mutation = self.outcomes, self.traces, self.deadline, self.mutation
        memo = self.snapshot.observed_memo
        decided = self.selection.conditions.values(activation, memo) if policies is self.policies else None
        for index, policy in enumerate(policies):
            if deadline is not None and time.monotonic() > deadline:  # each policy: its rules may all be false
                raise DeadlineReached
            scope = PolicyScope(policy, data, activation, environment, decided[index] if decided else None,
                                facts=self.namespace_facts, memo=memo)
            for rule, batched in zip(policy.rules, scope.batched, strict=True):
                if batched is False:  # most rules, on most objects: nothing else to do (timed with the policy)
                    kept = rule.not_matched.get(slot.name)
                    if kept is None:
                        kept = rule.not_matched[slot.name] = ((policy.name, rule.name, slot.name), RuleTrace(
                            policy.name, rule.name, slot.name, "not-matched", "condition is false"))
                    key, trace = kept
                    outcomes[key] = "not-matched"
                    if key not in traces:
                        traces[key] = trace
                    continue
                if deadline is not None and time.monotonic() > deadline:
                    raise DeadlineReached
                key = (policy.name, rule.name, slot.name)
                if batched and not rule.parameter_expressions:
                    # matched by its batch, which read any variable written in: nothing else to evaluate
                    trace = act(policy, rule, rule.parameters, template, slot.name, mutation=mutation, context=context)
                else:
                    trace = run_rule(policy, rule, scope, batched, template, slot=slot, mutation=mutation,
                                      context=context)
                outcomes[key] = trace.outcome
                previous = traces.get(key)
                if previous is None or (trace.changed and not previous.changed):
                    traces[key] = trace
                if trace.outcome in ("applied", "denied"):
                    applied[rule_id(policy, rule)] = None
        return template, context.exempted


def _labels(template: JSONObject) -> object:
    return as_map(template.get("metadata")).get("labels")


def repeats_itself(rule: Rule) -> bool:
    """An applied rule whose parameters are fixed and whose action needs no derived selector: idempotent."""
    return not rule.parameter_expressions and not rule.own_pods_fallback


def derives_selector(rule: Rule, outcome: Outcome) -> bool:
    """The rule's action falls back to the own-pods selector and may act differently on a new one: one that
    was skipped for want of a selector may find one now, and a term keyed by its selector is added again."""
    return rule.own_pods_fallback and (outcome != "applied" or rule.action.own_pods == "keyed-by-selector")


def uid_suffix(uid: str) -> str:
    """A short, stable stand-in for a name the API server has not generated yet (unique per request)."""
    return hashlib.sha256(uid.encode()).hexdigest()[:5]
