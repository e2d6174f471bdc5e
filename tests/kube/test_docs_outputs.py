"""What the docs show Placer's cluster commands printing is what they print: each session is run against the
fake API server holding the objects of the page's example files, and compared line for line."""

import shlex
from pathlib import Path

import pytest
import yaml

from tests.docs_text import DOCS, blocks
from tests.kube.fake_apiserver import DEPLOYMENTS, NAMESPACES, FakeApiServer
from webhook.commands.cli import kubectl_main

EXAMPLES = DOCS / "examples/reports-and-drift"


def session(page: Path, marker: str) -> list[tuple[str, str]]:
    """(command, output) of each `$ ` line of the page's block that contains `marker`."""
    block = next(b for b in blocks(page) if marker in b.body)
    steps: list[tuple[str, str]] = []
    for line in block.body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], ""))
        elif steps:
            steps[-1] = (steps[-1][0], steps[-1][1] + line + "\n")
    return steps


def test_the_drift_of_a_rule_that_changed_prints_what_reports_and_drift_shows(
        apiserver: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/reports-and-drift.md, "When a rule changes": search.yaml and spread-policy.yaml in the cluster,
    then the page's three commands in order."""
    for document in yaml.safe_load_all((EXAMPLES / "search.yaml").read_text()):
        apiserver.put(NAMESPACES if document["kind"] == "Namespace" else DEPLOYMENTS, document)
    apiserver.put_policy(yaml.safe_load((EXAMPLES / "spread-policy.yaml").read_text()))
    steps = session(DOCS / "reports-and-drift.md", "deployment/search -n team-a\n")
    assert len(steps) == 3
    for command, shown in steps:
        argv = shlex.split(command)
        assert argv[:2] == ["kubectl", "placer"], command
        kubectl_main([*argv[2:], "--kubeconfig", str(kubeconfig)])
        assert capsys.readouterr().out == shown, command
