"""A warning when Placer's placement leaves a pod no node to land on (never a denial).

A policy that adds `node-pool: ml` in a cluster with no such node makes pods that sit Pending. With the
cluster's nodes known (`--kube`: the controller publishes them, `webhook.policy.state.node_facts`), each template
Placer changed is checked as the scheduler's node filters would check it (`webhook.placement.node_fit`): when the
template as it came could land somewhere and Placer's version can land nowhere, the response carries a
warning naming the constraint that excludes the nodes and the rules that placed the pod, visible in
`kubectl apply --dry-run=server`. What a pod could not do before Placer touched it is not Placer's to say.

Cost: a template whose placement Placer did not change is not looked at; otherwise the answer (can it land
anywhere?) is cached per set of placement constraints until the nodes change, and finding one node that
fits ends the scan; only an infeasible placement scans every node, once.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.engine.mutate import Mutation
from webhook.placement.gang_capacity import GangCapacityCheck, applied_rules
from webhook.placement.node_fit import Fit, NodeAnswers, Nodes, node_fit, placement_key, pod_spec_of
from webhook.placement.pool_fit import pool_warnings
from webhook.policy.snapshot import PolicySnapshot
from webhook.policy.state.node_facts import NodeFactsReader

PLACING_ACTIONS = frozenset({"add-node-selector", "add-node-affinity", "pin-to-volume-node", "spot-share"})
"""Actions that narrow where a pod may land (tolerations and the rest only widen it or leave it)."""
CACHED_ANSWERS = 1024


@dataclass(frozen=True, slots=True)
class Findings:
    unplaceable: list[str] = field(default_factory=list)
    """A warning per template Placer left with no node to land on."""
    over_capacity: list[str] = field(default_factory=list)
    """A warning per gang member template the nodes that may host it can never hold (`gang_capacity`)."""


class PlacementCheck:
    def __init__(self, nodes: NodeFactsReader) -> None:
        self._nodes = nodes
        self._gangs = GangCapacityCheck()
        self._answers: NodeAnswers[Fit] = NodeAnswers(CACHED_ANSWERS)
        """Per set of placement constraints: one node that fits, or (none fits) why every node does not."""

    def nodes_version(self) -> int:
        """A number that grows whenever the nodes change (one stat of the nodes directory): what an answer
        holding these findings was decided on (`webhook.admission.sibling_cache`)."""
        self._nodes.current()
        return self._nodes.version

    def findings(self, mutation: Mutation, snapshot: PolicySnapshot) -> Findings:
        """What to warn about: templates Placer left with no node, and gangs the nodes can never hold."""
        if not mutation.placed:
            return Findings()
        nodes = self._nodes.current()
        if not nodes:
            return Findings()  # no node known (yet): nothing to say
        version = self._nodes.version
        unplaceable = self.warnings(mutation, snapshot, nodes, version) + pool_warnings(mutation, snapshot, nodes)
        return Findings(unplaceable, self._gangs.warnings(mutation, snapshot, nodes, version))

    def warnings(self, mutation: Mutation, snapshot: PolicySnapshot, nodes: Nodes, version: int) -> list[str]:
        """One warning per template that Placer left with no node to land on."""
        found = []
        for slot, (before, after) in mutation.placed.items():
            after_spec, before_spec = pod_spec_of(after), pod_spec_of(before)
            after_key = placement_key(after_spec)
            if after_key == placement_key(before_spec):
                continue
            fit = self._fit(after_key, after_spec, nodes, version)
            if fit.hosts or not self._fit(placement_key(before_spec), before_spec, nodes, version).hosts:
                continue  # some node fits, or none did before Placer either
            rules = applied_rules(after, snapshot, PLACING_ACTIONS)
            where = f" of {slot}" if slot else ""
            what = fit.describe().replace('its pods', f'the pods{where}', 1)
            # the rule first: a warning cut to the API server's length keeps who placed the pods
            found.append(f"{', '.join(rules)}: {what}" if rules
                         else f"{what} (none of the applied rules narrows placement)")
        return found

    def _fit(self, key: bytes, spec: Mapping[str, Any], nodes: Nodes, version: int) -> Fit:
        """Stops at the first node that fits; when none does, the scan has counted why each one does not."""
        return self._answers.get(version, key, lambda: node_fit(spec, nodes, any_host=True))
