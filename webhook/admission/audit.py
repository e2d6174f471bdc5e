"""`enforcement: Audit`: what each Audit policy would write, never applied (`mutate_audited`, the engine's entry
for the webhook, explain and reports).

An Audit policy is evaluated on every admission exactly as it would be once promoted to Advisory, and its
answer is recorded, never sent. Its *would-be patch* is the difference promoting it would make: the object as
the served policies leave it, against the object as the served policies and it (as Advisory, in its place in
the priority order) would leave it (`PolicySnapshot.audit_view`). So a served rule that writes a field first
still wins over it, as it would after the promotion, and an Audit policy that runs first shows the values it
would take from a later served one.

The served answer is never touched: the served policies are evaluated on a snapshot that does not hold the
Audit policies (`PolicySnapshot.audited` is kept apart), with its own caches, so the patch, warnings and
refusals the API server gets are byte for byte what they would be without them. An Audit policy never refuses,
never fails closed (its failurePolicy Fail and what it would refuse become `would deny` records), and its
answer reaches no PodGroup, no spot-share ledger entry and no exemption seal: those follow the served answer
only.
"""

import time
from collections.abc import Callable, Mapping
from typing import Any

import jsonpatch

from webhook.actions.metadata import APPLIED_ANNOTATION
from webhook.admission.patch_words import rule_operations
from webhook.engine.exemption_seal import Seals
from webhook.engine.mutate import mutate
from webhook.engine.outcome import AUDIT_OUTCOME, DEADLINE_WARNING, AuditRecord, Mutation, RuleTrace
from webhook.engine.request import AdmissionRequest
from webhook.pods.capacity_share import CapacityClass, ShareCounts, ShareLedger
from webhook.pods.volumes import ClaimPlacement
from webhook.policy.model import Policy
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot, ResourcesOfPod, UnknownNamespace
from webhook.support.patches import apply_sharing, diff, escape
from webhook.support.typing import JSONObject, JSONPatch
from webhook.workloads import WorkloadTable


class ReadOnce:
    """A spot-share ledger read once per workload for the whole admission: the served run and each audited one
    decide from the same counts (a second read could find other counts, and show a difference no policy made).
    Everything else goes to the ledger itself; only the served answer is ever recorded in it (the pipeline)."""

    __slots__ = ("_counts", "_ledger")

    def __init__(self, ledger: ShareLedger) -> None:
        self._ledger = ledger
        self._counts: dict[tuple[str, str], ShareCounts] = {}

    def counts(self, namespace: str, owner_uid: str) -> ShareCounts:
        found = self._counts.get((namespace, owner_uid))
        if found is None:
            found = self._counts[(namespace, owner_uid)] = self._ledger.counts(namespace, owner_uid)
        return found

    def admitted(self, namespace: str, owner_uid: str, capacity_class: CapacityClass) -> None:
        self._ledger.admitted(namespace, owner_uid, capacity_class)

    def release(self) -> None:
        self._ledger.release()


Evaluate = Callable[[PolicySnapshot], Mutation]
"""Runs the engine on the request under a snapshot, with everything else as the served run had it."""


