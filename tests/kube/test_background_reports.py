"""Background evaluation: the controller judges existing workloads against the current policies and keeps a
PolicyReport per workload current, writing only what changed; without the report CRDs, reports are off."""

import copy
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube.background_running import running
from tests.kube.fake_apiserver import DEPLOYMENTS, REPORTS_API, FakeApiServer, wait_for
from webhook.cluster.client.api import KubeApi
from webhook.cluster.reports.background import BackgroundReports, ServedPolicies, readiness_detail
from webhook.policy.compiler import PolicyCompiler

TEAM_A_REPORTS = f"{REPORTS_API}/namespaces/team-a/policyreports"
CLUSTER_REPORTS = f"{REPORTS_API}/clusterpolicyreports"


def pool_policy(selector: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"rules": [
        {"name": "pool", "action": "add-node-selector", "parameters": {"node-pool": "general"}}]}
    if selector is not None:
        spec["namespaceSelector"] = selector
    return {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "pools"},
            "spec": spec}


def deployment(name: str, **template_labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "labels": {"app": name}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name, **template_labels}},
                                  "spec": {"containers": [{"name": name, "image": "nginx:1.27"}]}}},
            "status": {"replicas": 2}}


@pytest.fixture
def background(apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> Iterator[BackgroundReports]:
    apiserver.reports_served = True
    apiserver.put_namespace("team-a", {"team": "ml"})
    with running(api, tmp_path / "state", apiserver) as reports:
        yield reports


def report(apiserver: FakeApiServer, path: str = CLUSTER_REPORTS, name: str = "placer") -> dict[str, Any] | None:
    with apiserver.condition:
        return copy.deepcopy((apiserver.other.get(path) or {}).get(name))


def workload_reports(apiserver: FakeApiServer, path: str = TEAM_A_REPORTS) -> dict[str, dict[str, Any]]:
    """team-a's PolicyReports by the name of the workload each is about (its scope)."""
    with apiserver.condition:
        return {obj["scope"]["name"]: copy.deepcopy(obj) for obj in (apiserver.other.get(path) or {}).values()
                if obj["scope"]["kind"] != "Namespace"}


def results(apiserver: FakeApiServer) -> dict[str, str]:
    """Each team-a workload's result (its one rule's)."""
    return {name: found["results"][0]["result"] for name, found in workload_reports(apiserver).items()}


def settled(background: BackgroundReports) -> int:
    """Workloads judged, once no more are for a second: a namespace listed after the first judgement has its
    workloads judged again (they were judged without its labels)."""
    judged = -1
    while background.judged != judged:
        judged = background.judged
        time.sleep(1.0)
    return judged


def report_writes(apiserver: FakeApiServer) -> int:
    return len([m for m, p, _ in apiserver.requests if m in ("POST", "PUT") and p.startswith(TEAM_A_REPORTS)])


def test_a_deployment_created_before_the_policy_fails_and_passes_once_in_step(
        apiserver: FakeApiServer, background: BackgroundReports) -> None:
    apiserver.put(DEPLOYMENTS, deployment("old"))
    apiserver.put(DEPLOYMENTS, deployment("opted-out", **{"placer.dev/inject": "disabled"}))
    wait_for(lambda: background.book.count() == 2, what="the workloads watched")
    apiserver.put_policy(pool_policy({"matchLabels": {"team": "ml"}}))
    wait_for(lambda: results(apiserver) == {"old": "fail", "opted-out": "skip"}, what="fail and skip reported")
    polr = workload_reports(apiserver)["old"]
    assert polr["summary"] == {"pass": 0, "fail": 1, "error": 0, "skip": 0, "warn": 0}
    stored = apiserver.objects[DEPLOYMENTS]["team-a/old"]["metadata"]
    assert polr["metadata"]["name"] == stored["uid"], "named by the workload's uid, as Kyverno names its own"
    assert polr["scope"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "old", "namespace": "team-a",
                             "uid": stored["uid"]}
    assert polr["metadata"]["ownerReferences"] == [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "old", "uid": stored["uid"]}], \
        "the garbage collector deletes it with the Deployment"
    fail = polr["results"][0]
    assert fail["policy"] == "pools" and fail["rule"] == "pool" and fail["source"] == "placer"
    assert "nodeSelector" in fail["message"]
    cluster = wait_for(lambda: report(apiserver), what="the cluster report")
    assert cluster["kind"] == "ClusterPolicyReport"

    fixed = deployment("old")
    fixed["spec"]["template"]["spec"]["nodeSelector"] = {"node-pool": "general"}
    apiserver.put(DEPLOYMENTS, fixed)
    wait_for(lambda: results(apiserver) == {"old": "pass", "opted-out": "skip"}, what="pass once in step")


