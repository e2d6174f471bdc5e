"""A SchedulingPolicy as a MutatingAdmissionPolicy and its binding, and what of it could not be exported.

The exported policy declares what every export does (`helpers`: the requests matched, Placer's guards, the
variables binding `pod` and `workload`), the policy's variables and one mutation per rule, so an evaluation
error costs only that rule (with failurePolicy Ignore). The namespace selector and the opt-in label go to the
binding.

A rule is exported only when every expression written for it compiles in the CEL environment of the target
Kubernetes version (`kubernetes_env`). A policy is exported whole or not at all: a node selector written
without the toleration of the same policy leaves pods Pending, so unless a partial export is asked for, a
policy with a rule that cannot be exported writes nothing and the export fails, saying why.

A Pod made by a controller from a template Placer mutated is not singled out as the webhook does (the
annotation it carries cannot tell it apart from one an earlier exported policy of the same admission just
wrote): the mutations are idempotent, so it gets nothing unless the policies changed since.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.export.cel_text import RESERVED, Cel, NotExportable
from webhook.export.free_identifiers import Rewriter
from webhook.export.helpers import HELPER_VARIABLES, INJECT_LABEL, MATCH_CONDITIONS, MATCHED_KINDS, RESOURCE_RULES
from webhook.export.kubernetes_env import Kind, KubernetesCel, Variables
from webhook.export.rule_mutations import EXPRESSION_PARAMETERS, matched_rule_expression, rule_expression
from webhook.export.versions import DEFAULT_TARGET, KubernetesVersion, api_version_for, show
from webhook.policy.model import Policy, Rule

GROUP = "admissionregistration.k8s.io"

GANG_REASON = ("add-gang-labels: the group identity and size Placer derives (operator pod sets, names shortened "
               "with a hash, YuniKorn's task groups with the pods' requests) cannot be computed by CEL in the API "
               "server; gangs stay with the webhook")
ENFORCED_REASON = ("enforcement: Enforced: a MutatingAdmissionPolicy cannot refuse an object, and the export does "
                   "not write the ValidatingAdmissionPolicy that would (nor can one refuse a Pod naming its node "
                   "only when no node creates it); an Enforced policy stays with the webhook")
AUDIT_REASON = ("enforcement: Audit: a MutatingAdmissionPolicy has no audit mode (it applies its mutations or is "
                "not bound; the API server records no would-be patch of one); an Audit policy stays with the "
                "webhook, and is exported once promoted to Advisory")
VOLUME_REASON = ("pin-to-volume-node: the node a pod's claims are on comes from PersistentVolumeClaims and "
                 "PersistentVolumes, which a MutatingAdmissionPolicy cannot read (it sees only the request)")
SHARE_REASON = ("spot-share: a pod's capacity class depends on the live pods of its workload, which a "
                "MutatingAdmissionPolicy cannot read (it sees only the request)")
CREATES_REASON = ("; createPodGroup: a MutatingAdmissionPolicy only changes the object under admission, it "
                  "cannot create objects (the PodGroup)")
UNMATCHED_REASON = ("its condition holds only for {kinds}, which the exported policy does not match: its "
                    "matchConstraints hold the built-in kinds (" + ", ".join(MATCHED_KINDS) + "); an operator "
                    "resource's pod templates, one per role, stay with the webhook")
NATIVE_REASON = ("; scheduler native: a MutatingAdmissionPolicy only changes the object under admission, it cannot "
                 "create objects (kube-scheduler's PodGroup the pods name)")


@dataclass(slots=True)
class RuleExport:
    rule: str
    exported: bool
    """Every expression of the rule would run in the target API server."""
    reason: str = ""
    written: bool = False
    """The rule is in the objects written (its policy exported whole, or a partial export asked for)."""


@dataclass(slots=True)
class PolicyExport:
    """The objects one SchedulingPolicy became (none when it could not be exported), and a line per rule."""

    policy: str
    objects: list[dict[str, Any]] = field(default_factory=list)
    rules: list[RuleExport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    refused: bool = False
    """Some rule could not be exported and no partial export was asked for: nothing written, the export fails."""


@dataclass(slots=True)
class Exporter:
    """What an export run shares: the target version, its CEL environment, and the expressions compiled."""

    target: KubernetesVersion = DEFAULT_TARGET
    api_version: str | None = None
    allow_partial: bool = False
    rewriter: Rewriter = field(default_factory=Rewriter, repr=False)
    kubernetes: KubernetesCel = field(init=False, repr=False)
    helpers: Variables = field(default_factory=Variables, init=False, repr=False)
    """The export's own variables, as the target declares them for what follows."""
    _own: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.api_version = api_version_for(self.target, self.api_version)
        self.kubernetes = KubernetesCel(self.target)
        self._own = self._own_refusal()

    def export(self, policy: Policy) -> PolicyExport:
        result = PolicyExport(policy.name)
        if self._own is not None:
            result.notes.append(f"not exported: the export's own expression {self._own}")
            result.refused = True
            return result
        variables, declared, unexportable = self._variables(policy)
        exported: list[Rule] = []
        for rule in policy.rules:
            try:
                kind_notes = self._unmatched_kinds(rule)
                self._check(self._rule_mutation(policy, rule, unexportable, ()), declared)
                self._check(self._matched_rule(policy, rule, [f"{policy.name}/{rule.name}"]), declared)
            except NotExportable as why:
                result.rules.append(RuleExport(rule.name, False, str(why)))
                continue
            result.rules.append(RuleExport(rule.name, True))
            result.notes.extend(kind_notes)
            exported.append(rule)
        if policy.failure_policy == "Fail":
            result.notes.append("failurePolicy Fail: in the API server a missing key in a condition fails the "
                                "request (Placer reads it as false); guard such reads with has() or ?.")
        if not exported:
            result.refused = not self.allow_partial
            result.notes.append("not exported: no rule can be; nothing written")
            return result
        if len(exported) < len(policy.rules) and not self.allow_partial:
            result.refused = True
            result.notes.append(
                f"not exported: {len(policy.rules) - len(exported)} of {len(policy.rules)} rules cannot be, and a "
                "policy exported in part can leave pods unplaceable (a node selector without its toleration); "
                "nothing written for it (--allow-partial writes the rules that can be)")
            return result
        ids = [f"{policy.name}/{rule.name}" for rule in exported]
        mutations = [_patch(self._rule_mutation(policy, rule, unexportable, ids)) for rule in exported]
        mutations += [_patch(self._matched_rule(policy, rule, ids)) for rule in exported]
        for rule_export in result.rules:
            rule_export.written = rule_export.exported
        result.objects = self._objects(policy, variables, mutations)
        return result

    def _unmatched_kinds(self, rule: Rule) -> list[str]:
        """What the rule's condition says of the kinds it is for, against those the exported policy matches:
        NotExportable when it holds for none of them (it would run on nothing), notes when it holds for some
        kinds that are not matched (the webhook acts on those, the export does not)."""
        if rule.condition is None:
            return []
        objects, workloads = self.rewriter.kinds(rule.condition.source)
        if objects is not None and not objects & set(MATCHED_KINDS):
            raise NotExportable(UNMATCHED_REASON.format(kinds=" or ".join(sorted(objects))))
        notes = []
        if objects is not None and objects - set(MATCHED_KINDS):
            notes.append(f"rule {rule.name}: exported for {', '.join(sorted(objects & set(MATCHED_KINDS)))} only; "
                         f"the exported policy does not match {', '.join(sorted(objects - set(MATCHED_KINDS)))} "
                         "(operator resources stay with the webhook)")
        if workloads is not None and not workloads & set(MATCHED_KINDS):
            notes.append(f"rule {rule.name}: its condition holds only for workloads of kind "
                         f"{' or '.join(sorted(workloads))}, which the exported policy does not match (operator "
                         "resources stay with the webhook); it runs only on the Pods whose controller is such a "
                         "workload, when they are created")
        return notes

    def _own_refusal(self) -> str | None:
        """The helper variables and match conditions every export writes, checked once for the target (the
        helper variables' types declared for the expressions after them)."""
        for name, expression in HELPER_VARIABLES:
            self.helpers, refusal = self.kubernetes.declare(self.helpers, name, expression)
            if refusal is not None:
                return f"variables.{name} {refusal}"
        for condition in MATCH_CONDITIONS:
            refusal = self.kubernetes.refusal(condition["expression"], Kind.MATCH_CONDITION)
            if refusal is not None:
                return f"{condition['name']} {refusal}"
        return None

    def _check(self, mutation: str, declared: Variables) -> None:
        refusal = self.kubernetes.refusal(mutation, Kind.MUTATION, declared)
        if refusal is not None:
            raise NotExportable(refusal)

    def _variables(self, policy: Policy) -> tuple[list[dict[str, str]], Variables, dict[str, str]]:
        """The exported policy's variables (helpers first) and their declared types, and the policy variables
        that could not be exported, with why."""
        variables = [{"name": name, "expression": expression} for name, expression in HELPER_VARIABLES]
        declared = self.helpers
        unexportable: dict[str, str] = {}
        for variable in policy.variables:
            if variable.name in RESERVED:
                unexportable[variable.name] = f"variable {variable.name}: the name is the export's own"
                continue
            blocked = [name for name in variable.program.reads_variables if name in unexportable]
            if blocked:
                unexportable[variable.name] = unexportable[blocked[0]]
                continue
            try:
                expression = self.rewriter.rewrite(variable.program.source)
            except NotExportable as why:
                unexportable[variable.name] = f"variable {variable.name}, which {why}"
                continue
            declared, refusal = self.kubernetes.declare(declared, variable.name, expression)
            if refusal is not None:
                unexportable[variable.name] = f"variable {variable.name}, which {refusal}"
                continue
            variables.append({"name": variable.name, "expression": expression})
        return variables, declared, unexportable

    def _rule_mutation(self, policy: Policy, rule: Rule, unexportable: Mapping[str, str],
                       policy_rules: Sequence[str]) -> str:
        if policy.enforced:
            raise NotExportable(ENFORCED_REASON)
        if policy.audited:
            raise NotExportable(AUDIT_REASON)
        params = self._parameters(rule, unexportable)
        return rule_expression(rule.action.name, params, override=rule.override,
                               condition=self._condition(rule), rule_id=f"{policy.name}/{rule.name}",
                               policy_rules=policy_rules)

    def _matched_rule(self, policy: Policy, rule: Rule, policy_rules: Sequence[str]) -> str:
        """The mutation naming `rule` when it matched without changing anything (run after every rule's);
        called for rules `_rule_mutation` exported, so their parameters are exportable."""
        return matched_rule_expression(self._condition(rule), f"{policy.name}/{rule.name}", policy_rules,
                                       action=rule.action.name, params=self._parameters(rule, {}))

    def _condition(self, rule: Rule) -> str | None:
        return self.rewriter.rewrite(rule.condition.source) if rule.condition is not None else None

    def _parameters(self, rule: Rule, unexportable: Mapping[str, str]) -> dict[str, Any]:
        """The rule's parameters, those computed in CEL as `Cel` (rewritten); NotExportable when the rule is not."""
        if rule.action.name == "pin-to-volume-node":
            raise NotExportable(VOLUME_REASON)
        if rule.action.name == "spot-share":
            raise NotExportable(SHARE_REASON)
        if rule.action.name == "add-gang-labels":
            if rule.parameters.get("scheduler") == "native":
                raise NotExportable(GANG_REASON + NATIVE_REASON)
            creates = str(rule.parameters.get("createPodGroup", "false")).lower() == "true"
            raise NotExportable(GANG_REASON + (CREATES_REASON if creates else ""))
        for name in sorted(rule.reads_variables):
            if name in unexportable:
                raise NotExportable(f"reads {unexportable[name]}")
        allowed = EXPRESSION_PARAMETERS.get(rule.action.name, frozenset())
        params: dict[str, Any] = dict(rule.parameters)
        for name, program in rule.parameter_expressions.items():
            if name not in allowed:
                raise NotExportable(f"parameterExpressions.{name}: computed in CEL, it has no single field to go "
                                    f"to in the exported patch")
            params[name] = Cel(self.rewriter.rewrite(program.source))
        return params

    def _objects(self, policy: Policy, variables: list[dict[str, str]],
                 mutations: list[dict[str, Any]]) -> list[dict[str, Any]]:
        name = f"placer-{policy.name}"
        labels = {"app.kubernetes.io/managed-by": "placer", "placer.dev/policy": policy.name}
        api_version = f"{GROUP}/{self.api_version}"
        return [
            {
                "apiVersion": api_version,
                "kind": "MutatingAdmissionPolicy",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "failurePolicy": policy.failure_policy,
                    "reinvocationPolicy": "IfNeeded",
                    "matchConstraints": {"resourceRules": RESOURCE_RULES, "matchPolicy": "Equivalent"},
                    "matchConditions": MATCH_CONDITIONS,
                    "variables": variables,
                    "mutations": mutations,
                },
            },
            {
                "apiVersion": api_version,
                "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "policyName": name,
                    "matchResources": {
                        "namespaceSelector": _namespace_selector(policy),
                        "objectSelector": {"matchExpressions": [
                            {"key": INJECT_LABEL, "operator": "NotIn", "values": ["disabled"]}]},
                    },
                },
            },
        ]


