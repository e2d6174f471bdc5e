"""An AdmissionReview in, an AdmissionReview out: the short spine between the server and the engine."""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, cast

from webhook.admission.audit import mutate_audited
from webhook.admission.audit_annotations import audit_annotations
from webhook.admission.review import build_response
from webhook.admission.sibling_cache import RuleCounts, SiblingCache, response_for
from webhook.engine.enforcement import ENFORCE_LABEL
from webhook.engine.exemption_seal import Seals
from webhook.engine.mutate import INJECT_LABEL, Mutation
from webhook.engine.request import AdmissionRequest
from webhook.placement.claims import AdmissionDevices, ClaimLookup
from webhook.placement.feasibility import Findings, PlacementCheck
from webhook.pods.capacity_share import ShareLedger
from webhook.pods.volumes import ClaimPlacement
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot, UnknownNamespace
from webhook.support.config import OptIn
from webhook.support.typing import JSONObject, JSONPatch
from webhook.workloads import WorkloadTable, controller_reference

log = logging.getLogger(__name__)

Result = Literal["patched", "unchanged", "denied", "skipped", "error"]
Entry = Literal["mutate", "enforce"]
"""Which webhook entry sent the request: `enforce` serves only namespaces labelled `placer.dev/enforce=true`
(deploy/base/webhooks.yaml), which some Enforced policy selects, and fails closed."""
NOT_DECIDED = "Placer cannot decide this request and the namespace is held by an Enforced policy (fails closed)"
NamespaceResolver = Callable[[PolicySnapshot, str, float | None], NamespaceInfo | UnknownNamespace]
"""Finds the request's namespace (snapshot, cache, API server) within the deadline; see kube.namespace_lookup."""


@dataclass(slots=True)
class Admission:
    """The response to send, and what happened, for logs and metrics."""

    request: AdmissionRequest
    response: JSONObject
    result: Result
    mutation: Mutation = field(default_factory=Mutation)
    unplaceable: int = 0
    """Templates Placer left with no node to land on (each one a warning in the response)."""
    over_capacity: int = 0
    """Gang member templates the nodes that may host them can never hold (each one a warning)."""
    counts: RuleCounts | None = None
    """What the metrics count of its rules, when made already (a kept answer's); else `rule_counts(mutation)`."""


def admit(
    request: AdmissionRequest,
    snapshot: PolicySnapshot,
    workloads: WorkloadTable,
    *,
    opt_in: OptIn = "api-server",
    deadline: float | None = None,
    resolve_namespace: NamespaceResolver | None = None,
    placement: PlacementCheck | None = None,
    claims: ClaimLookup | None = None,
    ledger: ShareLedger | None = None,
    entry: Entry = "mutate",
    seals: Seals | None = None,
    siblings: SiblingCache | None = None,
    body: bytes | None = None,
) -> Admission:
    """Decide one admission. Fails open: only a policy with `failurePolicy: Fail` or `enforcement: Enforced`
    can deny, except for a request of the fail-closed webhook entry (`entry="enforce"`: its namespace is
    labelled `placer.dev/enforce=true`), which is refused when Placer cannot decide it: policies not loaded
    yet, no Enforced policy loaded that selects the namespace, or an error inside Placer.

    `seals`: carries an exempt request's exemption to its workload's pods (`webhook.engine.exemption_seal`).

    `ledger`: the live pod counts of each workload by capacity class (`spot-share`); None means no counts,
    and each Pod is decided as the first of its workload, with a warning saying so. It is released once the
    admission is decided, whatever the outcome (`ShareLedger.release`). `siblings`: answers a sibling Pod's
    review decided, reused where nothing the answer depends on differs (`sibling_cache`); `body`, the bytes the
    request was decoded from, by which its siblings are then recognised (`answer_sibling`)."""
    try:
        return _admit(request, snapshot, workloads, opt_in=opt_in, deadline=deadline,
                      resolve_namespace=resolve_namespace, placement=placement, claims=claims, ledger=ledger,
                      entry=entry, seals=seals, siblings=siblings, body=body)
    finally:
        if ledger is not None:
            _release(ledger)


def _release(ledger: ShareLedger) -> None:
    try:
        ledger.release()
    except Exception:  # the admission is decided; a hold left behind ends with a deadline (share_shards)
        log.exception("spot-share ledger could not be released")


