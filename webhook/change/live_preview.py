"""`kubectl placer preview`'s judgement: each live workload judged under the policies of today and of after
the change; for each whose result changes, whether `drift --apply` would roll it out and whether its pods
would still have somewhere to run. Pure: the command reads the cluster and hands the objects in."""

import dataclasses
from collections.abc import Mapping, Sequence

import jsonpatch

from webhook.change.judging import Judged, judge, write_body
from webhook.change.policy_change import PolicyChange
from webhook.change.report import ChangeReport
from webhook.change.rollout import rollout
from webhook.change.workload_change import Placing, WorkloadChange, changed, nowhere, verdict_outcome
from webhook.cluster.client.workload_lists import Served
from webhook.placement.node_fit import Nodes
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.support.typing import JSONObject
from webhook.workloads import all_kinds, controller_reference, default_workload_table


def preview(listed: Sequence[tuple[Served, JSONObject]], namespaces: Mapping[str, NamespaceInfo],
            change: PolicyChange, nodes: Nodes | None) -> ChangeReport:
    """The report of `change` over the `listed` workloads (in `namespaces`), with the cluster's `nodes` (None:
    not readable, no stranding is checked)."""
    before, after = (_serving(snapshot, namespaces) for snapshot in (change.before, change.after))
    report = ChangeReport(change.describe(), "workload", 0)
    if nodes is None:
        report.notes.append("the nodes cannot be listed with these credentials: stranding is not checked")
    placing = Placing(nodes, default_workload_table())
    kinds = frozenset(kind.kind for kind in all_kinds())
    for old, new in zip(judge(listed, before, {}), judge(listed, after, {}), strict=True):
        if _made_by_a_workload(old, kinds):
            continue  # a Deployment's ReplicaSet, a controller's Pod: judged on its owner, not counted
        report.judged += 1
        outcome_old, outcome_new = verdict_outcome(old.verdict), verdict_outcome(new.verdict)
        if not changed(outcome_old, outcome_new):
            continue
        item = WorkloadChange(new.verdict.workload.title, outcome_old, outcome_new,
                              new.verdict.workload.as_report_resource(),
                              rollout=rollout(new.served.kind.kind, new.stored, write_body(new)))
        now = _nowhere(new, after, placing)
        if now:
            if _nowhere(old, before, placing):
                item.still_stranded = now
            else:
                item.stranded = now
        report.changes.append(item)
    return report


def _made_by_a_workload(item: Judged, kinds: frozenset[str]) -> bool:
    """A Pod with a controller, or a workload whose controller is itself a workload (of `kinds`: a Deployment's
    ReplicaSet, a CronJob's Job): what the owner's template makes, judged as the owner."""
    owner = controller_reference(item.stored)
    return owner is not None and (item.served.kind.kind == "Pod" or str(owner.get("kind")) in kinds)


def _serving(snapshot: PolicySnapshot, namespaces: Mapping[str, NamespaceInfo]) -> PolicySnapshot:
    return dataclasses.replace(snapshot, namespaces={**snapshot.namespaces, **namespaces})


def _nowhere(item: Judged, snapshot: PolicySnapshot, placing: Placing) -> list[str]:
    """Why the workload's pods, as the policies of `snapshot` leave it, would have nowhere to run."""
    verdict = item.verdict
    obj = jsonpatch.apply_patch(item.stored, verdict.patch) if verdict.patch else item.stored
    return nowhere(obj, verdict_outcome(verdict), namespace=verdict.workload.namespace, gang=verdict.gang,
                   snapshot=snapshot, placing=placing)
