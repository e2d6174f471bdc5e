"""PolicyReports in the Policy Working Group's format (`wgpolicyk8s.io/v1alpha2`), as Kyverno, the Trivy
operator and Policy Reporter read them.

One `PolicyReport` per workload with results (`webhook.cluster.reports.compliance`), in the workload's
namespace, named by its uid, with the workload as its `scope` and as its owner (the garbage collector deletes
it with the workload); one result per rule: policy, rule, result, message, resources (the workload),
`source: placer`, and the time the result was first found. This is how Kyverno lays out its reports since
1.10 (one per resource, named by its uid, the resource as `scope`:
https://kyverno.io/docs/policy-reports/), and how the report CRDs' printer columns (`.scope.kind`,
`.scope.name`) show them. One `ClusterPolicyReport` named `placer` summarises each rule over the whole cluster.
The schema is the one deploy/components/policy-reports installs (the Policy WG's v1alpha2 CRDs:
https://github.com/kubernetes-sigs/wg-policy-prototypes/tree/master/policy-report).

Bounded by construction: a report holds one workload's results (one per rule that matches it, each message
cut at 512 characters: 4.8 KB for 10 rules that all fail), never more than `REPORT_BUDGET`, whatever the
size of its namespace; the cluster report one result per rule. One report per namespace held 22 MB for 5,000
Deployments and 10 rules, which the API server refuses (etcd's 1.5 MiB request limit).

A report is written only when its content changed: the time a result was first found is not part of the
content, so judging an unchanged cluster again (after a restart too) writes nothing
(`webhook.cluster.reports.writer`).
"""

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.cluster.reports.compliance import Verdict, WorkloadRef
from webhook.cluster.reports.results import RESULTS, RuleResult
from webhook.support.typing import JSONObject

GROUP = "wgpolicyk8s.io"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
CLUSTER_REPORT_NAME = "placer"
LEGACY_REPORT_NAME = "placer"
"""The one PolicyReport per namespace that Placer wrote before reports were per workload: deleted."""
SOURCE = "placer"
MANAGED_BY = {"app.kubernetes.io/managed-by": "placer"}
MANAGED_BY_SELECTOR = "app.kubernetes.io/managed-by=placer"
MESSAGE_LIMIT = 512
"""Characters of a result's message kept in a report (the full patch is `kubectl placer drift`'s)."""
REPORT_BUDGET = 256 * 1024
"""Bytes a report may take: far below what the API server accepts (etcd refuses requests over 1.5 MiB by
default, `--max-request-bytes`, etcd's "System limits": https://etcd.io/docs/v3.5/dev-guide/limit/). A
workload matched by so many rules that its results pass it loses its `pass` results first, then the results
that do not fit (all still counted in the summary, and said in an annotation)."""
LEFT_OUT_ANNOTATION = "placer.dev/results-left-out"

Key = tuple[str, str] | None
"""A report: (namespace, name), or None for the cluster report."""


def reports_path(namespace: str | None = None) -> str:
    if namespace is None:
        return f"/apis/{API_VERSION}/clusterpolicyreports"
    return f"/apis/{API_VERSION}/namespaces/{namespace}/policyreports"


def report_name(workload: WorkloadRef) -> str:
    """The workload's uid; one without (never from the API server) gets a digest of its kind and name."""
    if workload.uid:
        return workload.uid
    digest = hashlib.blake2b(f"{workload.kind}/{workload.name}".encode(), digest_size=8).hexdigest()
    return f"placer-{workload.kind.lower()}-{digest}"


def report_key(workload: WorkloadRef) -> tuple[str, str]:
    return workload.namespace, report_name(workload)


def workload_report(verdict: Verdict, found: float) -> JSONObject:
    """The workload's PolicyReport: one result per rule that matches it, with summary counts; `found` is when
    its results were first found (they keep it while they stay the same)."""
    workload = verdict.workload
    resource = workload.as_report_resource()
    results = [_result(rule, resource, found) for rule in verdict.results]
    metadata: JSONObject = {"name": report_name(workload), "namespace": workload.namespace,
                            "labels": dict(MANAGED_BY)}
    if workload.uid:
        metadata["ownerReferences"] = [{"apiVersion": workload.api_version, "kind": workload.kind,
                                        "name": workload.name, "uid": workload.uid}]
    report: JSONObject = {
        "apiVersion": API_VERSION, "kind": "PolicyReport", "metadata": metadata, "scope": resource,
        "summary": summary_of(results), "results": results,
    }
    return within_budget(report)