def _patch(expression: str) -> dict[str, Any]:
    return {"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}


def _namespace_selector(policy: Policy) -> dict[str, Any]:
    """The policy's namespace selector, and the opt-in label the webhook's registration requires."""
    spec = policy.document.get("spec") if isinstance(policy.document, Mapping) else None
    selector = dict((spec or {}).get("namespaceSelector") or {})
    labels = {**(selector.get("matchLabels") or {}), INJECT_LABEL: "enabled"}
    result: dict[str, Any] = {"matchLabels": labels}
    if selector.get("matchExpressions"):
        result["matchExpressions"] = list(selector["matchExpressions"])
    return result


def export_policy(policy: Policy, api_version: str | None = None, *,
                  target: KubernetesVersion = DEFAULT_TARGET, allow_partial: bool = False) -> PolicyExport:
    """One policy (see `export_policies`)."""
    return Exporter(target, api_version, allow_partial).export(policy)


def export_policies(policies: Sequence[Policy], api_version: str | None = None, *,
                    target: KubernetesVersion = DEFAULT_TARGET, allow_partial: bool = False) -> list[PolicyExport]:
    """Every policy, in Placer's order (priority, then name), for a `target` API server. `api_version`: None
    for the one the target serves (`v1` from 1.36); ValueError for one it does not."""
    exporter = Exporter(target, api_version, allow_partial)
    ordered = sorted(policies, key=lambda policy: (policy.priority, policy.name))
    return [exporter.export(policy) for policy in ordered]


def report_lines(exports: Sequence[PolicyExport], target: KubernetesVersion | None = None) -> list[str]:
    """The exportability report: a line per rule, then each policy's notes, then what holds across policies."""
    lines = [f"target: Kubernetes {show(target)}"] if target is not None else []
    for export in exports:
        for rule in export.rules:
            if not rule.exported:
                status = f"not exported: {rule.reason}"
            elif rule.written:
                status = "exported"
            else:
                status = "exportable, not written: the policy is not exported whole"
            lines.append(f"{export.policy}/{rule.rule}: {status}")
        lines.extend(f"{export.policy}: {note}" for note in export.notes)
    if sum(1 for export in exports if export.objects) > 1:
        lines.append("across policies: the API server runs MutatingAdmissionPolicies in no order Placer sets, so "
                     "when two policies write the same field the first writer is not Placer's (priority, name); "
                     "conflicts are kept silently (no warning)")
    return lines
