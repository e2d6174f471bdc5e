"""Apply a policy snapshot to one admission request: the rule loop, the engine's entry.

Every rule of every selected policy is evaluated in order for each pod template of the workload, and its
action changes a working copy of the template (selection.py chooses the policies, passes.py runs them to a
fixed point, rule_run.py runs one rule, patch_assembly.py builds the patch).

Pure: no I/O of its own, no clock other than the deadline, no metrics. What it must read of the cluster comes
through what the caller hands it: the spot-share ledger, and the owner lookup of `seals`, which is asked only
for a Pod an Enforced policy would otherwise refuse (`exemption_seal.pod_sealed`).
"""

from collections.abc import Mapping

from webhook.engine.configuration import gang_warnings
from webhook.engine.enforced_check import check_unchanged, checked_unchanged, deadline_denial, judged_rules
from webhook.engine.enforcement import enforcing, holding, names_its_node, node_name_refusal, refusal_mutation
from webhook.engine.exemption_seal import Seals, pod_sealed
from webhook.engine.native_pods import with_native_groups
from webhook.engine.outcome import (
    DEADLINE_WARNING,
    DeadlineReached,
    DenyRequest,
    Mutation,
    RuleTrace,
    unique_messages,
)
from webhook.engine.passes import Run
from webhook.engine.patch_assembly import marks_patch, pointer_tokens
from webhook.engine.request import AdmissionRequest
from webhook.engine.selection import (
    INJECT_LABEL,
    applied_rules,
    controller_owned,
    from_mutated_template,
    pass_through_reason,
    selected_policies,
)
from webhook.pods.capacity_share import ShareLedger
from webhook.pods.pod_share import PodShare
from webhook.pods.volumes import ClaimPlacement
from webhook.policy.model import Policy
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot, ResourcesOfPod, UnknownNamespace
from webhook.support.typing import JSONObject
from webhook.workloads import WorkloadKind, WorkloadTable, controller_reference

NO_POLICY = "no policy selects this namespace"
"""Why an object passes through when no served policy selects its namespace (Audit policies may still)."""

__all__ = [
    "DEADLINE_WARNING", "INJECT_LABEL", "NO_POLICY", "Mutation", "RuleTrace", "mutate", "pass_through_reason",
    "pointer_tokens",
]


def mutate(
    request: AdmissionRequest,
    snapshot: PolicySnapshot,
    workloads: WorkloadTable,
    *,
    deadline: float | None = None,
    namespace: NamespaceInfo | UnknownNamespace | None = None,
    claims: Mapping[str, ClaimPlacement] | None = None,
    devices: ResourcesOfPod | None = None,
    ledger: ShareLedger | None = None,
    seals: Seals | None = None,
) -> Mutation:
    """Evaluate the snapshot's policies against the request's object and return the patch to send.

    `namespace` is what the caller learnt about the request's namespace; by default the snapshot's entry
    (a namespace the snapshot does not know has no labels, which is right when no cluster is connected).
    `claims`: for a Pod, where the data of each claim it mounts lives (`pin-to-volume-node`), when known.
    `devices`: completes a pod template's `resources` with the devices it claims through DRA, when known.
    `ledger`: the live pod counts per workload, for `spot-share` on a Pod's creation; None: no counts (each
    Pod is decided as the first of its workload, with a warning).
    `seals`: the key that carries an exempt request's exemption to the pods of its workload, and the reader of
    a Pod's controller owner (`webhook.engine.exemption_seal`); None: exemptions stay with the request.
    """
    kind = workloads.lookup(request.group, request.kind)
    if kind is None:
        unhandled = f"{request.kind} is not a workload kind Placer handles; admitted unchanged"
        return Mutation(passed_through=unhandled, warnings=[unhandled])
    mutation = _evaluate(request, snapshot, kind, workloads, deadline=deadline, namespace=namespace, claims=claims,
                         devices=devices, ledger=ledger, seals=seals)
    return with_native_groups(request, kind, snapshot.native_gang_version, mutation)