def mutate_audited(
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
    """`engine.mutate` (the served answer, as if no Audit policy were there) and, in its `audits`, a record per
    Audit policy that selects the request's namespace; every argument is `mutate`'s, handed on as it is to
    each evaluation but the ledger, read once for all."""
    audited = []
    if snapshot.audited and request.object is not None and workloads.lookup(request.group, request.kind):
        audited = audit_policies(snapshot, namespace if namespace is not None else snapshot.namespace(
            request.namespace))
    if audited and ledger is not None:
        ledger = ReadOnce(ledger)  # the served run and the audited ones decide from the same counts

    def evaluate(serving: PolicySnapshot) -> Mutation:
        return mutate(request, serving, workloads, deadline=deadline, namespace=namespace, claims=claims,
                      devices=devices, ledger=ledger, seals=seals)

    mutation = evaluate(snapshot)
    if not audited or request.object is None:
        return mutation
    unaudited = ("the served policies deny the request" if mutation.denial is not None
                 else "deadline reached" if DEADLINE_WARNING in mutation.warnings else None)
    if unaudited is not None:
        mutation.audits = [AuditRecord(policy.name, "not-evaluated", detail=unaudited) for policy in audited]
    else:
        mutation.audits = audit(request.object, mutation, audited, snapshot, evaluate,
                                out_of_time=lambda: deadline is not None and time.monotonic() > deadline)
    return mutation


def audit_policies(snapshot: PolicySnapshot, namespace: NamespaceInfo | UnknownNamespace) -> list[Policy]:
    """The Audit policies whose namespaceSelector selects the namespace (all of them, where it is unknown: their
    evaluation says what cannot be decided)."""
    if not isinstance(namespace, NamespaceInfo):
        return list(snapshot.audited)
    return [policy for policy in snapshot.audited if policy.applies_to_namespace(namespace.labels)]


def audit(obj: JSONObject, served: Mutation, policies: list[Policy], snapshot: PolicySnapshot,
          evaluate: Evaluate, *, out_of_time: Callable[[], bool]) -> list[AuditRecord]:
    """One record per Audit policy in `policies`: what it would have added to the served answer `served`."""
    if not policies:
        return []
    served_object = _patched(obj, served.patch)
    records = []
    for policy in policies:
        if out_of_time():
            records.append(AuditRecord(policy.name, "not-evaluated", detail="deadline reached"))
            continue
        promoted = evaluate(snapshot.audit_view(policy))
        records.append(_record(policy, obj, served, served_object, promoted))
    return records


def _record(policy: Policy, obj: JSONObject, served: Mutation, served_object: JSONObject,
            promoted: Mutation) -> AuditRecord:
    traces = [trace for trace in promoted.traces if trace.policy == policy.name]
    warnings = [warning for warning in promoted.warnings if warning not in served.warnings]
    if promoted.denial is not None:
        return AuditRecord(policy.name, "would-deny", traces=traces, warnings=warnings, detail=promoted.denial)
    if DEADLINE_WARNING in promoted.warnings and promoted.passed_through is not None:
        return AuditRecord(policy.name, "not-evaluated", traces=traces, detail="deadline reached")
    after = _patched(obj, promoted.patch)
    patch = diff(served_object, after)
    if not any(not _applied_mark(op) for op in patch):  # only the applied mark: it would change nothing
        return AuditRecord(policy.name, "no-change", traces=traces, warnings=warnings)
    rules = list(dict.fromkeys(trace.rule for trace in traces if trace.outcome == "applied" and trace.changed))
    changes = [op for op in patch if not _applied_mark(op)]
    by_rule = {}
    for rule in policy.rules:
        if rule.name in rules and not rule.parameter_expressions:
            found = rule_operations(rule.action.name, rule.parameters, changes)
            if found is not None:
                by_rule[rule.name] = found
    return AuditRecord(policy.name, "would-change", patch, rules, by_rule, traces, warnings)


def _applied_mark(op: Mapping[str, Any]) -> bool:
    """An operation that writes only Placer's `placer.dev/applied` mark (the rules that applied, no placement)."""
    path = str(op.get("path"))
    value = op.get("value")
    return path.endswith("/" + escape(APPLIED_ANNOTATION)) or (
        path.endswith("/annotations") and isinstance(value, dict) and set(value) == {APPLIED_ANNOTATION})


def _patched(obj: JSONObject, patch: JSONPatch) -> JSONObject:
    """`obj` with the engine's `patch` applied, sharing what it does not change (`apply_sharing`: the engine's
    patches are add, remove and replace with explicit indices); a deep copy by jsonpatch for anything else."""
    if not patch:
        return obj
    if all(op.get("op") in ("add", "remove", "replace") for op in patch):
        try:
            shared: JSONObject = apply_sharing(obj, patch)
            return shared
        except (KeyError, IndexError, TypeError, ValueError):
            pass
    copied: JSONObject = jsonpatch.apply_patch(obj, patch)
    return copied


def audit_traces(records: list[AuditRecord]) -> list[RuleTrace]:
    """The audited rules' traces as metrics count them: a rule that matched counts as `audit`."""
    return [RuleTrace(trace.policy, trace.rule, trace.template, AUDIT_OUTCOME if trace.outcome in ("applied", "denied")
                      else trace.outcome, trace.detail, trace.changed)
            for record in records for trace in record.traces]
