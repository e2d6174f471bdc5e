"""A warning when a gang can never start: its pods need more than the nodes that may host them can ever hold.

A gang scheduler starts a gang only when all its members (the group size) can run at once. A policy that
labels a 16-pod training job for coscheduling and pins it to a pool of two 8-GPU nodes, each pod asking for
2 GPUs, makes a gang that waits forever. With the cluster's nodes known (`--kube`), each member template
Placer labelled is checked: the nodes that pass the scheduler's node filters for it (`node_fit`), and how
many of its pods each of them could hold if it ran nothing else (allocatable ÷ per-pod requests, for every
requested resource and the node's pod count). When that total is below the members the gang needs, the
response carries a warning naming the gang, the template, the per-pod requests and the capacity — never a
denial. What runs on the nodes today is not counted: this is "can never", not "cannot now".

A gang of several templates whose size is below their total (a `minAvailable` that some mix of members
satisfies) is not checked: which members the scheduler would start is its own choice.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from webhook.actions.metadata import rules_applied
from webhook.engine.mutate import Mutation
from webhook.gang.facts import GangFacts, MemberTemplate
from webhook.gang.flavours import FLAVOURS
from webhook.gang.members import waits_for_members
from webhook.gang.native import NATIVE
from webhook.gang.native_operators import one_template_per_gang
from webhook.placement.node_fit import NodeAnswers, Nodes, node_filter, placement_key, pod_spec_of
from webhook.pods.quantity import InvalidQuantityError, parse_quantity
from webhook.policy.snapshot import PolicySnapshot

GANG_ACTIONS = frozenset({"add-gang-labels"})
CACHED_ANSWERS = 256
_BYTES = frozenset({"memory", "ephemeral-storage"})



@dataclass(frozen=True, slots=True)
class Capacity:
    hosts: int
    """Nodes that pass the node filters for the template."""
    pods: int
    """How many of its pods those nodes could hold, each running nothing else."""


class GangCapacityCheck:
    def __init__(self) -> None:
        self._answers: NodeAnswers[Capacity] = NodeAnswers(CACHED_ANSWERS)
        """Per (placement constraints, per-pod requests): the capacity, until the nodes change."""

    def warnings(self, mutation: Mutation, snapshot: PolicySnapshot, nodes: Nodes, version: int) -> list[str]:
        """One warning per member template of the admission's gang that `nodes` (at `version`) can never hold."""
        facts = mutation.gang
        if facts is None:
            return []
        group, needs = gang_needs(facts)
        found = []
        for member, needed in needs:
            placed = mutation.placed.get(member.name)
            if placed is None:
                continue  # Placer did not label this template: not its gang to judge
            spec = pod_spec_of(placed[1])
            key = (placement_key(spec), tuple(sorted(member.requests.items())))
            capacity = self._answers.get(version, key, partial(_capacity, spec, member.requests, nodes))
            if capacity.pods >= needed:
                continue
            where = f" of {member.name}" if member.name else ""
            rules = applied_rules(placed[1], snapshot, GANG_ACTIONS)
            found.append(  # the rule first: a warning cut to the API server's length keeps it
                (f"{', '.join(rules)}: " if rules else "")
                + f"gang {group}: {needed} pods{where} of {describe_requests(member.requests)} never fit, "
                f"{capacity.hosts} matching nodes hold {capacity.pods}"
            )
        return found


def _capacity(spec: Mapping[str, Any], requests: Mapping[str, float], nodes: Nodes) -> Capacity:
    rejection = node_filter(spec)
    hosts = pods = 0
    for name, node in nodes:
        if rejection(name, node) is None:
            hosts += 1
            pods += pods_that_fit(requests, node.get("allocatable") or {})
    return Capacity(hosts, pods)


def applied_rules(template: Mapping[str, Any], snapshot: PolicySnapshot, actions: frozenset[str]) -> list[str]:
    """The rules that applied to this template (its `placer.dev/applied` annotation) with one of `actions`."""
    by_rule = {f"{p.name}/{r.name}": r.action.name for p in snapshot.policies for r in p.rules}
    return [f"rule {rule}" for rule in rules_applied(template) if by_rule.get(rule) in actions]


def gang_needs(facts: GangFacts) -> tuple[str, list[tuple[MemberTemplate, int]]]:
    """The gang's group name, and how many pods of each member template it needs at once."""
    (flavour, _, fixed), (group, size) = next(iter(facts.derived.items()))
    wanted = int(size.value) if size is not None and size.value.isdigit() else None
    if flavour == NATIVE and facts.per_gang is not None:  # one native gang per replica: one replica's pods
        per_gang = facts.per_gang
        needs = [(template, per_gang[template.name]) for template in facts.members if per_gang.get(template.name)]
        if isinstance(fixed, int) and one_template_per_gang(facts.kind):  # minAvailable sizes each gang
            needs = [(template, fixed) for template, _ in needs]
        elif isinstance(fixed, int) and fixed < sum(needed for _, needed in needs):
            return group.value, []  # which members start is the scheduler's choice
        return group.value, needs
    if facts.counted is not None and facts.kind != "Pod" and waits_for_members(FLAVOURS[flavour]):
        counted = facts.counted  # only the pods made together (`webhook.gang.members`): a Spark app's executors
        needs = [(template, counted[template.name]) for template in facts.members if counted.get(template.name)]
        if isinstance(fixed, int) and fixed < sum(needed for _, needed in needs):
            return group.value, []  # which members start is the scheduler's choice
        return group.value, needs
    if len(facts.members) == 1:  # one template: the gang's size is how many of its pods must run at once
        needed = wanted if wanted is not None else facts.size
        return group.value, [(facts.members[0], needed)] if needed else []
    members = [template for template in facts.members if template.members]
    total = sum(template.members or 0 for template in members)
    if wanted is not None and wanted < total:
        return group.value, []  # which members start is the scheduler's choice
    return group.value, [(template, template.members or 0) for template in members]


def pods_that_fit(requests: Mapping[str, float], allocatable: Mapping[str, str]) -> int:
    """How many pods with `requests` a node with `allocatable` holds when it runs nothing else: the smallest
    quotient over the requested resources, and the node's pod count (every pod takes one)."""
    fits = _allocatable(allocatable, "pods")
    count = math.inf if fits is None else math.floor(fits)
    for name, need in requests.items():
        if need <= 0:
            continue
        have = _allocatable(allocatable, name)
        if have is None:
            return 0  # the node does not offer it at all (a GPU on a CPU node)
        count = min(count, math.floor(have / need + 1e-9))
    return int(count) if count != math.inf else 1_000_000


def _allocatable(allocatable: Mapping[str, str], name: str) -> float | None:
    raw = allocatable.get(name)
    if raw is None:
        return None
    try:
        return parse_quantity(raw)
    except InvalidQuantityError:
        return None


def describe_requests(requests: Mapping[str, float]) -> str:
    parts = []
    for name, value in sorted(requests.items()):
        if value <= 0:
            continue
        if name in _BYTES:
            parts.append(f"{name} {value / 2**30:g}Gi")
        else:
            parts.append(f"{name} {value:g}")
    return ", ".join(parts) or "no resources"
