"""A controller's Pod under an Enforced policy: checked, never changed.

A Pod made from a template Placer already mutated (`placer.dev/applied` and a controller owner reference)
passes unchanged, so that it keeps agreeing with its template (`selection.controller_owned`). Both marks
are written by whoever creates the Pod, though, so a tenant could copy them onto a Pod of their own. Under an
Enforced policy such a Pod is therefore run through the Enforced policies' rules once more, only to look for
a refusal: a Pod its controller made from a checked template has none (its template already holds what the
rules set), and its patch, if any, is dropped.
"""

from webhook.engine.enforcement import refusal_mutation
from webhook.engine.outcome import DeadlineReached, DenyRequest, Mutation
from webhook.engine.passes import Run
from webhook.engine.request import AdmissionRequest
from webhook.policy.model import Policy
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.support.typing import JSONObject
from webhook.workloads import WorkloadKind


def refusals_of_controller_pod(
    request: AdmissionRequest, kind: WorkloadKind, obj: JSONObject, snapshot: PolicySnapshot, *,
    policies: list[Policy], enforced: frozenset[str], namespace: NamespaceInfo, deadline: float | None,
) -> Mutation | None:
    """The denial the Enforced policies give this Pod, or None when they give none."""
    holding = [policy for policy in policies if policy.name in enforced]
    if not holding:
        return None
    check = Run(request=request, kind=kind, snapshot=snapshot, policies=holding, namespace=namespace,
                mutation=Mutation(), deadline=deadline, enforced=enforced)
    try:
        check.settle(obj)
    except (DenyRequest, DeadlineReached):
        return None  # a failing rule is the regular evaluation's business, not a refusal
    if not check.refusals:
        return None
    return refusal_mutation(request, obj, check.refusals, check.mutation)
