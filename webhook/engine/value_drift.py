"""Is the value a rule wrote earlier still the one it writes now? Judging stored workloads, not admitting them.

Actions only add: a value already in a rule's place is kept, so that a user's own value wins. A workload
admitted under an earlier version of a policy therefore keeps the rule's earlier value (a spread
constraint written before the rule gained `matchLabelKeys`, a node-selector value since changed), and the
engine, run on it again, finds "nothing to change". This module lets the engine see such values when it
judges a stored workload (`webhook.cluster.reports.compliance`), with no second implementation of any
action: each rule's
action is wrapped so that, where the rule's place (`webhook.actions.identity`) already holds a value, the
action also runs on a copy of the template with that value taken out, which gives what the rule writes
now; the two are compared.

Whose value is it? Placer marks each template it mutates with the rules that applied
(`placer.dev/applied`). A differing value in the place of a rule listed there is taken as Placer's: the
wrapped action replaces it with the rule's current value in the engine's own working template, so the
engine's patch carries the replacement and the rule's trace says it changed the workload (drift). Where the
rule is not listed, or the user's own manifest holds a value in that place (kubectl's
`kubectl.kubernetes.io/last-applied-configuration`, the configuration a user last applied: "Well-Known
Labels, Annotations and Taints", https://kubernetes.io/docs/reference/labels-annotations-taints/), the
value is the user's: it is kept, as admission keeps it, and only recorded (the rule would write another).

Limits, from what is recorded: a rule is listed in `placer.dev/applied` whenever it applied on a template
Placer changed, including when it kept a user's differing value while another rule wrote; without the
last-applied configuration (server-side apply, controllers) such a value is taken as Placer's. And a user
who edited a value Placer wrote is seen as drift: nothing records who wrote a value last.

Not for admission: the wrapped snapshot is only used to judge stored workloads, one at a time (a `Ledger`
holds what one judgement found; a `ValueCheck` serves one thread).
"""

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.actions.base import ActionContext, ActionSkipped, ActionSpec, Apply
from webhook.actions.identity import by_parameters, comparable, places, remove, scratch_copy
from webhook.actions.metadata import rules_applied
from webhook.policy.model import Policy, Rule
from webhook.policy.snapshot import PolicySnapshot
from webhook.support.json_copy import copy_json
from webhook.support.typing import JSONObject, as_map
from webhook.workloads import WorkloadKind

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass(frozen=True, slots=True)
class ValueDifference:
    """A rule's place holds `found`; the rule writes `wanted` there now."""

    policy: str
    rule: str
    template: str
    slot: str
    found: Any
    wanted: Any
    placers: bool
    """Placer wrote `found` (replaced in the engine's answer); else the workload's own value (kept)."""

    def describe(self) -> str:
        """What differs, in the user's words: `topologySpreadConstraints[zone] lacks matchLabelKeys [...]`."""
        where = f"template {self.template}: " if self.template else ""
        return where + describe_difference(self.slot, self.found, self.wanted, placers=self.placers)


class Ledger:
    """What one judgement needs and finds: whose values the templates hold, and each difference.

    The marks and the user's manifest are read only when a value differs (most judgements find none)."""

    def __init__(self, kind: WorkloadKind | None = None, obj: JSONObject | None = None) -> None:
        self._kind = kind
        self._obj = obj or {}
        self._applied: dict[str, frozenset[str]] | None = None
        self._manifests: dict[str, JSONObject] | None = None
        self.found: list[ValueDifference] = []
        self.adding: set[tuple[str, str]] = set()
        """(policy, rule) that, besides replacing a value of Placer's, adds one the template lacks."""
        self.asked: set[tuple[str, str]] = set()
        """(template, rule) already compared: on the engine's later passes over a template, the values in
        place are the ones this judgement already compared or the rules wrote."""

    def placers(self, template: str, rule: str, action: str, params: Mapping[str, Any]) -> bool:
        """Whether the value in `rule`'s place on `template` is Placer's (see the module's docstring)."""
        if rule not in self.applied().get(template, frozenset()):
            return False
        manifest = self.manifests().get(template)
        return manifest is None or not places(action, manifest, params)

    def applied(self) -> Mapping[str, frozenset[str]]:
        """Per template name, the rules its `placer.dev/applied` annotation lists."""
        if self._applied is None:
            self._applied = {name: frozenset(rules_applied(view)) for name, view in self._views(self._obj)}
        return self._applied

    def manifests(self) -> Mapping[str, JSONObject]:
        """Per template name, the template as the user's last-applied configuration has it."""
        if self._manifests is None:
            self._manifests = {}
            text = as_map(as_map(self._obj.get("metadata")).get("annotations")).get(LAST_APPLIED)
            try:
                manifest = json.loads(text) if isinstance(text, str) else None
            except ValueError:
                manifest = None
            if isinstance(manifest, dict):
                self._manifests = dict(self._views(manifest))
        return self._manifests

    def _views(self, obj: JSONObject) -> list[tuple[str, JSONObject]]:
        if self._kind is None:
            return []
        return [(slot.name, slot.view(obj, raw)) for slot in self._kind.templates(obj)
                if (raw := slot.read(obj)) is not None]