def _admit(
    request: AdmissionRequest,
    snapshot: PolicySnapshot,
    workloads: WorkloadTable,
    *,
    opt_in: OptIn,
    deadline: float | None,
    resolve_namespace: NamespaceResolver | None,
    placement: PlacementCheck | None,
    claims: ClaimLookup | None,
    ledger: ShareLedger | None,
    entry: Entry,
    seals: Seals | None,
    siblings: SiblingCache | None,
    body: bytes | None,
) -> Admission:
    closed = entry == "enforce" and _handled(request, workloads)
    if closed and not snapshot.ready:
        return _refuse(request, f"{NOT_DECIDED}: Placer has not loaded its policies yet")
    namespace = _namespace(request, snapshot, workloads, deadline, resolve_namespace)
    known = namespace or snapshot.namespace(request.namespace)
    if closed and isinstance(known, NamespaceInfo) and not any(
            policy.enforced and policy.applies_to_namespace(known.labels) for policy in snapshot.policies):
        return _refuse(request, f"{NOT_DECIDED}: namespace {known.name} is labelled {ENFORCE_LABEL}=true but no "
                                "Enforced policy Placer has loaded selects it (one not loaded yet, or just removed)")
    if opt_in == "label-or-annotation" and not _opted_in(namespace or snapshot.namespace(request.namespace)):
        return Admission(request, _respond(request), "skipped", Mutation(passed_through="namespace not opted in"))
    key = siblings.key(request, snapshot) if siblings is not None else None
    if key is None or siblings is None:
        return _decide(request, snapshot, workloads, namespace, deadline=deadline, placement=placement,
                       claims=claims, ledger=ledger, seals=seals, closed=closed)
    nodes_version = placement.nodes_version if placement is not None else None
    kept = siblings.answer(key, namespace, nodes_version)
    if kept is not None:
        return Admission(request, response_for(request, kept), cast(Result, kept.result), kept.mutation,
                         kept.unplaceable, kept.over_capacity, kept.counts)
    nodes = nodes_version() if nodes_version is not None else None  # before deciding: a change meanwhile is newer
    admission = _decide(request, snapshot, workloads, namespace, deadline=deadline, placement=placement,
                        claims=claims, ledger=ledger, seals=seals, closed=closed)
    siblings.keep(key, request, response=admission.response, result=admission.result, mutation=admission.mutation,
                  unplaceable=admission.unplaceable, over_capacity=admission.over_capacity, namespace=namespace,
                  nodes=nodes, body=body)
    return admission


def answer_sibling(
    body: bytes,
    snapshot: PolicySnapshot,
    workloads: WorkloadTable,
    siblings: SiblingCache,
    *,
    opt_in: OptIn = "api-server",
    deadline: float | None = None,
    resolve_namespace: NamespaceResolver | None = None,
    placement: PlacementCheck | None = None,
    ledger: ShareLedger | None = None,
) -> Admission | None:
    """The admission `admit` gives the review `body` of the mutating entry, without decoding it, when the
    sibling cache recognises it from its bytes (`SiblingCache.recognise`); None: decode it and `admit` it.

    What `admit` does before it asks the cache is done the same way: the namespace resolved for this review,
    the opt-in, the answer only for the namespace and nodes it was decided for."""
    found = siblings.recognise(body, snapshot)
    if found is None:
        return None
    key, request = found
    namespace = _namespace(request, snapshot, workloads, deadline, resolve_namespace)
    if opt_in == "label-or-annotation" and not _opted_in(namespace or snapshot.namespace(request.namespace)):
        admission = Admission(request, _respond(request), "skipped", Mutation(passed_through="namespace not opted in"))
    else:
        kept = siblings.answer(key, namespace, placement.nodes_version if placement is not None else None)
        if kept is None:
            return None  # decided afresh by `admit`, which then releases the ledger
        admission = Admission(request, response_for(request, kept), cast(Result, kept.result), kept.mutation,
                              kept.unplaceable, kept.over_capacity, kept.counts)
    if ledger is not None:
        _release(ledger)
    return admission


def _decide(
    request: AdmissionRequest,
    snapshot: PolicySnapshot,
    workloads: WorkloadTable,
    namespace: NamespaceInfo | UnknownNamespace | None,
    *,
    deadline: float | None,
    placement: PlacementCheck | None,
    claims: ClaimLookup | None,
    ledger: ShareLedger | None,
    seals: Seals | None,
    closed: bool,
) -> Admission:
    try:
        placements = _claims(claims, snapshot, request)
        devices = _devices(claims, snapshot, request, workloads)
        mutation = mutate_audited(request, snapshot, workloads, deadline=deadline, namespace=namespace,
                                  claims=placements, devices=devices, ledger=ledger, seals=seals)
        if devices is not None:  # a claim Placer does not know: a warning, and a note for explain
            mutation.warnings.extend(devices.notes)
            mutation.notes.extend(devices.notes)
    except Exception:  # fail open: a bug or a pathological object must never block the user's workload...
        log.exception("admission %s failed; admitting %s/%s unchanged", request.uid, request.namespace, request.name)
        if closed:  # ...unless the namespace is held by an Enforced policy: then it fails closed
            return _refuse(request, f"{NOT_DECIDED}: internal error evaluating policies")
        warning = "internal error evaluating policies; admitted unchanged"
        return Admission(request, _respond(request, warnings=[warning]), "error", Mutation(warnings=[warning]))
    audited = audit_annotations(mutation.audits) if mutation.audits else {}
    if mutation.denial is not None:
        response = _respond(request, allowed=False, warnings=mutation.warnings, denial=mutation.denial,
                            audit_annotations=audited or None)
        return Admission(request, response, "denied", mutation)
    if mutation.passed_through is not None:
        response = _respond(request, warnings=mutation.warnings, audit_annotations=audited or None)
        return Admission(request, response, "skipped", mutation)
    audit = {"applied": ",".join(mutation.applied), **audited} if mutation.applied else audited or None
    findings = _placement_warnings(placement, mutation, snapshot, request)
    response = _respond(request, patch=mutation.patch, warnings=mutation.warnings, audit_annotations=audit)
    _record_share(ledger, request, mutation)
    return Admission(request, response, "patched" if mutation.patch else "unchanged", mutation,
                     len(findings.unplaceable), len(findings.over_capacity))


