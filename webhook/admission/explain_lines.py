"""Lines of `placer apply -o explain` (and `kubectl placer explain`) for one rule, and for an Audit policy."""

from webhook.admission.patch_words import patch_words
from webhook.engine.outcome import AuditRecord, RuleTrace


def trace_line(trace: RuleTrace, *, audit: bool = False) -> str:
    where = f" [{trace.template}]" if trace.template else ""
    verdict = {
        "applied": "matched, " + (("would change the object" if audit else "changed the object") if trace.changed
                                  else "nothing to change"),
        "not-matched": "not matched",
        "missing": "not matched (missing key)",
        "error": "ERROR",
        "skipped": "matched, action skipped",
        "denied": "matched, would be refused",
        "audit": "matched, would change the object",
    }[trace.outcome]
    detail = f" ({trace.detail})" if trace.detail else ""
    return f"    {trace.rule}{where}: {'audit: ' if audit else ''}{verdict}{detail}"


def audit_lines(record: AuditRecord) -> list[str]:
    """An Audit policy's rules, each that would change the object with what it would write (`gpu-nodes: audit:
    would add nodeSelector node-pool=gpu`), then its verdict when it would change nothing or deny."""
    lines: list[str] = []
    told: set[str] = set()
    for trace in record.traces:
        if record.verdict == "would-change" and trace.rule in record.rules and trace.changed:
            if trace.rule in told:
                continue
            told.add(trace.rule)
            words = patch_words(record.by_rule.get(trace.rule, record.patch))
            lines.extend(f"    {trace.rule}: audit: would {phrase}" for phrase in words)
            if words:
                continue
        lines.append(trace_line(trace, audit=True))
    if record.verdict == "no-change":
        lines.append("    audit: would change nothing")
    elif record.verdict == "would-deny":
        lines.append(f"    audit: would deny: {record.detail}")
    elif record.verdict == "not-evaluated":
        lines.append(f"    audit: not evaluated: {record.detail}")
    lines.extend(f"    audit: would warn: {warning}" for warning in record.warnings)
    return lines
