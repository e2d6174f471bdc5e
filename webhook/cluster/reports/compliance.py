"""Does a workload already stored in the cluster follow the current policies? Pass, fail, error or skip.

A mutating webhook acts only when an object is written: a Deployment created before a policy (before Placer,
or while Placer was down under `failurePolicy: Ignore`) keeps running without it. The question asked here is
"would applying the policies now change anything?", answered with the admission engine itself
(`pipeline.admit`, the webhook's own entry): the stored object is sent as the CREATE that would store it
again. A stored object differs from what a CREATE carried in what the API server set on it (status, uid,
resourceVersion, generation, managedFields, timestamps): that is stripped. It already carries the defaults
the API server applied, which a CREATE's object carries too (defaulting runs when the request is decoded,
before admission: kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go,
`createHandler`, decodes with the defaulting serializer before `admit`). And its templates carry Placer's own
marks (`placer.dev/applied`, what earlier rules wrote): the engine's actions leave what is already there,
so a workload Placer mutated under the same policies changes nothing, and passes.

Results are per workload and rule, in the Policy Working Group's vocabulary (`PolicyReport`):
- `pass`: the rule matches the workload and applying it now changes nothing;
- `fail`: applying it now would change the workload (drift); the verdict carries the patch that brings the
  workload in step;
- `error`: the rule errors on the workload (a CEL error, a parameter out of range...);
- `skip`: the workload is opted out (`placer.dev/inject=disabled`) or its template belongs to a controller
  Placer leaves alone (a ReplicaSet owned by a Deployment, a Job owned by a CronJob, any Pod owned by a
  controller: judged on the owner).
Rules that do not match the workload give no result: a report lists what the policies ask of it.

A rule that keeps a value already in its place (actions only add) is also asked what it writes now
(`webhook.engine.value_drift`): a value Placer wrote under an earlier version of the rule that differs from
it is `fail` (the message says what differs; the patch replaces it), the workload's own value is `pass`
(the message says the rule would write another, which is kept).
"""

import json
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field

from webhook.actions.metadata import APPLIED_ANNOTATION
from webhook.admission.pipeline import admit
from webhook.cluster.reports.audit_results import audit_results
from webhook.cluster.reports.exempt_results import exempt_policies, judged_as_exempt
from webhook.cluster.reports.results import RESULTS, Result, RuleResult
from webhook.engine.exemption_seal import Seals
from webhook.engine.mutate import RuleTrace
from webhook.engine.request import AdmissionRequest
from webhook.engine.value_drift import Ledger, ValueCheck, ValueDifference
from webhook.gang.facts import GangFacts
from webhook.policy.model import Policy
from webhook.policy.snapshot import PolicySnapshot
from webhook.support.typing import JSONObject, JSONPatch, as_map
from webhook.workloads import WorkloadTable, controller_reference

SERVER_SET_METADATA = (
    "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
    "deletionTimestamp", "deletionGracePeriodSeconds",
)
"""ObjectMeta fields the API server sets and a CREATE never carries (ObjectMeta in the API reference:
https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/object-meta/ — "Read-only", "Populated
by the system")."""


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @property
    def title(self) -> str:
        return f"{self.kind.lower()}/{self.name}" + (f" -n {self.namespace}" if self.namespace else "")

    def as_report_resource(self) -> JSONObject:
        """An `ObjectReference` as PolicyReport results name their resources."""
        resource: JSONObject = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            resource["namespace"] = self.namespace
        if self.uid:
            resource["uid"] = self.uid
        return resource


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the current policies say of one stored workload."""

    workload: WorkloadRef
    results: tuple[RuleResult, ...] = ()
    patch: JSONPatch = field(default_factory=list)
    """JSON Patch (RFC 6902) on the stored object that brings it in step: empty unless some result fails."""
    skipped: str | None = None
    """Why the workload as a whole is left alone, when it is."""
    refused: str | None = None
    """An Enforced policy would refuse the workload if it were created now (its message): no patch brings it in
    step (any write of it is refused too); its refusing rules' results are `fail`."""
    gang: GangFacts | None = field(default=None, compare=False)
    """The workload's gang facts when a rule labels it for a gang scheduler (what a capacity check reads)."""

    @property
    def drifted(self) -> bool:
        return any(result.result == "fail" for result in self.results)

    def counts(self) -> dict[Result, int]:
        return {name: sum(1 for result in self.results if result.result == name) for name in RESULTS}


def reference_of(obj: JSONObject) -> WorkloadRef:
    metadata = as_map(obj.get("metadata"))
    return WorkloadRef(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""),
                       str(metadata.get("namespace") or ""), str(metadata.get("name") or ""),
                       str(metadata.get("uid") or ""))


