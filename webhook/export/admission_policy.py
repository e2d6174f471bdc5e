"""A SchedulingPolicy as a MutatingAdmissionPolicy and its binding, and what of it could not be exported.

The exported policy matches what the webhook is registered for (its built-in kinds) and declares
the variables Placer's expressions read (`placerPod`, `placerWorkload`, ...) as CEL over `object`. Placer's
own guards become match conditions: a controller-owned object (not a Pod) is left to its controller; a
template labelled `placer.dev/inject: disabled` is left alone; an UPDATE is mutated only when it changes the
template (no rollout of Placer's own making). The namespace selector and the opt-in label go to the binding.
Each rule is one mutation, so an evaluation error costs only that rule (with failurePolicy Ignore).

A Pod made by a controller from a template Placer mutated is not singled out as the webhook does (the
annotation it carries cannot tell it apart from one an earlier exported policy of the same admission just
wrote): the mutations are idempotent, so it gets nothing unless the policies changed since.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.export.cel_text import RESERVED, Cel, NotExportable, dyn_map, literal, rewrite
from webhook.export.mutations import (
    EXPRESSION_PARAMETERS,
    TYPED,
    Dialect,
    matched_rule_expression,
    rule_expression,
)
from webhook.policy.model import Policy, Rule
from webhook.workloads.builtin import JOB_NAME_LABEL, PER_POD_LABELS

API_VERSIONS = ("v1beta1", "v1")
INJECT_LABEL = "placer.dev/inject"
GROUP = "admissionregistration.k8s.io"

RESOURCE_RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
    {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
     "resources": ["deployments", "replicasets", "statefulsets", "daemonsets"]},
    {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["jobs"]},
    {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["cronjobs"]},
]
"""The built-in kinds and operations the webhook mutates; operator resources stay the webhook's."""


def template_of(root: str) -> str:
    """CEL: the pod template of `root` (`object` or `oldObject`); the Pod itself for a Pod."""
    return (f"({root}.kind == 'Pod' ? {root} : {root}.kind == 'CronJob' ? "
            f"{root}.spec.jobTemplate.spec.template : {root}.spec.template)")


CONTROLLERS = "['Deployment', 'ReplicaSet', 'StatefulSet', 'DaemonSet']"

WORKLOAD_REPLICAS = (
    "object.kind == 'Pod' ? 1 : object.kind == 'Job' ? object.spec.?parallelism.orValue(1) : "
    "object.kind == 'CronJob' ? object.spec.jobTemplate.spec.?parallelism.orValue(1) : "
    "object.spec.?replicas.orValue(1)"
)
CONTROLLER_SELECTOR = (
    "{?'matchLabels': object.spec.selector.?matchLabels.orValue({}).size() > 0 ? "
    "optional.of(dyn(object.spec.selector.matchLabels)) : optional.none(), "
    "?'matchExpressions': object.spec.selector.?matchExpressions.orValue([]).size() > 0 ? "
    "optional.of(dyn(object.spec.selector.matchExpressions)) : optional.none()}"
)
FROM_LABELS = (
    "variables.placerOwnLabels.size() == 0 ? dyn({}) : "
    "variables.placerOwnLabels.size() == variables.placerTemplateLabels.size() ? "
    "dyn({'matchLabels': variables.placerTemplateLabels}) : "
    "dyn({'matchExpressions': variables.placerOwnLabels.map(k, "
    + dyn_map({"'key'": "k", "'operator'": "'In'", "'values'": "[variables.placerTemplateLabels[k]]"}) + ")})"
)

