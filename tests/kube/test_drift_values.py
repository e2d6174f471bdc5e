"""The issue's case against the fake API server: a Deployment Placer admitted under a spread rule that later
gained `matchLabelKeys`. `kubectl placer drift` lists it with a patch that replaces the stale constraint,
`--apply` brings it in step, and the background PolicyReport says `fail`, then `pass`."""

import copy
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.helpers import review_for, run, snapshot_of
from tests.kube.background_running import running
from tests.kube.fake_apiserver import DEPLOYMENTS, REPORTS_API, FakeApiServer, wait_for
from webhook.cluster.client.api import KubeApi
from webhook.cluster.reports.background import BackgroundReports
from webhook.commands.drift import DriftOptions
from webhook.commands.drift import run as drift_run
from webhook.policy.snapshot import NamespaceInfo

ZONE = "topology.kubernetes.io/zone"
STALE = (f"spread/zone: out of step: topologySpreadConstraints[{ZONE}] lacks matchLabelKeys "
         '["pod-template-hash"], which the rule now adds (written by Placer)')


def spread_policy(*match_label_keys: str) -> dict[str, Any]:
    parameters: dict[str, Any] = {"topologyKey": ZONE, "labelSelector": {"app": "web"}}
    if match_label_keys:
        parameters["matchLabelKeys"] = list(match_label_keys)
    return {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "spread"},
            "spec": {"namespaceSelector": {"matchLabels": {"team": "ml"}},
                     "rules": [{"name": "zone", "action": "add-topology-spread", "parameters": parameters}]}}


def deployment(name: str, **template_spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "team-a", "labels": {"app": "web"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web", "name": name}},
                     "template": {"metadata": {"labels": {"app": "web", "name": name}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}], **template_spec}}},
            "status": {"replicas": 3}}


def admitted_under_first_version(obj: dict[str, Any]) -> dict[str, Any]:
    """What the webhook stored when the Deployment was created under the rule without matchLabelKeys."""
    snapshot = snapshot_of(yaml.safe_dump(spread_policy()), namespaces=[NamespaceInfo("team-a", {"team": "ml"})])
    create = {key: value for key, value in obj.items() if key != "status"}
    stored: dict[str, Any] = jsonpatch.apply_patch(obj, run(snapshot, review_for(create)).patch)
    return stored


@pytest.fixture
def cluster(apiserver: FakeApiServer) -> FakeApiServer:
    apiserver.put_namespace("team-a", {"team": "ml"})
    apiserver.put(DEPLOYMENTS, admitted_under_first_version(deployment("web")))
    own = {"maxSkew": 2, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"app": "web"}}}
    apiserver.put(DEPLOYMENTS, deployment("own", topologySpreadConstraints=[own]))
    apiserver.put_policy(spread_policy("pod-template-hash"))
    return apiserver


def drift(api: KubeApi, **options: Any) -> tuple[int, str]:
    out = io.StringIO()
    code = drift_run(api, DriftOptions(**{"namespace": "team-a", "selector": None, **options}), out=out,
                     ask=lambda prompt: "n")
    return code, out.getvalue()


def test_drift_lists_the_stale_constraint_with_a_patch_that_replaces_it(cluster: FakeApiServer,
                                                                         api: KubeApi) -> None:
    code, output = drift(api)
    assert code == 1, output
    assert f"deployment/web -n team-a\n  {STALE}\n" in output
    assert ('patch: [{"op": "add", "path": "/spec/template/spec/topologySpreadConstraints/0/matchLabelKeys", '
            '"value": ["pod-template-hash"]}]') in output
    assert "deployment/own" not in output, "the user's own constraint is theirs"
    assert "2 workloads: 1 out of step, 1 in step" in output


def test_apply_replaces_the_constraint_and_the_webhooks_update_keeps_it(cluster: FakeApiServer,
                                                                       api: KubeApi) -> None:
    before = copy.deepcopy(cluster.objects[DEPLOYMENTS]["team-a/web"])
    code, output = drift(api, targets=["deployment/web"], apply=True, yes=True)
    assert code == 0, output
    assert "deployment/web -n team-a: brought in step" in output
    after = cluster.objects[DEPLOYMENTS]["team-a/web"]
    (constraint,) = after["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert constraint == {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                          "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash"]}
    own = cluster.objects[DEPLOYMENTS]["team-a/own"]["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert own[0]["maxSkew"] == 2 and "matchLabelKeys" not in own[0], "the user's value is never written"

    current = snapshot_of(yaml.safe_dump(spread_policy("pod-template-hash")),
                          namespaces=[NamespaceInfo("team-a", {"team": "ml"})])
    update = review_for({k: v for k, v in after.items() if k != "status"}, operation="UPDATE", old=before)
    assert run(current, update).patch == [], "the webhook's UPDATE admission does not undo the fix"
    code, output = drift(api)
    assert code == 0 and "2 workloads: 0 out of step, 2 in step" in output


@pytest.fixture
def background(apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> Iterator[BackgroundReports]:
    apiserver.reports_served = True
    with running(api, tmp_path / "state", apiserver) as reports:
        yield reports


def results(apiserver: FakeApiServer) -> dict[str, tuple[str, str]]:
    """Each team-a workload's result, from its own PolicyReport."""
    with apiserver.condition:
        found = list((apiserver.other.get(f"{REPORTS_API}/namespaces/team-a/policyreports") or {}).values())
    return {r["resources"][0]["name"]: (r["result"], r["message"]) for report in found for r in report["results"]}


def test_the_background_report_says_fail_for_the_stale_constraint_then_pass(
        cluster: FakeApiServer, background: BackgroundReports) -> None:
    message = STALE.replace("spread/zone: out of step: ", "rule spread/zone: ")
    own = (f"the workload keeps its own value: topologySpreadConstraints[{ZONE}] has maxSkew 2, the rule would "
           'write 1; lacks matchLabelKeys ["pod-template-hash"], which the rule would add')
    wait_for(lambda: results(cluster) == {"web": ("fail", message), "own": ("pass", own)},
             what="fail for the stale constraint, pass for the user's own")
    stored = cluster.objects[DEPLOYMENTS]["team-a/web"]
    fixed = copy.deepcopy(stored)
    fixed["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["matchLabelKeys"] = ["pod-template-hash"]
    cluster.put(DEPLOYMENTS, fixed)
    wait_for(lambda: results(cluster).get("web", ("", ""))[0] == "pass", what="pass once in step")
