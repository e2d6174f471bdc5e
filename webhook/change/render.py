"""A change report as text (a terminal) and JSON (tools); `markdown` makes the pull-request comment."""

import json
from typing import Any

from webhook.change.report import ChangeReport
from webhook.change.workload_change import Outcome, WorkloadChange
from webhook.cluster.reports.compliance import patch_steps


def written(outcome: Outcome) -> str:
    """What the policies write, one patch operation after the other, or why nothing."""
    if outcome.refused:
        return f"nothing: refused ({outcome.refused})"
    steps = patch_steps(outcome.patch)
    if steps:
        return "; ".join(steps)
    return "only Placer's placer.dev/applied mark" if outcome.patch else "nothing"


def item_lines(item: WorkloadChange, labels: tuple[str, str]) -> list[str]:
    """The lines under a workload's title: rules, patches, errors, rollout, strandings."""
    lines = []
    if item.rules_new:
        lines.append(f"rules: {', '.join(f'+{rule}' for rule in item.rules_new)}")
    if item.rules_gone:
        kept = ("" if item.source else ": what they wrote stays (Placer removes nothing); workloads created from "
                "now on go without it")
        lines.append(f"no longer applied: {', '.join(item.rules_gone)}{kept}")
    lines.append(f"{labels[0]}: {written(item.before)}")
    lines.append(f"{labels[1]}: {written(item.after)}")
    lines.extend(f"rule error after: {error}" for error in item.after.errors if error not in item.before.errors)
    if item.rollout is not None:
        lines.append(f"drift --apply: {'rolls out' if item.rollout.starts else 'no rollout'}: {item.rollout.why}")
    lines.extend(f"stranded: {reason}" for reason in item.stranded)
    lines.extend(f"no node before the change either: {reason}" for reason in item.still_stranded)
    return lines


def labels_for(report: ChangeReport) -> tuple[str, str]:
    return ("patch today", "patch after") if report.noun == "workload" else ("old policies write", "new policies write")


def render_text(report: ChangeReport) -> str:
    lines = [f"policy change: {report.change}"]
    labels = labels_for(report)
    for item in report.changes:
        lines.append(item.title + (f" ({item.source})" if item.source else ""))
        lines.extend(f"  {line}" for line in item_lines(item, labels))
        lines.extend(f"  {line}" for line in item.difference.splitlines())
    if report.broken_suites:
        lines.append("test cases the change breaks:")
        lines.extend(f"  {case}" for case in report.broken_suites)
    lines.extend(f"note: {note}" for note in report.notes)
    lines.append(report.summary())
    return "\n".join(lines) + "\n"


def render_json(report: ChangeReport) -> str:
    def outcome(value: Outcome) -> dict[str, Any]:
        return {"patch": value.patch, "rules": list(value.rules), "errors": list(value.errors),
                "refused": value.refused}

    items = []
    for item in report.changes:
        entry: dict[str, Any] = {"title": item.title, "resource": item.resource, "before": outcome(item.before),
                                 "after": outcome(item.after),
                                 "stranded": item.stranded, "strandedBefore": item.still_stranded}
        if item.source:
            entry["source"] = item.source
            entry["diff"] = item.difference
        if item.rollout is not None:
            entry["rollout"] = {"starts": item.rollout.starts, "why": item.rollout.why}
        items.append(entry)
    summary = {"changed": len(report.changes), "stranded": report.stranded, "judged": report.judged}
    if report.noun == "workload":
        summary["rollouts"] = report.rollouts
    return json.dumps({"change": report.change, "items": items, "summary": summary,
                       "brokenTestCases": report.broken_suites, "notes": report.notes}, indent=2) + "\n"
