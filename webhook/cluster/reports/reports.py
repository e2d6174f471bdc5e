"""PolicyReports in the Policy Working Group's format (`wgpolicyk8s.io/v1alpha2`), as Kyverno, the Trivy
operator and Policy Reporter read them.

One `PolicyReport` named `placer` per namespace holds one result per workload and rule
(`webhook.cluster.reports.compliance`):
policy, rule, result, message, resources (the workload), `source: placer`, and the time the result was first
found. One `ClusterPolicyReport` named `placer` summarises each rule over the whole cluster. The schema is
the one deploy/components/policy-reports installs (the Policy WG's v1alpha2 CRDs:
https://github.com/kubernetes-sigs/wg-policy-prototypes/tree/master/policy-report).

A report is written only when its content changed: a workload's results keep the time they were first
found while they stay the same, so re-evaluating an unchanged cluster writes nothing. Of a report written,
only a digest is kept.
"""

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.cluster.client.api import ApiError, KubeApi
from webhook.cluster.reports.compliance import Verdict
from webhook.cluster.reports.results import RESULTS
from webhook.support.typing import JSONObject

log = logging.getLogger(__name__)

GROUP = "wgpolicyk8s.io"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
REPORT_NAME = "placer"
SOURCE = "placer"
MANAGED_BY = {"app.kubernetes.io/managed-by": "placer"}
MESSAGE_LIMIT = 512
"""Characters of a result's message kept in a report (the full patch is `kubectl placer drift`'s)."""
REPORT_BUDGET = 900 * 1024
"""Bytes a report may take. etcd refuses objects over 1.5 MiB by default (`--max-request-bytes`, etcd's
"System limits": https://etcd.io/docs/v3.5/dev-guide/limit/); above the budget `pass` results are left out
(still counted in the summary)."""
LEFT_OUT_ANNOTATION = "placer.dev/results-left-out"



def reports_path(namespace: str | None = None) -> str:
    if namespace is None:
        return f"/apis/{API_VERSION}/clusterpolicyreports"
    return f"/apis/{API_VERSION}/namespaces/{namespace}/policyreports"


