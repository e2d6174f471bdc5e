"""A change report as a pull-request comment (GitHub-flavoured Markdown): the totals, a table of the workloads
that change, and per workload a collapsed section with its patches and the YAML difference.

A GitHub comment holds at most 65,536 characters (a longer one is refused); past `LIMIT` the remaining
workloads are left out, and a last line says how many and how to see them all."""

from webhook.change.render import item_lines, labels_for
from webhook.change.report import ChangeReport
from webhook.change.workload_change import WorkloadChange

LIMIT = 60_000
"""Characters of the comment before the rest is left out (room kept for the line that says so)."""


def render_markdown(report: ChangeReport, limit: int = LIMIT) -> str:
    what = "preview" if report.noun == "workload" else "diff"
    head = [f"### Placer policy change {what}", "", f"Policy change: {_cell(report.change)}", "",
            f"**{report.summary()}**", ""]
    if report.broken_suites:
        head += ["**Test cases the change breaks:**", "", *(f"- `{case}`" for case in report.broken_suites), ""]
    head += [f"> {_cell(note)}" for note in report.notes]
    rollout = report.noun == "workload"
    rows = [f"| {report.noun} |" + (" rolls out |" if rollout else "") + " stranded |",
            "|---|" + ("---|" if rollout else "") + "---|"]
    sections: list[str] = []
    size = sum(len(line) + 1 for line in head) + 200
    shown = 0
    for item in report.changes:
        row = _row(item, rollout)
        section = _section(item, report)
        if size + len(row) + len(section) > limit:
            break
        rows.append(row)
        sections.append(section)
        size += len(row) + len(section) + 2
        shown += 1
    lines = list(head)
    if report.changes:
        lines += [*([""] if lines[-1] else []), *rows, "", *sections]
    left = len(report.changes) - shown
    if left:
        lines.append(f"_{left} more {report.noun}{'' if left == 1 else 's'} not shown: a comment holds 65,536 "
                     "characters; `-o text` lists them all._")
    return "\n".join(lines).rstrip("\n") + "\n"


def _row(item: WorkloadChange, rollout: bool) -> str:
    rolls = (" yes |" if item.rollout and item.rollout.starts else " no |") if rollout else ""
    return f"| `{item.title}` |{rolls} {_cell('; '.join(item.stranded) or 'no')} |"


def _section(item: WorkloadChange, report: ChangeReport) -> str:
    lines = ["<details>", f"<summary><code>{_html(item.title)}</code>"
             + (f" ({_html(item.source)})" if item.source else "") + "</summary>", ""]
    lines += [f"- {_cell(line)}" for line in item_lines(item, labels_for(report))]
    if item.difference:
        lines += ["", "```diff", item.difference, "```"]
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def _cell(text: str) -> str:
    """Text safe in a table cell or list item: pipes escaped, angle brackets as entities."""
    return _html(text).replace("|", "\\|")


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