def _result(rule: RuleResult, resource: JSONObject, found: float) -> JSONObject:
    message = rule.message if len(rule.message) <= MESSAGE_LIMIT else rule.message[:MESSAGE_LIMIT - 1] + "…"
    result: JSONObject = {"policy": rule.policy, "rule": rule.rule, "result": rule.result, "message": message,
                          "resources": [resource], "source": SOURCE, "scored": True,
                          "timestamp": {"seconds": int(found), "nanos": 0}}
    if rule.properties:
        result["properties"] = dict(rule.properties)
    return result


def summary_of(results: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    counted = Counter(result["result"] for result in results)
    return {name: counted[name] for name in RESULTS}


def within_budget(report: JSONObject, budget: int = REPORT_BUDGET) -> JSONObject:
    """The report within `budget` bytes of JSON: without its `pass` results if it would not fit, then without
    the results that still do not (in order); the summary still counts them all."""
    if len(encode(report)) <= budget:
        return report
    results = report["results"]
    kept = [result for result in results if result["result"] != "pass"]
    shell = {**report, "metadata": {**report["metadata"], "annotations": {LEFT_OUT_ANNOTATION: "x" * 64}},
             "results": []}
    room = budget - len(encode(shell))
    fitting = []
    for result in kept:
        room -= len(encode(result)) + 1
        if room < 0:
            break
        fitting.append(result)
    passes = len(results) - len(kept)
    others = len(kept) - len(fitting)
    said = f"{passes} pass results" + (f", {others} other results" if others else "")
    return {**report, "metadata": {**report["metadata"], "annotations": {LEFT_OUT_ANNOTATION: said}},
            "results": fitting}


def encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def content(report: Mapping[str, Any]) -> bytes:
    """A digest of what a write would change: everything but server-set metadata and the time each result was
    first found (a restart finds the same results again at another time, which is no change)."""
    metadata = {key: report["metadata"].get(key) for key in ("name", "namespace", "labels", "annotations",
                                                             "ownerReferences")}
    results = [{key: value for key, value in result.items() if key != "timestamp"}
               for result in report.get("results") or []]
    text = json.dumps({**report, "metadata": metadata, "results": results}, sort_keys=True).encode()
    return hashlib.blake2b(text, digest_size=16).digest()


Counted = tuple[tuple[str, str, str], ...]
"""A workload's results as counted: (policy, rule, result) each."""


def counted(results: Iterable[RuleResult]) -> Counted:
    return tuple((result.policy, result.rule, result.result) for result in results)


class RuleTally:
    """Per rule, how its results add up over every workload, and in how many namespaces it fails: kept by
    difference as workloads' results change, so the cluster report costs what changed, not every workload."""

    def __init__(self) -> None:
        self._totals: dict[tuple[str, str], Counter[str]] = {}
        self._failing: dict[tuple[str, str], Counter[str]] = {}
        """Per rule, per namespace: its workloads that fail the rule or error on it."""
        self.changed = False

    def move(self, namespace: str, before: Counted, after: Counted) -> None:
        """A workload of `namespace` that counted `before` counts `after` now."""
        if before == after:
            return
        self.changed = True
        for sign, results in ((-1, before), (1, after)):
            for policy, rule, result in results:
                key = (policy, rule)
                _add(self._totals, key, result, sign)
                if result in ("fail", "error"):
                    _add(self._failing, key, namespace, sign)

    def report(self) -> JSONObject:
        """The ClusterPolicyReport: per rule, how its results add up over every workload (error beats fail
        beats pass beats skip), and the cluster's summary counts."""
        results = []
        for (policy, rule), counts in sorted(self._totals.items()):
            totals = {name: counts[name] for name in RESULTS}
            worst = next(name for name in ("error", "fail", "warn", "pass", "skip") if totals[name])
            audited = f", {totals['warn']} the Audit rule would change" if totals["warn"] else ""
            message = (f"{totals['fail']} workloads out of step, {totals['error']} with errors, {totals['pass']} "
                       f"in step, {totals['skip']} skipped{audited}; "
                       f"{len(self._failing.get((policy, rule), ()))} namespaces to look at")
            results.append({"policy": policy, "rule": rule, "result": worst, "message": message, "source": SOURCE,
                            "scored": True, "properties": {name: str(count) for name, count in totals.items()
                                                          if name != "warn" or count}})
        summary = {name: sum(counts[name] for counts in self._totals.values()) for name in RESULTS}
        return {"apiVersion": API_VERSION, "kind": "ClusterPolicyReport",
                "metadata": {"name": CLUSTER_REPORT_NAME, "labels": dict(MANAGED_BY)},
                "summary": summary, "results": results}


def _add(table: dict[tuple[str, str], Counter[str]], key: tuple[str, str], name: str, sign: int) -> None:
    """Count `name` under `key` up or down, forgetting what comes down to nothing."""
    counts = table.setdefault(key, Counter())
    counts[name] += sign
    if counts[name] <= 0:
        del counts[name]
        if not counts:
            del table[key]
