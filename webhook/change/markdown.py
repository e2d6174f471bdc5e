"""A change report as a pull-request comment (GitHub-flavoured Markdown): the totals, a table of the workloads
that change, and per workload a collapsed section with its patches and the YAML difference."""

from webhook.change.render import item_lines, labels_for
from webhook.change.report import ChangeReport


def render_markdown(report: ChangeReport) -> str:
    what = "Preview" if report.noun == "workload" else "Diff"
    lines = [f"### Placer policy change {what.lower()}", "", f"Policy change: {_cell(report.change)}", "",
             f"**{report.summary()}**", ""]
    if report.changes:
        rollout = report.noun == "workload"
        lines.append(f"| {report.noun} |" + (" rolls out |" if rollout else "") + " stranded |")
        lines.append("|---|" + ("---|" if rollout else "") + "---|")
        for item in report.changes:
            rolls = (" yes |" if item.rollout and item.rollout.starts else " no |") if rollout else ""
            stranded = "; ".join(item.stranded) or "no"
            lines.append(f"| `{item.title}` |{rolls} {_cell(stranded)} |")
        lines.append("")
    labels = labels_for(report)
    for item in report.changes:
        lines += ["<details>", f"<summary><code>{_html(item.title)}</code>"
                  + (f" ({_html(item.source)})" if item.source else "") + "</summary>", ""]
        lines += [f"- {_cell(line)}" for line in item_lines(item, labels)]
        if item.difference:
            lines += ["", "```diff", item.difference, "```"]
        lines += ["", "</details>", ""]
    if report.broken_suites:
        lines += ["**Test cases the change breaks:**", ""]
        lines += [f"- `{case}`" for case in report.broken_suites]
        lines.append("")
    lines += [f"> {_cell(note)}" for note in report.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


def _cell(text: str) -> str:
    """Text safe in a table cell or list item: pipes escaped, angle brackets as entities."""
    return _html(text).replace("|", "\\|")


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