def _evaluate(
    request: AdmissionRequest,
    snapshot: PolicySnapshot,
    kind: WorkloadKind,
    workloads: WorkloadTable,
    *,
    deadline: float | None,
    namespace: NamespaceInfo | UnknownNamespace | None,
    claims: Mapping[str, ClaimPlacement] | None,
    devices: ResourcesOfPod | None,
    ledger: ShareLedger | None,
    seals: Seals | None,
) -> Mutation:
    obj = request.object
    if obj is None:
        return Mutation(passed_through="no object")
    share = _pod_share(request, snapshot, ledger) if kind.kind == "Pod" else None
    controller_pod = kind.kind == "Pod" and from_mutated_template(obj)
    # Under an Enforced policy a Pod is judged on what it carries: `placer.dev/applied` and an owner reference
    # are written by whoever creates it, so they excuse nothing (enforced_check.judged_rules).
    judged = controller_pod and snapshot.enforces
    pod_only = controller_pod and (claims is not None or share is not None or judged)
    reason = pass_through_reason(request, kind, obj, pod_only_rules=pod_only)
    opted_out = reason is not None and pass_through_reason(
        request, kind, obj, pod_only_rules=pod_only, honour_opt_out=False) != reason
    unchanged = reason is not None and snapshot.enforces and checked_unchanged(request, kind, obj)
    if reason is not None and not opted_out and not names_its_node(request, obj) and not unchanged:
        return Mutation(passed_through=reason)
    mutation = Mutation()
    info = namespace if namespace is not None else snapshot.namespace(request.namespace)
    try:
        policies = selected_policies(snapshot, info, mutation)
    except DenyRequest as denial:
        if reason is not None and not (snapshot.enforces and _enforced_may_select(snapshot)):
            return Mutation(passed_through=reason)  # opted out, or passed: a namespace it cannot read changes nothing
        return Mutation(warnings=mutation.warnings, denial=str(denial))
    exemptions = enforcing(policies, request)
    enforced = holding(exemptions)
    exempt = frozenset(exemptions) - enforced
    for name in sorted(exempt):
        mutation.notes.append(f"{name}: exempt ({exemptions[name]}): Advisory for this request")
    refused = node_name_refusal(request, obj, enforced)
    if refused is not None:
        return Mutation(warnings=mutation.warnings, denial=refused, refused=True)
    known = info if isinstance(info, NamespaceInfo) else NamespaceInfo(info.name)
    if unchanged and reason is not None:
        return check_unchanged(request, kind, obj, snapshot, reason=reason, policies=policies, enforced=enforced,
                               namespace=known, deadline=deadline, seals=seals, warnings=mutation.warnings)
    if opted_out:
        policies = [policy for policy in policies if policy.name in enforced]
        if not policies:
            return Mutation(passed_through=reason)
        mutation.notes.append(f"{reason}: ignored by the Enforced policies {', '.join(sorted(enforced))}")
        reason = pass_through_reason(request, kind, obj, pod_only_rules=pod_only, honour_opt_out=False)
    if reason is not None:
        return Mutation(passed_through=reason)
    if pod_only:
        kept = judged_rules(policies, enforced if judged else frozenset(), pod_only=True)
        if not kept:
            return Mutation(passed_through=controller_owned(kind, obj))
        mutation.notes.extend(_left_to_the_template(controller_owned(kind, obj), policies, kept))
        policies = kept
    if not policies:
        if not mutation.warnings:
            mutation.passed_through = NO_POLICY
        return mutation

    def run_with(sealed_slots: frozenset[str], into: Mutation) -> Run:
        return Run(request=request, kind=kind, snapshot=snapshot, policies=policies, namespace=known,
                   mutation=into, deadline=deadline, claims=claims, devices=devices,
                   applied_before=applied_rules(obj) if pod_only else (), enforced=enforced, exempt=exempt,
                   seals=seals, sealed_slots=sealed_slots, share=share)

    notes = list(mutation.notes)
    run = run_with(frozenset(), mutation)
    try:
        patch = run.settle(obj)
        sealed_by = _owner_seal(request, kind, obj, workloads, seals=seals, deadline=deadline) if run.refusals else None
        if sealed_by is not None:  # a Kubernetes controller's Pod whose owner an exempt request sealed
            mutation = Mutation(notes=[*notes, f"exempt: {sealed_by}"])
            run = run_with(frozenset({""}), mutation)
            patch = run.settle(obj)
    except DenyRequest as denial:
        return Mutation(warnings=unique_messages(mutation.warnings), traces=run.trace_list(), denial=str(denial))
    except DeadlineReached:
        if enforced:
            return Mutation(warnings=[DEADLINE_WARNING], traces=run.trace_list(), denial=deadline_denial(enforced))
        return Mutation(warnings=[DEADLINE_WARNING], traces=run.trace_list(), passed_through="deadline reached")
    if run.refusals:
        return refusal_mutation(request, obj, run.refusals, mutation)
    mutation.patch = patch + marks_patch(obj, run.marks)
    mutation.warnings.extend(gang_warnings(
        policies, run.applied, {slot: final for slot, (_, final) in mutation.placed.items()}, run.marks,
        pod_groups_served=snapshot.pod_groups_served,
    ))
    facts = run.gang.value
    if facts is not None and facts.derived:
        mutation.gang = facts
    mutation.applied = list(dict.fromkeys(mutation.applied))
    mutation.warnings = unique_messages(mutation.warnings)
    mutation.share = share.decision if share is not None else None
    return mutation


