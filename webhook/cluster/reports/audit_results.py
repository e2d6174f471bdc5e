"""An Audit policy's results on a workload, in the Policy Working Group's vocabulary.

A PolicyReport result is one of pass, fail, warn, error and skip (the wg-policy `PolicyReport` API,
v1alpha2: `PolicyResult`, https://github.com/kubernetes-sigs/wg-policy-prototypes/tree/master/policy-report).
`fail` is what Placer says of a workload out of step with a policy that serves (drift, a refusal); an Audit
policy serves nothing, so what it would change is `warn`, the result the API keeps for what does not fail a
workload yet needs a look (Kyverno reports a validation policy's audit-mode violations as results of their
own too: https://kyverno.io/docs/policy-reports/). Per audited rule that matches the workload:

- `warn`: the rule would change the workload; the message says how, in words (`audit: would add nodeSelector
  node-pool=gpu`), and the `patch` property holds the rule's part of the policy's would-be JSON Patch (the
  promotion's patch, `webhook.admission.audit`; the whole patch where the rule's part is not told apart:
  gangs, spot shares, node pools), with `enforcement: Audit`;
- `pass`: it matches and would change nothing;
- `warn` too when promoting the policy would deny the workload (the message says why);
- `error`: the rule errors on the workload; `skip`: its action was skipped, or the policy was not evaluated.
"""

import json
from collections.abc import Iterable

from webhook.admission.patch_words import patch_words
from webhook.cluster.reports.results import RuleResult
from webhook.engine.outcome import AuditRecord
from webhook.support.typing import JSONPatch

PATCH_LIMIT = 4096
"""Characters of the would-be patch kept in a result's `patch` property (cut with a marker past it)."""


def audit_results(records: Iterable[AuditRecord]) -> list[RuleResult]:
    """One result per audited rule that matched, the rules of each policy in order."""
    results: list[RuleResult] = []
    for record in records:
        grouped: dict[str, set[str]] = {}
        for trace in record.traces:
            grouped.setdefault(trace.rule, set()).add(trace.outcome)
        for rule, outcomes in grouped.items():
            result = _result(record, rule, outcomes)
            if result is not None:
                results.append(result)
        if record.verdict == "not-evaluated" and not grouped:
            results.append(RuleResult(record.policy, "", "skip", f"audit: not evaluated: {record.detail}"))
    return results


def _result(record: AuditRecord, rule: str, outcomes: set[str]) -> RuleResult | None:
    errors = [trace.detail for trace in record.traces if trace.rule == rule and trace.outcome == "error"]
    if errors:
        return RuleResult(record.policy, rule, "error", "audit: " + "; ".join(dict.fromkeys(errors)))
    if "applied" not in outcomes:
        if "skipped" in outcomes:
            skipped = [trace.detail for trace in record.traces if trace.rule == rule and trace.outcome == "skipped"]
            return RuleResult(record.policy, rule, "skip", "audit: action skipped: " + "; ".join(skipped))
        return None  # not matched: a report lists what the policies ask of the workload
    if record.verdict == "would-deny":
        return RuleResult(record.policy, rule, "warn", f"audit: promoting the policy would deny: {record.detail}",
                          properties=(("enforcement", "Audit"),))
    if record.verdict == "not-evaluated":
        return RuleResult(record.policy, rule, "skip", f"audit: not evaluated: {record.detail}")
    if rule not in record.rules:
        return RuleResult(record.policy, rule, "pass", "audit: matches; applying it would change nothing",
                          properties=(("enforcement", "Audit"),))
    patch = record.by_rule.get(rule, record.patch)
    words = "; ".join(f"would {phrase}" for phrase in patch_words(patch)) or "would change the workload"
    return RuleResult(record.policy, rule, "warn", f"audit: {words}",
                      properties=(("enforcement", "Audit"), ("patch", _patch_text(patch))))


def _patch_text(patch: JSONPatch) -> str:
    text = json.dumps(patch, separators=(",", ":"))
    if len(text) <= PATCH_LIMIT:
        return text
    marker = f"...[cut: {len(text)} characters; the whole patch: placer apply -o patch]"
    return text[:PATCH_LIMIT - len(marker)] + marker
