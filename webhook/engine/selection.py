"""Which objects Placer leaves alone and which policies apply to the rest: the selection before any rule runs."""

from webhook.actions.metadata import APPLIED_ANNOTATION
from webhook.engine.outcome import DenyRequest, Mutation
from webhook.engine.request import AdmissionRequest
from webhook.policy.model import Policy
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot, UnknownNamespace
from webhook.support.typing import JSONObject, as_map
from webhook.workloads import WorkloadKind, controller_reference

INJECT_LABEL = "placer.dev/inject"


def pass_through_reason(
    request: AdmissionRequest, kind: WorkloadKind, obj: JSONObject, *, pod_only_rules: bool = False,
    honour_opt_out: bool = True,
) -> str | None:
    """Why Placer must leave this object as it is, or None when its policies apply.

    `pod_only_rules`: the object is a Pod created from a template Placer already mutated, and only the rules
    that read what the Pod alone has (`ActionSpec.pod_only`) will run on it: that is no reason to pass.
    `honour_opt_out`: False under an Enforced policy, which the `placer.dev/inject: disabled` label does not
    exempt (the object's author writes that label; exemptions are the policy's own, `spec.exemptions`)."""
    if request.sub_resource:
        return f"subresource {request.sub_resource}"
    if request.operation not in kind.operations:
        return f"{request.operation} of {kind.kind} is not mutated"
    if honour_opt_out and labelled_disabled(obj):
        return f"labelled {INJECT_LABEL}=disabled"
    owned = None if pod_only_rules else controller_owned(kind, obj)
    if owned is not None:
        return owned
    if request.operation == "UPDATE" and not kind.template_changed(obj, request.old_object):
        return "the update does not change the pod template"
    if honour_opt_out and _every_template_disabled(kind, obj):
        return f"pod template labelled {INJECT_LABEL}=disabled"
    return None


def _every_template_disabled(kind: WorkloadKind, obj: JSONObject) -> bool:
    """The object has pod templates and every one is labelled `placer.dev/inject: disabled`."""
    found = False
    for slot in kind.templates(obj):
        raw = slot.read(obj)
        if raw is None:
            continue
        if not labelled_disabled(slot.view(obj, raw)):
            return False
        found = True
    return found



def controller_owned(kind: WorkloadKind, obj: JSONObject) -> str | None:
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
    if from_mutated_template(obj):
        return f"created by {name} from a template Placer already mutated"
    return None


def from_mutated_template(pod: JSONObject) -> bool:
    """A controller's Pod that carries `placer.dev/applied`: its template came through Placer."""
    annotations = as_map(as_map(pod.get("metadata")).get("annotations"))
    return APPLIED_ANNOTATION in annotations and controller_reference(pod) is not None


def applied_rules(obj: JSONObject) -> tuple[str, ...]:
    value = as_map(as_map(obj.get("metadata")).get("annotations")).get(APPLIED_ANNOTATION)
    return tuple(part for part in value.split(",") if part) if isinstance(value, str) else ()


def labelled_disabled(template: JSONObject) -> bool:
    """A pod template (or Pod) opted out with `placer.dev/inject: disabled`."""
    return as_map(as_map(template.get("metadata")).get("labels")).get(INJECT_LABEL) == "disabled"


def selected_policies(
    snapshot: PolicySnapshot, namespace: NamespaceInfo | UnknownNamespace, mutation: Mutation
) -> list[Policy]:
    """The policies that select the namespace, in evaluation order. Shared between requests: never changed."""
    if isinstance(namespace, NamespaceInfo):  # the same for every request in the namespace: worked out once
        facts = snapshot.namespace_facts.of(namespace)
        found: list[Policy] | None = facts.recall(snapshot.policies)
        if found is None:
            found = [policy for policy in snapshot.policies if policy.applies_to_namespace(namespace.labels)]
            facts.remember(snapshot.policies, found)
        return found
    selected = []
    for policy in snapshot.policies:
        if not policy.reads_namespace:
            selected.append(policy)
            continue
        problem = f"namespace {namespace.name} could not be read ({namespace.reason})"
        if policy.enforced:
            raise DenyRequest(f"policy {policy.name}: {problem}; an Enforced policy that cannot be evaluated refuses")
        if policy.failure_policy == "Fail":
            raise DenyRequest(f"policy {policy.name}: {problem}; failurePolicy Fail")
        mutation.warnings.append(f"{policy.name}: skipped: {problem}")
    return selected

