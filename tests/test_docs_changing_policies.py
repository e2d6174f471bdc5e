""""Changing policies safely" shows real output: the example policy is the file, the webhook's answer is what
the webhook answers, the report results and metric lines are what Placer writes. (Its `$ placer ...` console
blocks are run by test_docs_site.py like every page's.)"""

import json
from typing import Any

import yaml

from tests.docs_text import DOCS, REPO, Block, blocks
from tests.helpers import review_for, snapshot_of
from tests.rsgi_client import AppClient
from webhook.admission.offline import load_policies
from webhook.cluster.reports.compliance import evaluate
from webhook.cluster.reports.reports import workload_report
from webhook.policy.snapshot import NamespaceInfo, SnapshotHolder
from webhook.server.app import create_app
from webhook.support.config import Settings
from webhook.support.metrics import Metrics
from webhook.workloads import default_workload_table

PAGE = DOCS / "changing-policies.md"
EXAMPLES = REPO / "docs/examples/changing-policies/audit"


def block(info: str, starts: str) -> Block:
    return next(b for b in blocks(PAGE) if b.info == info and b.body.lstrip().startswith(starts))


def train() -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((EXAMPLES / "train.yaml").read_text())
    return obj


def test_the_policy_shown_is_the_example_file() -> None:
    assert block("yaml", "# Pods that ask for GPUs").body == (EXAMPLES / "gpu-pool.yaml").read_text()


def test_the_answer_and_the_metrics_shown_are_the_webhooks() -> None:
    snapshot = load_policies([str(EXAMPLES / "gpu-pool.yaml"), str(EXAMPLES / "ml.yaml")], required=True)
    client = AppClient(create_app(holder=SnapshotHolder(snapshot), settings=Settings(), metrics=Metrics()))
    shown = block("json", '{\n  "apiVersion": "admission.k8s.io/v1"').body
    body = review_for(train())
    body["request"]["uid"] = json.loads(shown)["response"]["uid"]
    answer = client.post("/mutate?timeout=5s", json=body).get_json()
    assert json.dumps(answer, indent=2) + "\n" == shown
    metrics = client.get("/metrics").get_data().decode().splitlines()
    assert set(block("text", "placer_rule_evaluations_total").body.splitlines()) <= set(metrics)


def test_the_report_results_shown_are_what_placer_writes() -> None:
    stored = train()
    stored["metadata"]["uid"] = "0b5d7c55-3a63-4a0f-9d3a-2f2d6c0a1e11"
    verdict = evaluate(stored, snapshot_of((EXAMPLES / "gpu-pool.yaml").read_text(),
                                          namespaces=[NamespaceInfo("ml", {"team": "ml"})]), default_workload_table())
    written = workload_report(verdict, found=0)["results"]
    kept = [{key: result[key] for key in ("policy", "rule", "result", "message", "properties")} for result in written]
    assert yaml.safe_load(block("yaml", "- policy: gpu-pool").body) == kept
