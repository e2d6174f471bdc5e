"""What an Enforced policy checks on an object Placer never changes, and on a Pod whatever it carries.

Placer leaves some objects as they come: a workload a controller made from its owner's template (the
controller compares them: the Deployment controller finds its ReplicaSet by template), a Pod or a Job being
updated (their templates are all but immutable: `ValidatePodUpdate`, pkg/apis/core/validation/validation.go,
lets an update add tolerations and, while the pod has scheduling gates, add to its nodeSelector and narrow
its required node affinity; a Job's template may change only while the Job is suspended and has never
started, and then only its scheduling fields, labels and annotations: pkg/apis/batch/validation/validation.go,
`validatePodTemplateUpdate` with `AllowMutableSchedulingDirectives`, set by pkg/registry/batch/job/strategy.go).
An owner reference and an update are written by whoever sends the request, so under an Enforced policy such
an object is run through the holding policies' boundary rules (`REFUSING_ACTIONS`) only to look for a
refusal: at CREATE any conflict, at UPDATE one the update brings. Its patch is dropped. A Pod that carries
`placer.dev/applied` and a controller owner (made from a template Placer changed) is judged the same way, but
may be changed: what its template should have given it and does not have is added (`judged_rules`).
"""


from webhook.engine.enforcement import REFUSING_ACTIONS, refusal_mutation
from webhook.engine.exemption_seal import Seals
from webhook.engine.outcome import DeadlineReached, DenyRequest, Mutation
from webhook.engine.passes import Run
from webhook.engine.request import AdmissionRequest
from webhook.engine.selection import controller_owned
from webhook.policy.model import Policy
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.support.typing import JSONObject
from webhook.workloads import WorkloadKind


def checked_unchanged(request: AdmissionRequest, kind: WorkloadKind, obj: JSONObject) -> bool:
    """Placer passes the object unchanged, and an Enforced policy must still check it: a controller's
    workload, an UPDATE of a Pod or of a Job."""
    if request.sub_resource:
        return False
    if kind.kind != "Pod" and controller_owned(kind, obj) is not None:
        return True
    return request.operation == "UPDATE" and request.operation not in kind.operations


def judged_rules(policies: list[Policy], enforced: frozenset[str], *, pod_only: bool) -> list[Policy]:
    """The rules to run on an object Placer must not treat as a whole template: the holding Enforced
    policies' boundary rules, plus, with `pod_only`, every policy's rules that read what only a Pod has."""
    kept = []
    for policy in policies:
        boundary = policy.name in enforced
        rules = tuple(rule for rule in policy.rules
                      if (boundary and rule.action.name in REFUSING_ACTIONS) or (pod_only and rule.action.pod_only))
        if rules:
            kept.append(policy.keeping(rules))
    return kept


def check_unchanged(
    request: AdmissionRequest, kind: WorkloadKind, obj: JSONObject, snapshot: PolicySnapshot, *, reason: str,
    policies: list[Policy], enforced: frozenset[str], namespace: NamespaceInfo, deadline: float | None,
    seals: Seals | None, warnings: list[str],
) -> Mutation:
    """The refusal the holding Enforced policies give an object Placer leaves unchanged, else it passes."""
    holding = judged_rules(policies, enforced, pod_only=False)
    if not holding:
        return Mutation(passed_through=reason, warnings=warnings)
    if kind.kind != "Pod" and request.operation == "UPDATE" and not kind.template_changed(obj, request.old_object):
        return Mutation(passed_through=reason, warnings=warnings)
    check = Run(request=request, kind=kind, snapshot=snapshot, policies=holding, namespace=namespace,
                mutation=Mutation(), deadline=deadline, enforced=enforced, seals=seals)
    try:
        check.settle(obj)
    except DenyRequest as denial:
        return Mutation(warnings=warnings, denial=str(denial))
    except DeadlineReached:
        return Mutation(warnings=warnings, denial=deadline_denial(enforced))
    if check.refusals:
        return refusal_mutation(request, obj, check.refusals, check.mutation)
    checked = f"checked by the Enforced policies {', '.join(sorted(enforced))}, never changed: nothing refused"
    return Mutation(passed_through=reason, warnings=warnings, notes=[checked, *check.mutation.notes])


def deadline_denial(enforced: frozenset[str]) -> str:
    return (f"policy {', '.join(sorted(enforced))}: the API server's deadline came before every rule was evaluated; "
            "an Enforced policy that cannot be evaluated refuses")
