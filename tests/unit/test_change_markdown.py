"""The pull-request comment (`webhook.change.markdown`): cells safe in a table, and never longer than a GitHub
comment may be; `placer diff` without what it needs exits 2."""

import pytest

from webhook.change.markdown import render_markdown
from webhook.change.report import ChangeReport
from webhook.change.rollout import Rollout
from webhook.change.workload_change import Outcome, WorkloadChange
from webhook.commands.cli import main


def change(index: int) -> WorkloadChange:
    before = Outcome([], ("a/b",))
    after = Outcome([{"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"pool": "x|y"}}], ("a/b",))
    return WorkloadChange(f"deployment/web-{index} -n team", before, after, rollout=Rollout(True, "replaces"),
                          stranded=["no node has pool=x|y"], difference="-a\n+b <c>")


def test_cells_are_escaped_and_sections_collapse() -> None:
    report = ChangeReport("replaces a", "workload", 1, [change(0)])
    text = render_markdown(report)
    assert "| `deployment/web-0 -n team` | yes | no node has pool=x\\|y |" in text
    assert "<summary><code>deployment/web-0 -n team</code></summary>" in text
    assert "```diff\n-a\n+b <c>\n```" in text


def test_a_comment_stays_within_github_s_limit() -> None:
    report = ChangeReport("replaces a", "workload", 2000, [change(i) for i in range(2000)])
    text = render_markdown(report)
    assert len(text) <= 65_536
    shown = text.count("<details>")
    assert 0 < shown < 2000
    assert text.rstrip().endswith(f"_{2000 - shown} more workloads not shown: a comment holds 65,536 characters; "
                                  "`-o text` lists them all._")
    assert "**2000 workloads change, 2000 would roll out, 2000 would be stranded (of 2000 workloads)**" in text


def test_diff_without_base_policies_or_manifests_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "--policies", "p.yaml"]) == 2
    assert "placer diff: --base, -f required (or PLACER_BASE, PLACER_POLICIES, PLACER_FILENAME)" in \
        capsys.readouterr().err