def test_unchanged_workloads_and_status_updates_write_nothing(
        apiserver: FakeApiServer, background: BackgroundReports) -> None:
    apiserver.put_policy(pool_policy())
    apiserver.put(DEPLOYMENTS, deployment("web"))
    wait_for(lambda: results(apiserver) == {"web": "fail"}, what="the first report")
    time.sleep(1.5)
    writes, judged = report_writes(apiserver), background.judged
    moved = deployment("web")
    moved["status"] = {"replicas": 2, "readyReplicas": 2, "observedGeneration": 7}
    apiserver.put(DEPLOYMENTS, moved)  # only the status moved: nothing the engine reads
    time.sleep(1.5)
    assert background.judged == judged, "a status update is not judged again"
    assert report_writes(apiserver) == writes, "nor written"


def test_a_policy_change_judges_only_the_namespaces_it_selects(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    apiserver.reports_served = True
    apiserver.put_namespace("team-a", {"team": "ml"})
    apiserver.put_namespace("team-b", {"team": "web"})
    apiserver.put(DEPLOYMENTS, deployment("a"))
    apiserver.put(DEPLOYMENTS, {**deployment("b"), "metadata": {"name": "b", "namespace": "team-b"}})
    with running(api, tmp_path / "state", apiserver) as background:
        wait_for(lambda: background.book.count() == 2, what="both workloads watched")
        wait_for(lambda: background.judged >= 2, what="the first full judgement")
        judged = settled(background)
        apiserver.put_policy(pool_policy({"matchLabels": {"team": "ml"}}))
        wait_for(lambda: results(apiserver) == {"a": "fail"}, what="team-a's report")
        time.sleep(0.5)
        assert background.judged == judged + 1, "team-b is not selected: its workload is not judged again"


def test_a_relabelled_namespace_has_its_workloads_judged_at_once(
        apiserver: FakeApiServer, background: BackgroundReports) -> None:
    """The namespace watch tells background evaluation which namespace changed (it used to compare every
    namespace's labels every 30 s): its workloads are judged again within the round, and no other's."""
    apiserver.put_namespace("team-b", {"team": "web"})
    apiserver.put(DEPLOYMENTS, deployment("web"))
    apiserver.put(DEPLOYMENTS, {**deployment("b"), "metadata": {"name": "b", "namespace": "team-b"}})
    apiserver.put_policy(pool_policy({"matchLabels": {"team": "data"}}))
    wait_for(lambda: background.judged >= 2, what="the first judgement")
    judged = settled(background)
    assert results(apiserver) == {}, "no policy selects team-a yet"
    relabelled = time.monotonic()
    apiserver.put_namespace("team-a", {"team": "data"})
    wait_for(lambda: results(apiserver) == {"web": "fail"}, timeout=5.0, what="team-a's workload judged again")
    assert time.monotonic() - relabelled < 5.0
    assert background.judged == judged + 1, "team-b did not change: its workload is not judged again"


def test_without_the_report_crds_reports_are_off_and_said_so(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    apiserver.put_namespace("team-a")
    apiserver.put(DEPLOYMENTS, deployment("web"))
    state = tmp_path / "state"
    with running(api, state, apiserver) as background:
        wait_for(lambda: readiness_detail(state), what="the readiness detail")
        assert readiness_detail(state) == ("policy reports: off (wgpolicyk8s.io/v1alpha2 is not served; "
                                           "install deploy/components/policy-reports)")
        assert not background.reflectors
        assert all(q.get("labelSelector") for q in apiserver.list_requests(DEPLOYMENTS)), "only marked ones"
    assert sum("policy reports off" in record.message for record in caplog.records) == 1


def test_judging_stops_and_asks_for_a_restart_once_cel_leaks_its_budget(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    apiserver.reports_served = True
    state = tmp_path / "state"
    leaked = threading.Event()
    background = BackgroundReports(api, state, ServedPolicies(state, PolicyCompiler()), leading=lambda: True,
                                   exhausted=leaked.is_set)
    stop = threading.Event()
    thread = threading.Thread(target=background.run, args=(stop,), daemon=True)
    thread.start()
    wait_for(lambda: background.enabled, what="reports on")
    assert not background.restart and not stop.is_set()
    leaked.set()
    wait_for(stop.is_set, what="the controller asked to stop")
    assert background.restart, "the arbiter restarts the controller, which frees what the library leaked"
    thread.join(5)
