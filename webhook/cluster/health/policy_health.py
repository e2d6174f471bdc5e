"""A policy's recent health from every replica's counts: the `recent` status block and the `Healthy` condition.

Pure: the readings (`replica_reports.collect`) and the configuration findings
(`webhook.engine.configuration`) in, status fields out.

`Healthy` is False when, in the window, some rule failed (`RuleErrors`: a CEL error, a parameter that did
not parse), when the policy asks for something the cluster cannot give (`PodGroupCRDNotServed`,
`GangNotEnforced`), or when some rule reached a missing key and applied to nothing (`MissingKeys`: a field
path the objects do not have, such as a typo; a rule that misses on some objects and applies to others is
counted, not flagged; a rule that also failed is named once, for its errors). The reason is the first of
those in that order; the message names every rule concerned with its count and last detail. True
(`NoProblems`) otherwise; Unknown (`NoCounts`) until a replica has reported.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.cluster.health.recent_counts import ReplicaWindow
from webhook.engine.configuration import GANG_NOT_ENFORCED, POD_GROUPS_NOT_SERVED, Finding
from webhook.support.rule_problems import Problem

HEALTHY = "Healthy"
RULE_ERRORS = "RuleErrors"
MISSING_KEYS = "MissingKeys"
NO_PROBLEMS = "NoProblems"
NO_COUNTS = "NoCounts"
REASON_ORDER = (RULE_ERRORS, POD_GROUPS_NOT_SERVED, GANG_NOT_ENFORCED, MISSING_KEYS)
OUTCOME_FIELDS = {"applied": "applied", "not-matched": "notMatched", "missing": "missingKeys", "error": "errors",
                  "skipped": "skipped"}
"""Rule outcome (`placer_rule_evaluations_total{outcome}`) to the status field that counts it."""
DENIED = "denied"
"""Refusals of an Enforced policy's rule (`webhook.engine.enforcement`): written as `denied` only when there
were some, so the status of a policy that refuses nothing reads as before."""
AUDITED = "audited"
AUDIT_OUTCOME = "audit"
"""An Audit policy's rule matched and would have applied (`webhook.admission.audit`): written as `audited` only when
there were some, as `denied` is."""


@dataclass(slots=True)
class RuleCounts:
    counts: dict[str, int] = field(default_factory=dict)
    """By outcome."""
    last_error: Problem | None = None
    last_missing: Problem | None = None

    @property
    def evaluated(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True, slots=True)
class PolicyHealth:
    """One policy's rules over every replica's window."""

    window_seconds: int
    replicas: int
    """Replicas whose reading is included."""
    rules: Mapping[str, RuleCounts]


def combine(readings: Mapping[str, ReplicaWindow], rules_of: Mapping[str, Sequence[str]],
            window_seconds: int) -> dict[str, PolicyHealth]:
    """Per policy (`rules_of`: each policy's rule names, in order), its rules' counts summed over replicas;
    counts of a rule the policy no longer has are left out."""
    combined = {policy: {rule: RuleCounts() for rule in rules} for policy, rules in rules_of.items()}
    for reading in readings.values():
        for (policy, rule, outcome), count in reading.counts.items():
            target = combined.get(policy, {}).get(rule)
            if target is not None:
                target.counts[outcome] = target.counts.get(outcome, 0) + count
        for (policy, rule, outcome), problem in reading.problems.items():
            target = combined.get(policy, {}).get(rule)
            if target is None:
                continue
            if outcome == "error" and (target.last_error is None or problem.at > target.last_error.at):
                target.last_error = problem
            elif outcome == "missing" and (target.last_missing is None or problem.at > target.last_missing.at):
                target.last_missing = problem
    return {policy: PolicyHealth(window_seconds, len(readings), rules) for policy, rules in combined.items()}


def recent_status(health: PolicyHealth) -> dict[str, Any]:
    """`status.recent`: the window, the totals the printer columns show, and one entry per rule."""
    rules = []
    for name, counts in health.rules.items():
        entry: dict[str, Any] = {"name": name, "evaluated": counts.evaluated}
        for outcome, key in OUTCOME_FIELDS.items():
            entry[key] = counts.counts.get(outcome, 0)
        if counts.counts.get(DENIED):
            entry[DENIED] = counts.counts[DENIED]
        if counts.counts.get(AUDIT_OUTCOME):
            entry[AUDITED] = counts.counts[AUDIT_OUTCOME]
        if counts.last_error is not None:
            entry["lastError"] = counts.last_error.detail
        if counts.last_missing is not None:
            entry["lastMissingKey"] = counts.last_missing.detail
        rules.append(entry)
    recent: dict[str, Any] = {
        "windowSeconds": health.window_seconds,
        "replicas": health.replicas,
        "evaluated": max((rule["evaluated"] for rule in rules), default=0),
        "applied": sum(rule["applied"] for rule in rules),
        "errors": sum(rule["errors"] for rule in rules),
        "missingKeys": sum(rule["missingKeys"] for rule in rules),
    }
    denied = sum(rule.get(DENIED, 0) for rule in rules)
    if denied:
        recent[DENIED] = denied
    audited = sum(rule.get(AUDITED, 0) for rule in rules)
    if audited:
        recent[AUDITED] = audited
    recent["rules"] = rules
    return recent


def healthy_condition(policy: str, health: PolicyHealth | None, findings: Iterable[Finding]
                      ) -> tuple[str, str, str]:
    """(status, reason, message) of the policy's `Healthy` condition."""
    problems: dict[str, list[str]] = {reason: [] for reason in REASON_ORDER}
    for finding in findings:
        problems.setdefault(finding.reason, []).append(finding.message)
    window = _minutes(health.window_seconds) if health is not None else ""
    for name, counts in (health.rules.items() if health is not None else ()):
        errors, missing = counts.counts.get("error", 0), counts.counts.get("missing", 0)
        if errors:
            last = f"; last: {counts.last_error.detail}" if counts.last_error is not None else ""
            problems[RULE_ERRORS].append(f"rule {policy}/{name}: {errors} error(s) in the last {window}{last}")
        applied = counts.counts.get("applied") or counts.counts.get(AUDIT_OUTCOME)
        if missing and not applied and not errors:  # a failing rule is named once
            last = f"; last: {counts.last_missing.detail}" if counts.last_missing is not None else ""
            problems[MISSING_KEYS].append(
                f"rule {policy}/{name}: {missing} missing key(s) and never applied in the last {window}{last}")
    found = [(reason, messages) for reason, messages in problems.items() if messages]
    if found:
        return "False", found[0][0], "; ".join(message for _, messages in found for message in messages)
    if health is None or health.replicas == 0:
        return "Unknown", NO_COUNTS, "no replica of Placer has reported its rule counts yet"
    evaluated = max((counts.evaluated for counts in health.rules.values()), default=0)
    return ("True", NO_PROBLEMS, f"no rule errors or missing keys in the last {window}: {evaluated} "
            f"evaluation(s) counted on {health.replicas} replica(s)")


def _minutes(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"
