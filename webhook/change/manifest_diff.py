"""`placer diff`'s judgement: manifests admitted offline (as `placer apply` does) under the old and the new
policies; per manifest whose result changes, what each writes and the difference of the objects. Node
manifests among the files are the cluster's nodes: with them, whether the pods would still have somewhere to
run is checked as `kubectl placer preview` checks it."""

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from webhook.admission.offline import ApplyReport, ManifestResult, apply_manifests, rule_errors
from webhook.change.report import ChangeReport
from webhook.change.workload_change import Outcome, Placing, WorkloadChange, changed, nowhere, yaml_difference
from webhook.placement.node_fit import Nodes
from webhook.policy.snapshot import PolicySnapshot
from webhook.policy.sources.documents import ManifestError, expand_lists, read_documents
from webhook.policy.state.node_facts import node_facts
from webhook.support.typing import JSONObject
from webhook.workloads import default_workload_table


def diff_manifests(old: PolicySnapshot, new: PolicySnapshot, manifests: Sequence[str], *,
                   namespace_labels: Mapping[str, str], change: str) -> tuple[ChangeReport, list[str]]:
    """The report, and the problems reading the manifests (`file: why`)."""
    reports = [apply_manifests(policy_paths=(), manifest_paths=manifests, namespace_labels=namespace_labels,
                               snapshot=snapshot) for snapshot in (old, new)]
    nodes = manifest_nodes(manifests)
    workloads = default_workload_table()
    placing = Placing(nodes or None, workloads)
    pairs = [(a, b) for a, b in zip(reports[0].results, reports[1].results, strict=True)
             if workloads.lookup(str(a.original.get("apiVersion") or "").rpartition("/")[0],
                                 str(a.original.get("kind") or "")) is not None]
    report = ChangeReport(change, "manifest", len(pairs))
    if not nodes:
        report.notes.append("no Node among the manifests: whether the pods have somewhere to run is not checked")
    for before, after in pairs:
        outcome_old, outcome_new = _outcome(before), _outcome(after)
        if not changed(outcome_old, outcome_new):
            continue
        item = WorkloadChange(before.title, outcome_old, outcome_new, _reference(before), source=before.origin,
                              difference=yaml_difference(before.mutated, after.mutated,
                                                         ("old policies", "new policies")))
        now = _nowhere(after, reports[1], outcome_new, placing)
        if now:
            if _nowhere(before, reports[0], outcome_old, placing):
                item.still_stranded = now
            else:
                item.stranded = now
        report.changes.append(item)
    problems = [problem for problem in reports[1].problems if ": denied: " not in problem]
    return report, list(dict.fromkeys(problems))


def manifest_nodes(paths: Sequence[str]) -> Nodes:
    """The Node objects among the manifests, as the node checks read them (unreadable files: none from them;
    `apply_manifests` reports them)."""
    nodes = []
    for path in paths:
        try:
            documents = expand_lists(read_documents(Path(path).read_text(encoding="utf-8")))
            for document in documents:
                content = document.content
                if isinstance(content, dict) and content.get("kind") == "Node" and content.get("apiVersion") == "v1":
                    nodes.append((str((content.get("metadata") or {}).get("name") or ""), node_facts(content)))
        except (OSError, UnicodeDecodeError, ManifestError):
            continue
    return nodes


def _reference(result: ManifestResult) -> JSONObject:
    metadata = result.original.get("metadata") or {}
    return {"apiVersion": result.original.get("apiVersion"), "kind": result.original.get("kind"),
            "namespace": result.namespace.name, "name": metadata.get("name") or metadata.get("generateName")}


def _outcome(result: ManifestResult) -> Outcome:
    mutation = result.mutation
    matched = (f"{trace.policy}/{trace.rule}" for trace in mutation.traces if trace.outcome in ("applied", "denied"))
    return Outcome(list(mutation.patch), tuple(dict.fromkeys(matched)), tuple(rule_errors(mutation)),
                   mutation.denial)


def _nowhere(result: ManifestResult, report: ApplyReport, outcome: Outcome, placing: Placing) -> list[str]:
    serving = dataclasses.replace(report.snapshot, namespaces={**report.snapshot.namespaces,
                                                               result.namespace.name: result.namespace})
    return nowhere(result.mutated, outcome, namespace=result.namespace.name, gang=result.mutation.gang,
                   snapshot=serving, placing=placing)