def _handled(request: AdmissionRequest, workloads: WorkloadTable) -> bool:
    return not request.sub_resource and workloads.lookup(request.group, request.kind) is not None


def _refuse(request: AdmissionRequest, reason: str) -> Admission:
    """The fail-closed entry's answer when Placer cannot decide: refused with the reason."""
    mutation = Mutation(denial=reason)
    return Admission(request, _respond(request, allowed=False, denial=reason), "denied", mutation)


def _record_share(ledger: ShareLedger | None, request: AdmissionRequest, mutation: Mutation) -> None:
    """Tell the ledger of the class this admission gave a Pod of a workload, until its published counts hold
    the Pod. Not for a dry run (no Pod is created), nor for a class the Pod came with (counted once it lives)."""
    decision = mutation.share
    if ledger is None or decision is None or not decision.decided or request.dry_run or not request.object:
        return
    owner = controller_reference(request.object)
    uid = owner.get("uid") if owner is not None else None
    if not isinstance(uid, str) or not uid:
        return  # a bare Pod is a workload of one: nothing to count
    try:
        ledger.admitted(request.namespace or "", uid, decision.capacity_class)
    except Exception:  # the response stands; the next admissions see the pod once the controller counts it
        log.exception("ledger could not record admission %s", request.uid)


def _claims(
    claims: ClaimLookup | None, snapshot: PolicySnapshot, request: AdmissionRequest
) -> dict[str, ClaimPlacement] | None:
    """For a Pod, when some rule pins pods to their volumes' nodes: where each claim's data lives."""
    if claims is None:
        return None
    try:
        return claims.for_admission(request, snapshot)
    except Exception:  # the other rules still apply; pins need what could not be read
        log.exception("claims of admission %s unreadable; pod not pinned", request.uid)
        return None


def _devices(
    claims: ClaimLookup | None, snapshot: PolicySnapshot, request: AdmissionRequest, workloads: WorkloadTable
) -> AdmissionDevices | None:
    """When some policy reads `resources`: what completes it with the devices the pods claim through DRA."""
    if claims is None:
        return None
    try:
        return claims.devices_for(request, snapshot, workloads)
    except Exception:  # `resources` then says what the pods alone say, and its claims read as not known
        log.exception("DRA claims of admission %s unreadable", request.uid)
        return None


def _placement_warnings(
    placement: PlacementCheck | None, mutation: Mutation, snapshot: PolicySnapshot, request: AdmissionRequest
) -> Findings:
    """Add a warning per template left with nowhere to land and per gang that can never start; a failing
    check never fails the admission."""
    if placement is None:
        return Findings()
    try:
        findings = placement.findings(mutation, snapshot)
    except Exception:
        log.exception("placement check of admission %s failed; admitted without it", request.uid)
        return Findings()
    mutation.warnings.extend(findings.unplaceable + findings.over_capacity)
    return findings


def _respond(
    request: AdmissionRequest,
    *,
    allowed: bool = True,
    patch: JSONPatch | None = None,
    warnings: list[str] | None = None,
    audit_annotations: dict[str, str] | None = None,
    denial: str | None = None,
) -> JSONObject:
    """The response for this request, in the AdmissionReview version it came in."""
    return build_response(
        request.uid,
        request.api_version,
        allowed=allowed,
        patch=patch,
        warnings=warnings,
        audit_annotations=audit_annotations,
        denial=denial,
    )


def _namespace(
    request: AdmissionRequest,
    snapshot: PolicySnapshot,
    workloads: WorkloadTable,
    deadline: float | None,
    resolve: NamespaceResolver | None,
) -> NamespaceInfo | UnknownNamespace | None:
    """The request's namespace, looked up only when policies could be evaluated for it."""
    if resolve is None or not request.namespace or not snapshot.every_policy:
        return None
    if workloads.lookup(request.group, request.kind) is None:
        return None
    return resolve(snapshot, request.namespace, deadline)


def _opted_in(namespace: NamespaceInfo | UnknownNamespace) -> bool:
    """`--opt-in=label-or-annotation`: the namespace carries the opt-in label or annotation.

    A namespace that could not be read is not known to have opted in: its objects pass through unchanged.
    """
    if not isinstance(namespace, NamespaceInfo):
        return False
    if namespace.labels.get(ENFORCE_LABEL) == "true":  # an Enforced policy selects it: opting out is not an option
        return True
    return namespace.labels.get(INJECT_LABEL) == "enabled" or namespace.annotations.get(INJECT_LABEL) == "enabled"