def _left_to_the_template(reason: str | None, policies: list[Policy], kept: list[Policy]) -> list[str]:
    """Say which rules do not run on a Pod made from a template Placer already mutated: they ran on the
    template (`placer.dev/applied` lists those that changed it); only the rules that read what the Pod alone has
    run on the Pod. Without this, explain shows such a rule nowhere for the Pod."""
    running = {(policy.name, rule.name) for policy in kept for rule in policy.rules}
    left = [f"{policy.name}/{rule.name}" for policy in policies for rule in policy.rules
            if (policy.name, rule.name) not in running]
    if not left:
        return []
    return [f"{reason}: only the rules that read what the Pod alone has run on it; "
            f"not run here, they ran on the template: {', '.join(left)}"]


def _enforced_may_select(snapshot: PolicySnapshot) -> bool:
    """Some Enforced policy reads the namespace: one that cannot be read may be held by it."""
    return any(policy.enforced and policy.reads_namespace for policy in snapshot.policies)


def _owner_seal(request: AdmissionRequest, kind: WorkloadKind, obj: JSONObject, workloads: WorkloadTable, *,
                seals: Seals | None, deadline: float | None) -> str | None:
    """Why a Pod being created is exempt by its controller owner's seal (exemption_seal.pod_sealed), or None."""
    if kind.kind != "Pod" or request.operation != "CREATE" or seals is None:
        return None
    owner = controller_reference(obj)
    owner_kind = None
    if owner is not None:
        group = str(owner.get("apiVersion") or "").rpartition("/")[0]
        owner_kind = workloads.lookup(group, str(owner.get("kind") or ""))

    def templates(found: JSONObject) -> list[JSONObject]:
        assert owner_kind is not None
        return [slot.view(found, raw) for slot in owner_kind.templates(found)
                if slot.projection is None and (raw := slot.read(found)) is not None]

    return pod_sealed(seals, request.namespace, request.user_info, obj,
                      templates=templates if owner_kind is not None else None, deadline=deadline)


def _pod_share(request: AdmissionRequest, snapshot: PolicySnapshot, ledger: ShareLedger | None) -> PodShare | None:
    """A Pod's workload share, when some rule decides spot shares and the Pod is being created."""
    if not snapshot.reads_shares or request.operation != "CREATE" or request.object is None:
        return None
    return PodShare(request.namespace or "", controller_reference(request.object), ledger)
