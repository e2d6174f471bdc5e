"""Answers for sibling Pods: a review whose answer a sibling's review already decided is answered from it.

The Pods of one ReplicaSet (or Job, DaemonSet...) reach the webhook as one object over and over: the
controller makes each from the same template, the API server has not generated its name yet (`generateName`
only) and sends it with a request uid of its own and, in `managedFields`, the time the controller wrote it;
nothing else differs (tests/fixtures/requests/pod-rs-owned-generatename-create-real.json). Every other
input of the answer is the same for all of them: the snapshot of policies, the namespace as the rules read
it, and the nodes the placement warnings are checked against.

So an answer is kept under a key made of the whole review less those two fields (the request uid, and
`metadata.managedFields` unless some expression can read it): the review re-encoded, compared whole (a
digest of it cost more than the comparison: 3.4 µs for a 2.6 KB Pod). A review with the same key is answered
with the same response, log fields and rule counts, under its own uid. Only the time a review takes is its own.
A sibling of a decided review is recognised from its bytes, before it is decoded, where the API server wrote
it as it wrote the decided one but for the uid and those times (`recognise`, `webhook.admission.sibling_bytes`):
it then gets the answer without being decoded or keyed, under the same conditions.
Nothing is reused across what a key does not hold:

- the policy snapshot: a new one drops every answer;
- the namespace: an answer holds the namespace it was decided for, and answers only a review whose
  namespace is the same (resolved for each review as before);
- the nodes: an answer whose placement warnings were checked holds the nodes' version, and answers only
  while it holds (`PlacementCheck.nodes_version`).

Never kept, so each is decided afresh (never for rules that read names, uids or counts):

- any review under a snapshot whose expressions can read a name or uid (`request.name`, `request.uid`,
  `object.metadata.name`/`generateName`/`uid`, `workload.name`, or those objects whole), or with a rule whose
  action depends on which pod this is or on state no object carries (`ActionSpec.per_pod`: gangs named
  after the pod or its request, spot-share's live counts, volume pins);
- a Pod that claims devices through DRA (`spec.resourceClaims`): `resources` counts what its claims get,
  read from the cluster's state for each review;
- any review while some policy is Enforced: what its checks of a controller's Pod read is the Pod's own
  word and its owner's (`webhook.engine.enforcement`), not only what a key holds;
- anything but the CREATE of a Pod that a controller owns (nothing else has siblings: a key would cost a
  review about a tenth more for nothing); a Pod that names a native gang group of an operator's template;
  an answer cut short by the deadline; an internal error.

Memory is bounded: at most `entries` answers, and `answer_bytes` in all as `Kept.size` estimates them, the
least recently used going first; a review of more than `largest` bytes is never kept.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import orjson

from webhook.admission.audit import audit_traces
from webhook.admission.review import decode_json, parse_review
from webhook.admission.sibling_bytes import plain_holes, proven, shape
from webhook.engine.outcome import DEADLINE_WARNING, Mutation
from webhook.engine.request import AdmissionRequest
from webhook.gang.native_operators import member_group
from webhook.policy.cel.field_reads import FieldTree
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot, UnknownNamespace
from webhook.support.rule_problems import PROBLEM_OUTCOMES
from webhook.support.typing import JSONObject
from webhook.workloads import controller_reference

IDENTITY = frozenset({"name", "generateName", "uid"})
"""Keys of `metadata` (and of `request`) that differ from one sibling Pod to the next."""
TRACE_BYTES = 200
"""About what one rule trace kept costs (the object, its strings shared with the policy)."""
KEPT_RESULTS = frozenset({"patched", "unchanged", "denied", "skipped"})

Namespace = NamespaceInfo | UnknownNamespace | None
RuleCounts = tuple[list[tuple[str, str, str]], list[tuple[str, str, str, str]]]
"""What the metrics count of an admission's rules: (policy, rule, outcome) of each rule evaluated, and
(policy, rule, outcome, detail) of each that failed or reached a missing key (`Metrics.observe_admission`)."""


def rule_counts(mutation: Mutation) -> RuleCounts:
    traces = mutation.traces if not mutation.audits else [*mutation.traces, *audit_traces(mutation.audits)]
    return ([(trace.policy, trace.rule, trace.outcome) for trace in traces],
            [(trace.policy, trace.rule, trace.outcome, trace.detail) for trace in traces
             if trace.outcome in PROBLEM_OUTCOMES])


@dataclass(frozen=True, slots=True)
class Kept:
    """One decided answer: the response less its uid, and what the log line and metrics say of it."""

    response: JSONObject
    """The AdmissionReview's `response` without `uid`."""
    result: str
    mutation: Mutation
    unplaceable: int
    over_capacity: int
    namespace: Namespace
    nodes: int | None
    """The nodes' version the placement warnings were checked against; None when none were checked."""
    size: int
    """What keeping it costs, about: its key, patch, warnings and rule traces (each trace `TRACE_BYTES`)."""
    shape: bytes | None = None
    """The shape of the decided review's bytes, when its siblings are recognised by it (`sibling_bytes`)."""
    counts: RuleCounts | None = None
    """What the metrics count of its rules (`rule_counts`), made once for all the siblings it answers."""