HELPER_VARIABLES = [
    ("placerTemplatePath",
     "object.kind == 'Pod' ? '' : object.kind == 'CronJob' ? '/spec/jobTemplate/spec/template' : '/spec/template'"),
    ("placerPod", template_of("object")),
    ("placerWorkload", dyn_map({
        "'kind'": "object.kind",
        "'apiVersion'": "object.apiVersion",
        "'name'": "object.metadata.?name.orValue(object.metadata.?generateName.orValue(''))",
        "'namespace'": "object.metadata.?namespace.orValue(request.namespace)",
        "?'replicas'": f"object.kind == 'DaemonSet' ? optional.none() : optional.of(dyn({WORKLOAD_REPLICAS}))",
        "'labels'": "object.metadata.?labels.orValue({})",
        "'annotations'": "object.metadata.?annotations.orValue({})",
    })),
    ("placerTemplateLabels", "variables.placerPod.?metadata.?labels.orValue({})"),
    ("placerOwnLabels",
     f"variables.placerTemplateLabels.filter(k, !(k in {literal(sorted(PER_POD_LABELS))}))"),
    ("placerOwnPods",
     f"object.kind in {CONTROLLERS} && (object.spec.?selector.?matchLabels.orValue({{}}).size() > 0 || "
     "object.spec.?selector.?matchExpressions.orValue([]).size() > 0) ? "
     f"dyn({CONTROLLER_SELECTOR}) : "
     "object.kind == 'Job' && object.metadata.?name.orValue('') != '' ? "
     f"dyn({{'matchLabels': {{{literal(JOB_NAME_LABEL)}: object.metadata.name}}}}) : {FROM_LABELS}"),
    ("placerSelector",
     "object.kind == 'Pod' ? dyn({}) : object.kind == 'CronJob' ? "
     "dyn(object.spec.jobTemplate.spec.?selector.orValue({})) : dyn(object.spec.?selector.orValue({}))"),
    ("placerProtected",
     "variables.placerSelector.?matchLabels.orValue({}).map(k, k) + "
     "variables.placerSelector.?matchExpressions.orValue([]).map(e, e.key)"),
]
"""What Placer binds for an expression, as CEL over the request: the template, `workload`, the workload's
own pods (the default selector of spread and pod affinity: the controller's selector, a Job's name label, or
the template's labels without the per-pod ones, as `matchExpressions` when some had to be left out: CEL
can filter a map's keys but not build a map from them everywhere) and the label keys its selector reads."""

MATCH_CONDITIONS = [
    {"name": "placer.dev/not-controller-owned",
     "expression": "object.kind == 'Pod' || "
                   "!object.metadata.?ownerReferences.orValue([]).exists(r, r.?controller.orValue(false))"},
    {"name": "placer.dev/template-not-opted-out",
     "expression": f"{template_of('object')}.?metadata.?labels[?{literal(INJECT_LABEL)}].orValue('') != 'disabled'"},
    {"name": "placer.dev/template-changed",
     "expression": f"request.operation != 'UPDATE' || oldObject == null || "
                   f"{template_of('object')} != {template_of('oldObject')}"},
]


NOT_EXPORTED_ACTIONS = {
    "add-gang-labels": "add-gang-labels: the group identity and size Placer derives (operator pod sets, names "
                       "shortened with a hash, YuniKorn's task groups with the pods' requests) cannot be computed "
                       "by CEL in the API server; gangs stay with the webhook",
}


@dataclass(slots=True)
class RuleExport:
    rule: str
    exported: bool
    reason: str = ""


