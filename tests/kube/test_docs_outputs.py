"""What the docs show Placer's cluster commands printing is what they print: each session is run against the
fake API server holding the objects of the page's example files, and compared line for line."""

import io
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.docs_text import DOCS, blocks, shown_output
from tests.kube.background_running import running
from tests.kube.fake_apiserver import DEPLOYMENTS, NAMESPACES, REPORTS_API, STATEFULSETS, FakeApiServer, wait_for
from webhook.cluster.client.api import KubeApi
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


COLLECTIONS = {"Namespace": NAMESPACES, "Deployment": DEPLOYMENTS, "StatefulSet": STATEFULSETS}


def put_examples(apiserver: FakeApiServer, *files: str) -> None:
    for name in files:
        for document in yaml.safe_load_all((EXAMPLES / name).read_text()):
            if document["kind"] == "SchedulingPolicy":
                apiserver.put_policy(document)
            else:
                apiserver.put(COLLECTIONS[document["kind"]], document)


def same(printed: str, shown: str) -> bool:
    """Line for line; a line the page shortens to `...]` stands for any line that starts as it does."""
    ours, theirs = printed.splitlines(), shown.splitlines()
    return len(ours) == len(theirs) and all(
        a == b or (b.endswith("[...]") and a.startswith(b[:-5])) for a, b in zip(ours, theirs, strict=True))


def test_drift_and_its_apply_print_what_the_worked_example_shows(
        apiserver: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/reports-and-drift.md, "A worked example": policy.yaml, web.yaml and others.yaml in the cluster,
    then `kubectl placer drift` and its `--apply`, answered `y` as a terminal shows it."""
    put_examples(apiserver, "web.yaml", "others.yaml", "policy.yaml")

    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # what is typed; a terminal echoes it
    steps = [*session(DOCS / "reports-and-drift.md", "3 workloads: 1 out of step"),
             *session(DOCS / "reports-and-drift.md", "Apply? [y/N] y")]
    assert len(steps) == 2
    for command, shown in steps:
        argv = shlex.split(command)
        kubectl_main([*argv[2:], "--kubeconfig", str(kubeconfig)])
        printed = capsys.readouterr().out.replace("Apply? [y/N] ", "Apply? [y/N] y\n")
        assert same(printed, shown), f"{command}\n{printed}"


def test_the_drift_of_a_rule_that_changed_prints_what_reports_and_drift_shows(
        apiserver: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/reports-and-drift.md, "When a rule changes": search.yaml and spread-policy.yaml in the cluster,
    then the page's three commands in order."""
    put_examples(apiserver, "search.yaml", "spread-policy.yaml")
    steps = session(DOCS / "reports-and-drift.md", "deployment/search -n team-a\n")
    assert len(steps) == 3
    for command, shown in steps:
        argv = shlex.split(command)
        assert argv[:2] == ["kubectl", "placer"], command
        kubectl_main([*argv[2:], "--kubeconfig", str(kubeconfig)])
        assert capsys.readouterr().out == shown, command


def printed_row(crd_file: str, report: dict[str, Any]) -> list[str]:
    """The row kubectl prints for a report: NAME, then each printer column's value (a dotted jsonPath), the
    age left out (it depends on when you look)."""
    crd = yaml.safe_load((REPO / "deploy/components/policy-reports" / crd_file).read_text())
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    row = [report["metadata"]["name"]]
    for column in columns:
        if column["type"] == "date":
            continue
        value: Any = report
        for part in column["jsonPath"].strip(".").split("."):
            value = value.get(part) if isinstance(value, dict) else None
        row.append(str(value))
    return row


def test_the_reports_of_the_worked_example_are_what_the_page_shows(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    """The page's `kubectl get policyreports` and `clusterpolicyreports` rows (before `--apply`): the reports
    the controller writes for web.yaml, others.yaml and policy.yaml (one PolicyReport per workload, named by
    its uid, which the page shows as any uid), read through the CRDs' printer columns."""
    apiserver.reports_served = True
    put_examples(apiserver, "web.yaml", "others.yaml", "policy.yaml")
    page = DOCS / "reports-and-drift.md"
    shown = [row.split()[1:-1] for row in shown_output(page, "kubectl get policyreports -n team-a").splitlines()[1:]]
    _header, cluster_row = shown_output(page, "kubectl get clusterpolicyreports").splitlines()

    def rows() -> list[list[str]]:
        with apiserver.condition:  # the controller's threads write the store meanwhile
            reports = list((apiserver.other.get(f"{REPORTS_API}/namespaces/team-a/policyreports") or {}).values())
        return sorted(printed_row("policyreports.yaml", report)[1:] for report in reports)

    def cluster() -> list[str] | None:
        with apiserver.condition:
            report = (apiserver.other.get(f"{REPORTS_API}/clusterpolicyreports") or {}).get("placer")
        return printed_row("clusterpolicyreports.yaml", report) if report else None

    with running(api, tmp_path / "state", apiserver):
        wait_for(lambda: rows() == sorted(shown), timeout=30, what=f"the page's rows {sorted(shown)}")
        wait_for(lambda: cluster() == cluster_row.split()[:-1], timeout=30, what="the page's ClusterPolicyReport")