@dataclass(frozen=True, slots=True)
class Shape:
    """A decided review's bytes but for its holes (`sibling_bytes`): where the holes sit, the answer's key, and
    the request as the log line and metrics read it (its object cut to its generateName)."""

    offsets: tuple[int, ...]
    key: bytes
    request: AdmissionRequest


class SiblingCache:
    """One worker's answers by review key (see the module docstring)."""

    def __init__(self, *, entries: int = 512, answer_bytes: int = 8 * 2**20, largest: int = 256 * 2**10) -> None:
        self.entries = entries
        self.answer_bytes = answer_bytes
        self.largest = largest
        self._answers: dict[bytes, Kept] = {}
        self._shapes: dict[bytes, Shape] = {}
        self._bytes = 0
        self._snapshot: PolicySnapshot | None = None
        self._usable = False
        self._strip_managed_fields = True

    def key(self, request: AdmissionRequest, snapshot: PolicySnapshot) -> bytes | None:
        """The review's key, or None when its answer must be decided afresh."""
        if snapshot is not self._snapshot:
            self._adopt(snapshot)
        obj = request.object
        if (not self._usable or request.kind != "Pod" or request.group or request.operation != "CREATE"
                or obj is None or request.old_object is not None or controller_reference(obj) is None):
            return None  # only a controller's Pods have siblings; anything else would pay for a key in vain
        spec = obj.get("spec")
        if isinstance(spec, dict) and spec.get("resourceClaims"):
            return None  # `resources` counts the devices its claims get: cluster state no key holds
        if self._strip_managed_fields:
            metadata = obj.get("metadata")
            if isinstance(metadata, dict) and "managedFields" in metadata:
                obj = {**obj, "metadata": {key: value for key, value in metadata.items() if key != "managedFields"}}
        fields = request.fields  # the review decoded leaves its uid out of these; a request built elsewhere may not
        if "uid" in fields:
            fields = {key: value for key, value in fields.items() if key != "uid"}
        try:
            review = orjson.dumps((request.api_version, fields, obj))
        except (orjson.JSONEncodeError, TypeError):
            return None  # a value only the standard encoder writes (a lone surrogate): decided each time
        return review if len(review) <= self.largest else None

    def recognise(self, body: bytes, snapshot: PolicySnapshot) -> tuple[bytes, AdmissionRequest] | None:
        """The key of the answer kept for a sibling of the review `body` (not decoded), and the review's request
        as the log line and metrics read it; None when it is not recognised from its bytes (`sibling_bytes`)."""
        if not self._shapes or snapshot is not self._snapshot:
            return None
        holes = plain_holes(body, times=self._strip_managed_fields)
        if holes is None:
            return None
        between, offsets = shape(body, holes)
        found = self._shapes.get(between)
        if found is None or found.offsets != offsets:
            return None
        start, end = holes[0]
        return found.key, found.request.with_uid(body[start:end].decode("ascii"))

    def answer(self, key: bytes, namespace: Namespace, nodes_version: Callable[[], int] | None) -> Kept | None:
        """The answer kept under `key`, if it was decided for this namespace and these nodes."""
        kept = self._answers.get(key)
        if kept is None:
            return None
        if kept.namespace != namespace or (
                kept.nodes is not None and (nodes_version is None or nodes_version() != kept.nodes)):
            self._drop(key)
            return None
        if len(self._answers) > 1:  # the most recently used last: the first ones go first
            self._answers[key] = self._answers.pop(key)
        return kept

    def keep(self, key: bytes, request: AdmissionRequest, *, response: JSONObject, result: str, mutation: Mutation,
             unplaceable: int, over_capacity: int, namespace: Namespace, nodes: int | None,
             body: bytes | None = None) -> None:
        """Keep a decided answer for the review `key` was made of, unless it must not be reused; `body`, the
        review's bytes, to recognise its siblings by (`recognise`)."""
        if (result not in KEPT_RESULTS or DEADLINE_WARNING in mutation.warnings or mutation.gang is not None
                or mutation.share is not None or mutation.volume_outcomes
                or (request.object is not None and member_group(request.object)[1])):
            return
        answered = response.get("response")
        if not isinstance(answered, dict) or answered.get("uid") != request.uid:
            return
        rest = {name: value for name, value in answered.items() if name != "uid"}
        # what the log line and metrics read of the answer; not the templates it placed (a copy of the object)
        said = Mutation(warnings=mutation.warnings, applied=mutation.applied, traces=mutation.traces,
                        denial=mutation.denial, refused=mutation.refused, passed_through=mutation.passed_through,
                        audits=mutation.audits)
        size = (len(key) + len(str(rest.get("patch", ""))) + sum(len(warning) for warning in said.warnings)
                + TRACE_BYTES * (len(said.traces) + sum(len(record.traces) for record in said.audits))
                + sum(len(str(record.patch)) for record in said.audits))
        if size > self.answer_bytes // 8:
            return  # one answer may not push out most of the others
        found = self._shape(body, request, key) if body is not None else None
        if found is not None:
            size += len(found[0])
        self._drop(key)
        while self._answers and (len(self._answers) >= self.entries or self._bytes + size > self.answer_bytes):
            self._drop(next(iter(self._answers)))
        self._answers[key] = Kept(rest, result, said, unplaceable, over_capacity, namespace,
                                  nodes if mutation.placed else None, size, found[0] if found else None,
                                  rule_counts(said))
        if found is not None:
            self._shapes[found[0]] = found[1]
        self._bytes += size

    def __len__(self) -> int:
        return len(self._answers)

    def _drop(self, key: bytes) -> None:
        kept = self._answers.pop(key, None)
        if kept is not None:
            self._bytes -= kept.size
            if kept.shape is not None:
                self._shapes.pop(kept.shape, None)

    def _shape(self, body: bytes, request: AdmissionRequest, key: bytes) -> tuple[bytes, Shape] | None:
        """The shape the siblings of the review `body` will be recognised by, once proven (`sibling_bytes`)."""
        holes = plain_holes(body, times=self._strip_managed_fields)
        if holes is None or not proven(body, holes, request, lambda marked: parse_review(decode_json(marked))):
            return None
        between, offsets = shape(body, holes)
        metadata = request.object.get("metadata") if request.object is not None else None
        generate_name = metadata.get("generateName") if isinstance(metadata, dict) else None
        told = replace(request, uid="", object={"metadata": {"generateName": generate_name}}, old_object=None)
        return between, Shape(offsets, key, told)

    def _adopt(self, snapshot: PolicySnapshot) -> None:
        """A new snapshot: every answer goes, and whether its answers can be kept at all is decided once."""
        self._answers.clear()
        self._shapes.clear()
        self._bytes = 0
        self._snapshot = snapshot
        self._usable = memoisable(snapshot)
        self._strip_managed_fields = not any(reads_managed_fields(view.observed) for view in (
            snapshot, *(snapshot.audit_view(policy) for policy in snapshot.audited)))