@dataclass(slots=True)
class PolicyExport:
    """The objects one SchedulingPolicy became (none when no rule could be), and a line per rule."""

    policy: str
    objects: list[dict[str, Any]] = field(default_factory=list)
    rules: list[RuleExport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def export_policy(policy: Policy, api_version: str = "v1beta1", dialect: Dialect = TYPED) -> PolicyExport:
    result = PolicyExport(policy.name)
    variables, unexportable = _variables(policy)
    mutations: list[dict[str, Any]] = []
    exported: list[Rule] = []
    for rule in policy.rules:
        try:
            _rule_mutation(policy, rule, unexportable, dialect, ())
        except NotExportable as why:
            result.rules.append(RuleExport(rule.name, False, str(why)))
            continue
        result.rules.append(RuleExport(rule.name, True))
        exported.append(rule)
    ids = [f"{policy.name}/{rule.name}" for rule in exported]
    for rule in exported:
        mutations.append(_patch(_rule_mutation(policy, rule, unexportable, dialect, ids)))
    for rule, rule_id in zip(exported, ids, strict=True):
        condition = rewrite(rule.condition.source) if rule.condition is not None else None
        mutations.append(_patch(matched_rule_expression(dialect, condition, rule_id, ids)))
    if policy.failure_policy == "Fail":
        result.notes.append("failurePolicy Fail: in the API server a missing key in a condition fails the request "
                            "(Placer reads it as false); guard such reads with has() or ?.")
    if not mutations:
        result.notes.append("no rule could be exported: nothing written")
        return result
    name = f"placer-{policy.name}"
    labels = {"app.kubernetes.io/managed-by": "placer", "placer.dev/policy": policy.name}
    result.objects.append({
        "apiVersion": f"{GROUP}/{api_version}",
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
    })
    result.objects.append({
        "apiVersion": f"{GROUP}/{api_version}",
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
    })
    return result


def _variables(policy: Policy) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The exported policy's variables (helpers first), and the policy variables that could not be, with why."""
    variables = [{"name": name, "expression": expression} for name, expression in HELPER_VARIABLES]
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
            variables.append({"name": variable.name, "expression": rewrite(variable.program.source)})
        except NotExportable as why:
            unexportable[variable.name] = f"variable {variable.name}, which {why}"
    return variables, unexportable


def _patch(expression: str) -> dict[str, Any]:
    return {"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}


def _rule_mutation(policy: Policy, rule: Rule, unexportable: Mapping[str, str], dialect: Dialect,
                   policy_rules: Sequence[str]) -> str:
    reason = NOT_EXPORTED_ACTIONS.get(rule.action.name)
    if reason is not None:
        raise NotExportable(reason)
    for name in sorted(rule.reads_variables):
        if name in unexportable:
            raise NotExportable(f"reads {unexportable[name]}")
    allowed = EXPRESSION_PARAMETERS.get(rule.action.name, frozenset())
    params: dict[str, Any] = dict(rule.parameters)
    for name, program in rule.parameter_expressions.items():
        if name not in allowed:
            raise NotExportable(f"parameterExpressions.{name}: computed in CEL, it has no single field to go "
                                f"to in the exported patch")
        params[name] = Cel(rewrite(program.source))
    condition = rewrite(rule.condition.source) if rule.condition is not None else None
    return rule_expression(dialect, rule.action.name, params, override=rule.override, condition=condition,
                           rule_id=f"{policy.name}/{rule.name}", policy_rules=policy_rules)


def _namespace_selector(policy: Policy) -> dict[str, Any]:
    """The policy's namespace selector, and the opt-in label the webhook's registration requires."""
    spec = policy.document.get("spec") if isinstance(policy.document, Mapping) else None
    selector = dict((spec or {}).get("namespaceSelector") or {})
    labels = {**(selector.get("matchLabels") or {}), INJECT_LABEL: "enabled"}
    result: dict[str, Any] = {"matchLabels": labels}
    if selector.get("matchExpressions"):
        result["matchExpressions"] = list(selector["matchExpressions"])
    return result


def export_policies(policies: Sequence[Policy], api_version: str = "v1beta1",
                    dialect: Dialect = TYPED) -> list[PolicyExport]:
    """Every policy, in Placer's order (priority, then name)."""
    if api_version not in API_VERSIONS:
        raise ValueError(f"--api-version must be one of {', '.join(API_VERSIONS)}")
    ordered = sorted(policies, key=lambda policy: (policy.priority, policy.name))
    return [export_policy(policy, api_version, dialect) for policy in ordered]


def report_lines(exports: Sequence[PolicyExport]) -> list[str]:
    """The exportability report: a line per rule, then each policy's notes, then what holds across policies."""
    lines = []
    for export in exports:
        for rule in export.rules:
            status = "exported" if rule.exported else f"not exported: {rule.reason}"
            lines.append(f"{export.policy}/{rule.rule}: {status}")
        lines.extend(f"{export.policy}: {note}" for note in export.notes)
    if sum(1 for export in exports if export.objects) > 1:
        lines.append("across policies: the API server runs MutatingAdmissionPolicies in no order Placer sets, so "
                     "when two policies write the same field the first writer is not Placer's (priority, name); "
                     "conflicts are kept silently (no warning)")
    return lines
