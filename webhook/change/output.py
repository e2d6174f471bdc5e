"""`-o text|json|markdown` of `kubectl placer preview` and `placer diff`."""

from webhook.change.markdown import render_markdown
from webhook.change.render import render_json, render_text
from webhook.change.report import ChangeReport

OUTPUTS = ("text", "json", "markdown")


def render(report: ChangeReport, output: str) -> str:
    if output == "json":
        return render_json(report)
    return render_markdown(report) if output == "markdown" else render_text(report)