def namespace_report(namespace: str, judged: Iterable[tuple[Verdict, float]]) -> JSONObject:
    """The namespace's PolicyReport: one result per workload and rule, with summary counts. Each verdict comes
    with the time its results were first found (they keep it while they stay the same)."""
    results: list[JSONObject] = []
    for verdict, found in sorted(judged, key=lambda item: (item[0].workload.kind, item[0].workload.name)):
        resource = verdict.workload.as_report_resource()
        for rule in verdict.results:
            message = rule.message if len(rule.message) <= MESSAGE_LIMIT else rule.message[:MESSAGE_LIMIT - 1] + "…"
            results.append({
                "policy": rule.policy, "rule": rule.rule, "result": rule.result, "message": message,
                "resources": [resource], "source": SOURCE, "scored": True,
                "timestamp": {"seconds": int(found), "nanos": 0},
            })
    summary = {name: sum(1 for result in results if result["result"] == name) for name in RESULTS}
    report: JSONObject = {
        "apiVersion": API_VERSION, "kind": "PolicyReport",
        "metadata": {"name": REPORT_NAME, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "scope": {"apiVersion": "v1", "kind": "Namespace", "name": namespace},
        "summary": {**summary, "warn": 0}, "results": results,
    }
    return within_budget(report)


RuleCounts = dict[tuple[str, str], dict[str, int]]
"""Per (policy, rule): how many results of each kind."""


def rule_counts(report: Mapping[str, Any]) -> RuleCounts:
    """What the cluster report needs of a namespace's report (kept instead of the report itself). Counted from
    the summary's side too: `pass` results left out of a report over budget still count."""
    counts: RuleCounts = {}
    for result in report["results"]:
        per_rule = counts.setdefault((result["policy"], result["rule"]), dict.fromkeys(RESULTS, 0))
        per_rule[result["result"]] += 1
    return counts


def within_budget(report: JSONObject) -> JSONObject:
    """The report, without its `pass` results if it would not fit in `REPORT_BUDGET` (summary unchanged)."""
    if len(json.dumps(report)) <= REPORT_BUDGET:
        return report
    kept = [result for result in report["results"] if result["result"] != "pass"]
    left_out = len(report["results"]) - len(kept)
    metadata = {**report["metadata"], "annotations": {LEFT_OUT_ANNOTATION: f"{left_out} pass results"}}
    return {**report, "metadata": metadata, "results": kept}


def cluster_report(namespaced: Mapping[str, RuleCounts]) -> JSONObject:
    """The ClusterPolicyReport: per rule, how its results add up over every namespace (error beats fail beats
    pass beats skip), and the cluster's summary counts."""
    per_rule: RuleCounts = {}
    namespaces_failing: dict[tuple[str, str], int] = {}
    for counts in namespaced.values():
        for key, per_namespace in counts.items():
            total = per_rule.setdefault(key, dict.fromkeys(RESULTS, 0))
            for name, count in per_namespace.items():
                total[name] += count
            if per_namespace["fail"] or per_namespace["error"]:
                namespaces_failing[key] = namespaces_failing.get(key, 0) + 1
    results = []
    for (policy, rule), totals in sorted(per_rule.items()):
        worst = next(name for name in ("error", "fail", "pass", "skip") if totals[name])
        message = (f"{totals['fail']} workloads out of step, {totals['error']} with errors, {totals['pass']} in "
                   f"step, {totals['skip']} skipped; {namespaces_failing.get((policy, rule), 0)} namespaces to "
                   "look at")
        results.append({"policy": policy, "rule": rule, "result": worst, "message": message, "source": SOURCE,
                        "scored": True, "properties": {name: str(count) for name, count in totals.items()}})
    summary = {name: sum(totals[name] for totals in per_rule.values()) for name in RESULTS}
    return {"apiVersion": API_VERSION, "kind": "ClusterPolicyReport",
            "metadata": {"name": REPORT_NAME, "labels": dict(MANAGED_BY)},
            "summary": {**summary, "warn": 0}, "results": results}


def content(report: Mapping[str, Any]) -> bytes:
    """A digest of what a write would change: everything but server-set metadata."""
    metadata = {key: report["metadata"].get(key) for key in ("name", "namespace", "labels", "annotations")}
    text = json.dumps({**report, "metadata": metadata}, sort_keys=True).encode()
    return hashlib.blake2b(text, digest_size=16).digest()


class ReportWriter:
    """Creates or replaces Placer's reports, only when their content changed since this writer last wrote
    (or read) them."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api
        self._written: dict[str | None, tuple[bytes, str]] = {}
        """By namespace (None: the cluster report): (digest of the content, resourceVersion)."""
        self.writes = 0

    def write(self, namespace: str | None, report: JSONObject) -> bool:
        """True when the API server was written to."""
        wanted = content(report)
        known = self._written.get(namespace)
        if known is not None and known[0] == wanted:
            return False
        path = reports_path(namespace)
        try:
            version = known[1] if known is not None else None
            if known is None:
                stored = self._read(path)
                if stored is not None and content(stored) == wanted:
                    self._written[namespace] = (wanted, str(stored["metadata"].get("resourceVersion") or ""))
                    return False
                version = str(stored["metadata"].get("resourceVersion") or "") if stored is not None else None
            if version is None:
                written = self._api.create(path, report)
            else:
                body = {**report, "metadata": {**report["metadata"], "resourceVersion": version}}
                written = self._api.replace(f"{path}/{REPORT_NAME}", body)
        except ApiError as error:
            self._written.pop(namespace, None)  # read it again next time (409: someone else wrote it)
            log.warning("policy report of %s not written: %s", namespace or "the cluster", error)
            return False
        self._written[namespace] = (wanted, str(written.get("metadata", {}).get("resourceVersion") or ""))
        self.writes += 1
        return True

    def _read(self, path: str) -> JSONObject | None:
        try:
            return self._api.get(f"{path}/{REPORT_NAME}")
        except ApiError as error:
            if error.code == 404:
                return None
            raise

    def written(self, namespace: str | None) -> bool:
        return namespace in self._written

    def forget(self, namespace: str) -> None:
        self._written.pop(namespace, None)
