"""Which nodes could ever host a pod: the scheduler's node filters that depend only on the pod and the node.

kube-scheduler runs its Filter plugins in the order of its default profile (kubernetes
pkg/scheduler/apis/config/v1/default_plugins.go, getDefaultPlugins: NodeUnschedulable, NodeName,
TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit, volumes, PodTopologySpread, InterPodAffinity) and,
per node, stops at the first that rejects it (pkg/scheduler/framework/runtime/framework.go,
RunFilterPlugins); the pod's FailedScheduling event counts each node under that plugin's reason
(pkg/scheduler/framework/types.go, FitError.Error). The filters that read only the pod and the node are
checked here, in that order, against what Placer keeps of each Node (`webhook.policy.state.node_facts`):

1. NodeUnschedulable: a cordoned node, unless the pod tolerates `node.kubernetes.io/unschedulable:NoSchedule`;
2. NodeName: a pod that names its node (`spec.nodeName`) fits no other;
3. TaintToleration: every NoSchedule and NoExecute taint tolerated;
4. NodeAffinity: `nodeSelector`, then required node affinity (terms ORed, expressions ANDed, `matchFields`
   on `metadata.name`).

Resources, ports and volumes depend on what runs where and are left to the scheduler. Counting, per node,
the first filter that rejects it names the same cause as the scheduler's event: a tainted node without the
pool label is "with untolerated taint", as the scheduler says, not "without label".
"""

from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import orjson

Answer = TypeVar("Answer")
Nodes = list[tuple[str, Any]]
"""The cluster's nodes as (name, facts), as `NodeFactsReader.current` returns them."""

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_REJECTING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Fit:
    hosts: int
    """Nodes that pass every filter."""
    total: int
    rejections: Counter[str] = field(default_factory=Counter)
    """Why the other nodes do not: the first filter each one fails, as a sentence, with its count."""

    def describe(self) -> str:
        if self.hosts:
            return f"{self.hosts} of {self.total} nodes can host its pods"
        ranked = sorted(self.rejections.items(), key=lambda item: (-item[1], _filter_rank(item[0])))
        reasons = ", ".join(f"{count} {reason}" for reason, count in ranked)
        return f"no node can host its pods ({reasons}; 0 of {self.total} nodes)"