class ValueCheck:
    """A snapshot whose rules also compare the values in their places, and the ledger they report to."""

    def __init__(self, snapshot: PolicySnapshot) -> None:
        self.source = snapshot
        self.ledger = Ledger()
        policies = tuple(self._policy(policy) for policy in snapshot.policies)
        self.snapshot = dataclasses.replace(snapshot, policies=policies)
        for policy in snapshot.audited:  # judged as they are: their runs must tell the ledger nothing
            self.snapshot.audit_views[policy.name] = snapshot.audit_view(policy)

    def judging(self, ledger: Ledger) -> PolicySnapshot:
        """The wrapped snapshot, reporting to `ledger` until the next call."""
        self.ledger = ledger
        return self.snapshot

    def _policy(self, policy: Policy) -> Policy:
        if not any(comparable(rule.action.name) for rule in policy.rules):
            return policy
        return dataclasses.replace(policy, rules=tuple(self._rule(policy, rule) for rule in policy.rules))

    def _rule(self, policy: Policy, rule: Rule) -> Rule:
        if not comparable(rule.action.name):
            return rule
        spec = rule.action
        return dataclasses.replace(rule, action=dataclasses.replace(spec, apply=self._comparing(policy, rule, spec)))

    def _comparing(self, policy: Policy, rule: Rule, spec: ActionSpec) -> Apply:
        rule_name = f"{policy.name}/{rule.name}"
        remembered: list[dict[str, Any]] = []
        """For an action whose values depend on its parameters alone, with the rule's own (not computed)
        parameters: what it writes, asked once."""
        static = not rule.parameter_expressions and by_parameters(spec.name, rule.parameters)

        def apply(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
            asked_before = self.ledger.asked
            if (context.template, rule_name) in asked_before:
                return spec.apply(template, params, context)
            asked_before.add((context.template, rule_name))
            held = places(spec.name, template, params)
            if not held:
                return spec.apply(template, params, context)
            found = {place.slot: place.value for place in held}
            if static and remembered and params is rule.parameters:
                wanted: dict[str, Any] | None = remembered[0]
                if wanted == found:
                    return spec.apply(template, params, context)  # finds its values there: changes nothing
            else:
                asked = _Question(spec, template, params, context)
                wanted = asked.wanted
                if static and wanted is not None and params is rule.parameters:
                    remembered.append(wanted)
                if wanted == found:
                    asked.keep()  # the rule writes exactly what is there: on the template it would do nothing
                    return False
                asked.undo()
            differing = [(place, wanted[place.slot]) for place in held
                         if wanted is not None and place.slot in wanted and place.value != wanted[place.slot]]
            if not differing:
                return spec.apply(template, params, context)
            ours = self.ledger.placers(context.template, rule_name, spec.name, params)
            self.ledger.found.extend(
                ValueDifference(policy.name, rule.name, context.template, place.slot, place.value, value, ours)
                for place, value in differing)
            if not ours:
                return spec.apply(template, params, context)
            for place, value in differing:
                place.replace(copy_json(value))
            if spec.apply(template, params, context):
                self.ledger.adding.add((policy.name, rule.name))
            return True
        return apply


class _Question:
    """What the action writes on a copy of a template with its places emptied (`wanted`, by place; None
    when the action skips there). Then either `keep()`, which adopts what the run did to the context (its
    conflicts, the tolerations and workload marks it collects) as the run on the template would have done,
    or `undo()`, which leaves the context as it was."""

    __slots__ = ("_conflicts", "_context", "_marks", "_tolerations", "wanted")

    def __init__(self, spec: ActionSpec, template: JSONObject, params: Mapping[str, Any],
                 context: ActionContext) -> None:
        scratch = scratch_copy(spec.name, template)
        remove(places(spec.name, scratch, params))
        self._context = context
        self._conflicts, self._tolerations = context.conflicts, list(context.placer_tolerations)
        marks = context.workload_marks
        self._marks = dict(marks) if marks is not None else None
        context.conflicts = []
        self.wanted: dict[str, Any] | None = None
        try:
            spec.apply(scratch, params, context)
        except ActionSkipped:
            return
        self.wanted = {place.slot: place.value for place in places(spec.name, scratch, params)}

    def keep(self) -> None:
        self._context.conflicts = self._conflicts + self._context.conflicts

    def undo(self) -> None:
        context = self._context
        context.conflicts = self._conflicts
        context.placer_tolerations[:] = self._tolerations
        if self._marks is not None and context.workload_marks is not None:
            context.workload_marks.clear()
            context.workload_marks.update(self._marks)


def describe_difference(slot: str, found: Any, wanted: Any, *, placers: bool = True) -> str:
    """`nodeSelector[pool] is "a"; the rule now writes "b"`, field by field for objects. `placers`: the value
    is Placer's and will be replaced ("now writes"), else the workload's own, kept ("would write")."""
    writes, adds = ("now writes", "now adds") if placers else ("would write", "would add")
    if not isinstance(found, dict) or not isinstance(wanted, dict):
        return f"{slot} is {_show(found)}; the rule {writes} {_show(wanted)}"
    parts = []
    for key, value in wanted.items():
        if key not in found:
            parts.append(f"lacks {key} {_show(value)}, which the rule {adds}")
        elif found[key] != value:
            parts.append(f"has {key} {_show(found[key])}, the rule {writes} {_show(value)}")
    parts.extend(f"has {key} {_show(found[key])}, which the rule {'no longer writes' if placers else 'would not write'}"
                 for key in found if key not in wanted)
    return f"{slot} " + "; ".join(parts)


def _show(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"))
    return text if len(text) <= 80 else text[:77] + "..."
