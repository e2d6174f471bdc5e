"""A warning when Placer's placement leaves a pod no node to land on (never a denial).

A policy that adds `node-pool: ml` in a cluster with no such node makes pods that sit Pending. With the
cluster's nodes known (`--kube`: the controller publishes them, `webhook.policy.node_facts`), each template
Placer changed is checked as the scheduler's node filters would check it (`webhook.node_fit`): when the
template as it came could land somewhere and Placer's version can land nowhere, the response carries a
warning naming the constraint that excludes the nodes and the rules that placed the pod, visible in
`kubectl apply --dry-run=server`. What a pod could not do before Placer touched it is not Placer's to say.

Cost: a template whose placement Placer did not change is not looked at; otherwise the answer (can it land
anywhere?) is cached per set of placement constraints until the nodes change, and finding one node that
fits ends the scan; only an infeasible placement scans every node, once.
"""

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import orjson

from webhook.actions.metadata import APPLIED_ANNOTATION
from webhook.engine.mutate import Mutation
from webhook.node_fit import Fit, node_fit
from webhook.policy.node_facts import NodeFactsReader
from webhook.policy.snapshot import PolicySnapshot

PLACING_ACTIONS = frozenset({"add-node-selector", "add-node-affinity"})
"""Actions that narrow where a pod may land (tolerations and the rest only widen it or leave it)."""
CACHED_ANSWERS = 1024


class PlacementCheck:
    def __init__(self, nodes: NodeFactsReader) -> None:
        self._nodes = nodes
        self._answers: OrderedDict[bytes, Fit] = OrderedDict()
        """Per set of placement constraints: one node that fits, or (none fits) why every node does not."""
        self._version = -1

    def warnings(self, mutation: Mutation, snapshot: PolicySnapshot) -> list[str]:
        """One warning per template that Placer left with no node to land on."""
        if not mutation.placed:
            return []
        nodes = self._nodes.current()
        if not nodes:
            return []  # no node known (yet): nothing to say
        if self._nodes.version != self._version:
            self._answers.clear()
            self._version = self._nodes.version
        found = []
        for slot, (before, after) in mutation.placed.items():
            after_spec, before_spec = _spec(after), _spec(before)
            after_key = _constraints(after_spec)
            if after_key == _constraints(before_spec):
                continue
            fit = self._fit(after_key, after_spec, nodes)
            if fit.hosts or not self._fit(_constraints(before_spec), before_spec, nodes).hosts:
                continue  # some node fits, or none did before Placer either
            rules = _placing_rules(after, snapshot) or ["(none of the applied rules narrows placement)"]
            where = f" of {slot}" if slot else ""
            found.append(f"{fit.describe().replace('its pods', f'the pods{where}', 1)}, placed by "
                         f"{', '.join(rules)}")
        return found

    def _fit(self, key: bytes, spec: Mapping[str, Any], nodes: list[tuple[str, Any]]) -> Fit:
        """Stops at the first node that fits; when none does, the scan has counted why each one does not."""
        answer = self._answers.get(key)
        if answer is None:
            answer = self._answers[key] = node_fit(spec, nodes, any_host=True)
            while len(self._answers) > CACHED_ANSWERS:
                self._answers.popitem(last=False)
        return answer


def _spec(template: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = template.get("spec")
    return spec if isinstance(spec, dict) else {}


def _constraints(spec: Mapping[str, Any]) -> bytes:
    """What the node filters read of a pod spec, as a key."""
    affinity = spec.get("affinity") if isinstance(spec.get("affinity"), dict) else {}
    node_affinity = (affinity or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(
        node_affinity, dict) else None
    parts = (spec.get("nodeSelector"), required, spec.get("tolerations"))
    return orjson.dumps(parts, option=orjson.OPT_SORT_KEYS, default=str)


def _placing_rules(template: Mapping[str, Any], snapshot: PolicySnapshot) -> list[str]:
    """The rules that applied to this template and narrow where its pods may land."""
    metadata = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    applied = str(((metadata or {}).get("annotations") or {}).get(APPLIED_ANNOTATION) or "")
    actions = {f"{p.name}/{r.name}": r.action.name for p in snapshot.policies for r in p.rules}
    return [f"rule {rule}" for rule in filter(None, applied.split(",")) if actions.get(rule) in PLACING_ACTIONS]