def as_create(stored: JSONObject) -> JSONObject:
    """The stored object as a CREATE would carry it: no status, no metadata the API server sets."""
    metadata = {key: value for key, value in as_map(stored.get("metadata")).items() if key not in SERVER_SET_METADATA}
    return {**{key: value for key, value in stored.items() if key not in ("status", "metadata")}, "metadata": metadata}


def evaluate(stored: JSONObject, snapshot: PolicySnapshot, workloads: WorkloadTable,
             values: ValueCheck | None = None, *, seals: Seals | None = None) -> Verdict:
    """Run the admission engine on `stored` as its CREATE and classify each matching rule.

    `snapshot` must know the workload's namespace (its labels decide which policies select it). `values`:
    `ValueCheck(snapshot)`, made once for many workloads judged against the same snapshot. `seals`: the keys
    of exemption seals (`webhook.engine.exemption_seal`), to honour a sealed workload as its admission did."""
    workload = reference_of(stored)
    policies = [policy for policy in snapshot.every_policy
                if policy.applies_to_namespace(snapshot.namespace(workload.namespace).labels)]
    owner = controller_reference(stored)
    if workload.kind == "Pod" and owner is not None:
        reason = f"managed by its controller {owner.get('kind')}/{owner.get('name')}: judged on the owner"
        return _skipped(workload, policies, reason)
    create = as_create(stored)
    kind = workloads.lookup(workload.api_version.rpartition("/")[0], workload.kind)
    ledger = Ledger(kind, create)
    checking = (values if values is not None and values.source is snapshot else ValueCheck(snapshot)).judging(ledger)
    admission = admit(_request(create, workload), checking, workloads,
                      seals=seals)
    mutation = admission.mutation
    if admission.result == "error":
        return Verdict(workload, _for_every_rule(policies, "error", "internal error evaluating the policies"))
    audited = audit_results(mutation.audits)
    if mutation.passed_through is not None:
        if not audited:
            return _skipped(workload, policies, mutation.passed_through)
        served = [policy for policy in policies if not policy.audited]
        return Verdict(workload, _for_every_rule(served, "skip", mutation.passed_through) + tuple(audited),
                       skipped=mutation.passed_through if served else None)
    exempt = exempt_policies(policies, workload.namespace, create, kind, seals)
    changes = _changes(mutation.patch)
    results = list(_rule_results(mutation.traces, changes, _unique(ledger.found), ledger.adding,
                                 refused=mutation.refused))
    results.extend(audited)
    if mutation.refused and mutation.denial is not None:
        # An Enforced policy would refuse this workload if it were created now: each refusing rule is `fail` with
        # its refusal; the other rules are judged on their own, and no patch can bring the workload in step.
        if not any(result.refused for result in results):  # a Pod naming its node: no rule refuses it
            results.extend(RuleResult(policy.name, "", "fail", mutation.denial, refused=True)
                           for policy in policies if policy.enforced and policy.name not in exempt)
        judged = judged_as_exempt(results, exempt)
        return Verdict(workload, judged, [], refused=mutation.denial if any(r.refused for r in judged
                                                                           if r.result == "fail") else None)
    if mutation.denial is not None and not any(result.result == "error" for result in results):
        results.append(RuleResult("", "", "error", mutation.denial))
    judged = judged_as_exempt(results, exempt)
    failing = any(result.result == "fail" for result in judged)
    return Verdict(workload, judged, list(mutation.patch) if failing and changes else [], gang=mutation.gang)


def _skipped(workload: WorkloadRef, policies: Iterable[Policy], reason: str) -> Verdict:
    return Verdict(workload, _for_every_rule(policies, "skip", reason), skipped=reason)


def _for_every_rule(policies: Iterable[Policy], result: Result, message: str) -> tuple[RuleResult, ...]:
    return tuple(RuleResult(policy.name, rule.name, result, message) for policy in policies for rule in policy.rules)


def _unique(found: list[ValueDifference]) -> list[ValueDifference]:
    """Each difference once (the engine may pass over a template more than once)."""
    unique: dict[tuple[str, str, str, str, bool], ValueDifference] = {}
    for item in found:
        unique.setdefault((item.policy, item.rule, item.template, item.slot, item.placers), item)
    return list(unique.values())