class NodeAnswers(Generic[Answer]):
    """Answers about the nodes (does any fit? how many pods do they hold?), kept per question until the nodes
    change: a question is a set of placement constraints, the same for every pod of a workload. At most
    `limit` are kept, the oldest dropped first."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._answers: OrderedDict[Hashable, Answer] = OrderedDict()
        self._version: int | None = None

    def get(self, version: int, key: Hashable, compute: Callable[[], Answer]) -> Answer:
        """The answer for `key` about the nodes at `version` (a change of version forgets every answer)."""
        if version != self._version:
            self._answers.clear()
            self._version = version
        answer = self._answers.get(key)
        if answer is None:
            answer = self._answers[key] = compute()
            while len(self._answers) > self._limit:
                self._answers.popitem(last=False)
        return answer

    def values(self) -> list[Answer]:
        return list(self._answers.values())


def node_fit(
    pod_spec: Mapping[str, Any], nodes: Iterable[tuple[str, Mapping[str, Any]]], *, any_host: bool = False
) -> Fit:
    """Count the nodes (name, facts) on which a pod with `pod_spec` passes the scheduler's node filters.

    `any_host`: stop at the first node that passes (`hosts` is then 0 or 1, `total` what was looked at):
    whether a pod can land anywhere at all costs a scan only when it cannot."""
    rejection = node_filter(pod_spec)
    hosts, total, rejections = 0, 0, Counter[str]()
    for name, facts in nodes:
        total += 1
        reason = rejection(name, facts)
        if reason is None:
            hosts += 1
            if any_host:
                break
        else:
            rejections[reason] += 1
    return Fit(hosts, total, rejections)


def node_filter(pod_spec: Mapping[str, Any]) -> Callable[[str, Mapping[str, Any]], str | None]:
    """(node name, facts) → why a pod with `pod_spec` cannot land there, or None when it passes every filter."""
    tolerations = [t for t in pod_spec.get("tolerations") or [] if isinstance(t, dict)]
    selector = pod_spec.get("nodeSelector") if isinstance(pod_spec.get("nodeSelector"), dict) else {}
    node_name = pod_spec.get("nodeName") if isinstance(pod_spec.get("nodeName"), str) else None
    pod = _PodConstraints(tolerations, node_name or None, selector or {}, required_terms(pod_spec))
    return lambda name, facts: _rejection(name, facts, pod)


def pod_spec_of(template: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = template.get("spec")
    return spec if isinstance(spec, dict) else {}


def placement_key(spec: Mapping[str, Any]) -> bytes:
    """What the node filters read of a pod spec, as a key: equal keys, equal answers for the same nodes."""
    affinity = spec.get("affinity") if isinstance(spec.get("affinity"), dict) else {}
    node_affinity = (affinity or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(
        node_affinity, dict) else None
    parts = (spec.get("nodeSelector"), required, spec.get("tolerations"), spec.get("nodeName"))
    return orjson.dumps(parts, option=orjson.OPT_SORT_KEYS, default=str)


@dataclass(frozen=True, slots=True)
class _PodConstraints:
    """What the filters read of the pod."""

    tolerations: list[dict[str, Any]]
    node_name: str | None
    selector: Mapping[str, Any]
    terms: list[Mapping[str, Any]] | None


def _rejection(
    name: str,
    facts: Mapping[str, Any],
    pod: _PodConstraints,
) -> str | None:
    """The first of the scheduler's filters (module docstring) that rejects the node, as a phrase."""
    if facts.get("unschedulable") and not any(tolerates(t, UNSCHEDULABLE_TAINT) for t in pod.tolerations):
        return "cordoned"
    if pod.node_name and pod.node_name != name:
        return f"not the requested node {pod.node_name}"
    for taint in facts.get("taints") or []:
        if taint.get("effect") in _REJECTING_EFFECTS and not any(tolerates(t, taint) for t in pod.tolerations):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"with untolerated taint {taint.get('key')}{value}:{taint.get('effect')}"
    labels = facts.get("labels") or {}
    for key, value in pod.selector.items():
        if labels.get(key) != value:
            return f"without label {key}={value}"
    if pod.terms is not None and not any(term_matches(term, name, labels) for term in pod.terms):
        return "outside the required node affinity"
    return None


_FILTER_PHRASES = ("cordoned", "not the requested node", "with untolerated taint", "without label", "outside")


def _filter_rank(reason: str) -> int:
    """Where the filter behind a reason runs (ties in a description are listed in the scheduler's order)."""
    return next((rank for rank, phrase in enumerate(_FILTER_PHRASES) if reason.startswith(phrase)), len(
        _FILTER_PHRASES))


def required_terms(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The required nodeSelectorTerms, or None when there are none (no constraint: every node passes)."""
    affinity = pod_spec.get("affinity") or {}
    required = ((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")) or {}
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    return [t for t in terms if isinstance(t, dict)] if isinstance(terms, list) else None


def term_matches(term: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> bool:
    """A term with neither expressions nor fields matches no node (as in the scheduler)."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return all(_requirement(r, labels) for r in expressions) and all(
        _requirement(r, {"metadata.name": name}) for r in fields
    )


def _requirement(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = requirement.get("key"), requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    present = key in labels
    value = labels.get(str(key))
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            label, bound = int(str(value)), int(values[0])
        except ValueError:
            return False
        return label > bound if operator == "Gt" else label < bound
    return False


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """corev1 Toleration.ToleratesTaint: effect (empty: all), key (empty with Exists: all), operator."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")
