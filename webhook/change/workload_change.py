"""One workload judged before and after a policy change: what the policies write on it in each case, whether
that differs, and whether its pods would still have somewhere to run."""

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from webhook.change.gang_fit import gang_shortfalls
from webhook.change.rollout import Rollout
from webhook.change.spot_classes import class_strandings, share_classes
from webhook.change.stranding import why_nowhere
from webhook.cluster.reports.compliance import Verdict
from webhook.gang.facts import GangFacts
from webhook.placement.node_fit import Nodes
from webhook.policy.snapshot import PolicySnapshot
from webhook.support.typing import JSONObject, JSONPatch, as_map
from webhook.workloads import WorkloadTable


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the policies make of one workload."""

    patch: JSONPatch
    rules: tuple[str, ...]
    """The rules that select it (`policy/rule`), whether or not they change it."""
    errors: tuple[str, ...] = ()
    refused: str | None = None


def verdict_outcome(verdict: Verdict) -> Outcome:
    return Outcome(list(verdict.patch),
                   tuple(f"{r.policy}/{r.rule}" for r in verdict.results if r.result in ("pass", "fail") and r.rule),
                   tuple(f"{r.policy}/{r.rule}: {r.message}" for r in verdict.results if r.result == "error"),
                   verdict.refused)


@dataclass(slots=True)
class WorkloadChange:
    title: str
    before: Outcome
    after: Outcome
    resource: JSONObject = field(default_factory=dict)
    """The workload as an ObjectReference (apiVersion, kind, namespace, name), for `-o json`."""
    source: str = ""
    """Where the workload comes from: a manifest's `file:line`, empty for a live one."""
    rollout: Rollout | None = None
    """Whether `drift --apply` would start a rollout (live workloads only)."""
    stranded: list[str] = field(default_factory=list)
    """Why its pods would have nowhere to run after the change, when they had somewhere before."""
    still_stranded: list[str] = field(default_factory=list)
    """Why its pods have nowhere to run, before the change as after."""
    difference: str = ""
    """The object before and after, as a unified diff of their YAML (manifests only)."""

    @property
    def rules_gone(self) -> list[str]:
        return [rule for rule in self.before.rules if rule not in self.after.rules]

    @property
    def rules_new(self) -> list[str]:
        return [rule for rule in self.after.rules if rule not in self.before.rules]


def changed(before: Outcome, after: Outcome) -> bool:
    return (before.patch != after.patch or set(before.rules) != set(after.rules) or before.errors != after.errors
            or before.refused != after.refused)


@dataclass(frozen=True, slots=True)
class Placing:
    """What the placement checks need besides the object: the cluster's nodes (None: not known, nothing is
    checked), the snapshot and workload table the spot classes are decided with."""

    nodes: Nodes | None
    workloads: WorkloadTable


def nowhere(obj: JSONObject, outcome: Outcome, *, namespace: str, gang: GangFacts | None, snapshot: PolicySnapshot,
            placing: Placing) -> list[str]:
    """Why the pods of `obj` (a workload with the policies' patch applied) would have nowhere to run: per
    template, then its gang, then each spot-share class; empty when they have somewhere, or nodes are unknown."""
    nodes = placing.nodes
    if nodes is None:
        return []
    templates = template_views(obj, placing.workloads)
    several = len(templates) > 1
    found = []
    for name, template in templates.items():
        why = why_nowhere(as_map(template.get("spec")), nodes)
        if why is not None:
            found.append(f"{name}: {why}" if several and name else why)
    if found:
        return found
    found = gang_shortfalls(gang, {name: as_map(t.get("spec")) for name, t in templates.items()}, nodes)
    classes = share_classes(snapshot, outcome.rules)
    for name, template in templates.items() if classes else ():
        found.extend(f"{name}: {why}" if several and name else why
                     for why in class_strandings(template, classes, namespace=namespace, snapshot=snapshot,
                                                    workloads=placing.workloads, nodes=nodes))
    return found


def template_views(obj: JSONObject, workloads: WorkloadTable) -> dict[str, Mapping[str, Any]]:
    """Each pod template of a workload (`{metadata, spec}`; a Pod is its own), by template name."""
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    kind = workloads.lookup(group, str(obj.get("kind") or ""))
    if kind is None:
        return {}
    views: dict[str, Mapping[str, Any]] = {}
    for slot in kind.templates(obj):
        raw = slot.read(obj)
        if raw is not None:
            views[slot.name] = slot.view(obj, raw)
    return views


def yaml_difference(before: JSONObject, after: JSONObject, names: Sequence[str] = ("today", "after")) -> str:
    """A unified diff of two objects' YAML, with three lines of context."""
    old = yaml.safe_dump(before, sort_keys=False).splitlines()
    new = yaml.safe_dump(after, sort_keys=False).splitlines()
    return "\n".join(difflib.unified_diff(old, new, names[0], names[1], lineterm=""))