def response_for(request: AdmissionRequest, kept: Kept) -> JSONObject:
    """The kept answer as this review's response: its uid first, as `review.build_response` writes it."""
    return {"apiVersion": request.api_version, "kind": "AdmissionReview",
            "response": {"uid": request.uid, **kept.response}}


def memoisable(snapshot: PolicySnapshot) -> bool:
    """Whether any answer under this snapshot may be reused for a sibling (see the module docstring)."""
    if snapshot.reads_shares or snapshot.enforces:
        return False
    if any(rule.action.per_pod for policy in snapshot.policies for rule in policy.rules):
        return False
    if reads_identity(snapshot.observed):
        return False
    # An Audit policy's record is part of the answer: kept only where its evaluation could be kept too.
    return all(memoisable(snapshot.audit_view(policy)) for policy in snapshot.audited)


def reads_identity(observed: Mapping[str, FieldTree]) -> bool:
    """Whether some expression can observe a name or uid of the request, the object or the workload."""
    request = observed.get("request")
    if request is not None and (request.whole or not IDENTITY.isdisjoint(request.keys)):
        return True
    workload = observed.get("workload")
    if workload is not None and (workload.whole or "name" in workload.keys):
        return True
    return any(_metadata_keys(observed.get(name), IDENTITY) for name in ("object", "oldObject"))


def reads_managed_fields(observed: Mapping[str, FieldTree]) -> bool:
    return any(_metadata_keys(observed.get(name), ("managedFields",)) for name in ("object", "oldObject"))


def _metadata_keys(tree: FieldTree | None, keys: Iterable[str]) -> bool:
    """Whether `tree` (what is observed of an object) can see any of `keys` of its metadata."""
    if tree is None:
        return False
    if tree.whole or tree.each is not None:
        return True
    metadata = tree.keys.get("metadata")
    if metadata is None:
        return False
    return metadata.whole or metadata.each is not None or any(key in metadata.keys for key in keys)