def _rule_results(traces: Iterable[RuleTrace], changes: JSONPatch, values: list[ValueDifference],
                  adding: Set[tuple[str, str]], *, refused: bool = False) -> Iterable[RuleResult]:
    """One result per (policy, rule) that matched, each judged on its own: error beats a refusal beats fail
    beats skip beats pass. `changes`: the workload's patch without Placer's marks (a rule whose changes leave
    nothing in it changes nothing: `pass`); `values`: what differs in the rules' places; `adding`: the rules
    that also add what a template lacks; `refused`: an Enforced policy refuses the workload (no patch)."""
    grouped: dict[tuple[str, str], list[RuleTrace]] = {}
    for trace in traces:
        grouped.setdefault((trace.policy, trace.rule), []).append(trace)
    for (policy, rule), rule_traces in grouped.items():
        outcomes = {trace.outcome for trace in rule_traces}
        errors = [trace for trace in rule_traces if trace.outcome == "error"]
        denied = [trace for trace in rule_traces if trace.outcome == "denied"]
        changed = [trace for trace in rule_traces if trace.outcome == "applied" and trace.changed
                   and (changes or refused)]
        replaced = [item for item in values if (item.policy, item.rule) == (policy, rule) and item.placers]
        kept = [item for item in values if (item.policy, item.rule) == (policy, rule) and not item.placers]
        if errors:
            yield RuleResult(policy, rule, "error", "; ".join(_detail(trace) for trace in errors))
        elif denied:
            yield RuleResult(policy, rule, "fail", "refused (enforcement: Enforced): " + "; ".join(
                _detail(trace) for trace in denied), refused=True)
        elif changed and refused:
            yield RuleResult(policy, rule, "fail", "applying the rule now would change the workload; no patch is "
                             "given while an Enforced policy refuses it")
        elif changed and replaced:
            also = "; it also adds what the workload lacks (see the patch)" if (policy, rule) in adding else ""
            yield RuleResult(policy, rule, "fail", f"{_value_prefix(policy, rule)}" + "; ".join(
                f"{item.describe()} (written by Placer)" for item in replaced) + also)
        elif changed:
            yield RuleResult(policy, rule, "fail", _drift_message(changed, changes))
        elif "applied" in outcomes and kept:
            yield RuleResult(policy, rule, "pass", "the workload keeps its own value: " + "; ".join(
                item.describe() for item in kept))
        elif "applied" in outcomes:
            yield RuleResult(policy, rule, "pass", "applying the rule now changes nothing")
        elif "skipped" in outcomes:
            skipped = [trace for trace in rule_traces if trace.outcome == "skipped"]
            yield RuleResult(policy, rule, "skip", "; ".join(_detail(trace) for trace in skipped))


def _value_prefix(policy: str, rule: str) -> str:
    return f"rule {policy}/{rule}: "


def stale_values(result: RuleResult) -> str | None:
    """For a `fail` because a value Placer wrote differs from the rule's current one, what differs."""
    prefix = _value_prefix(result.policy, result.rule)
    return result.message[len(prefix):] if result.result == "fail" and result.message.startswith(prefix) else None


def _detail(trace: RuleTrace) -> str:
    template = trace.template
    where = f"template {template}: " if template else ""
    return where + (trace.detail or trace.outcome)


def _changes(patch: JSONPatch) -> JSONPatch:
    """The operations of a patch that change the workload: all but Placer's own `placer.dev/applied` mark."""
    return [op for op in patch if not (str(op.get("path")).endswith("placer.dev~1applied")
                                       or (str(op.get("path")).endswith("/annotations") and _only_applied(op)))]


def _drift_message(changed: list[RuleTrace], patch: JSONPatch) -> str:
    """How the workload would change: each operation of its patch (values cut at 80 characters; Placer's own
    `placer.dev/applied` mark left out). The patch is the workload's, all its rules together."""
    templates = sorted({str(trace.template) for trace in changed if trace.template})
    where = f" (templates {', '.join(templates)})" if templates else ""
    return f"drift{where}: applying the policies now would {'; '.join(patch_steps(patch)) or 'change the workload'}"


def patch_steps(patch: JSONPatch) -> list[str]:
    """Each operation of a patch as `op path value` (values cut at 80 characters), Placer's own
    `placer.dev/applied` mark left out."""
    steps = []
    for op in _changes(patch):
        value = json.dumps(op.get("value"), separators=(",", ":")) if "value" in op else ""
        shown = f" {value[:77]}..." if len(value) > 80 else f" {value}" if value else ""
        steps.append(f"{op.get('op')} {op.get('path')}{shown}")
    return steps


def _only_applied(op: Mapping[str, object]) -> bool:
    value = op.get("value")
    return isinstance(value, dict) and set(value) == {APPLIED_ANNOTATION}


def _request(obj: JSONObject, workload: WorkloadRef) -> AdmissionRequest:
    group, _, version = workload.api_version.rpartition("/")
    return AdmissionRequest(
        api_version="admission.k8s.io/v1",
        uid=f"placer-drift-{workload.namespace}-{workload.name}",
        group=group,
        version=version,
        kind=workload.kind,
        resource={"group": group, "version": version, "resource": workload.kind.lower() + "s"},
        sub_resource="",
        name=workload.name,
        namespace=workload.namespace,
        operation="CREATE",
        user_info={"username": "placer-drift", "groups": []},
        dry_run=True,
        object=obj,
        old_object=None,
        stored=True,
    )
