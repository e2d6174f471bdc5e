"""How PolicyReports reach the API server: one per workload, only what changed, at a bounded rate, nothing
again after a restart, and the per-namespace reports of earlier versions deleted."""

import random
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import snapshot_of
from tests.kube.background_running import running
from tests.kube.fake_apiserver import DEPLOYMENTS, POLICIES, REPORTS_API, FakeApiServer, wait_for
from tests.kube.test_background_reports import TEAM_A_REPORTS, deployment, pool_policy, workload_reports
from webhook.cluster.client.api import ApiError, KubeApi
from webhook.cluster.reports.background import BackgroundReports
from webhook.cluster.reports.compliance import RuleResult, Verdict, WorkloadRef
from webhook.cluster.reports.reports import (
    LEFT_OUT_ANNOTATION,
    MANAGED_BY,
    Key,
    RuleTally,
    encode,
    within_budget,
    workload_report,
)
from webhook.cluster.reports.writer import ReportWriter
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.support.typing import JSONObject


class CountingApi:
    """Answers at once; records each write."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    def create(self, path: str, body: Any, query: Any = None) -> dict[str, Any]:
        self.requests.append(("POST", f"{path}/{body['metadata']['name']}"))
        return {"metadata": {"resourceVersion": str(len(self.requests))}}

    def replace(self, path: str, body: Any) -> dict[str, Any]:
        self.requests.append(("PUT", path))
        return {"metadata": {"resourceVersion": str(len(self.requests))}}

    def delete(self, path: str, options: Any = None) -> dict[str, Any]:
        self.requests.append(("DELETE", path))
        return {}

    def get(self, path: str, query: Any = None) -> dict[str, Any]:
        raise ApiError(404, "NotFound", "not found")


def verdict(index: int, results: tuple[RuleResult, ...]) -> Verdict:
    return Verdict(WorkloadRef("apps/v1", "Deployment", "team-a", f"web-{index}", f"uid-{index}"), results)


FAIL = (RuleResult("pools", "pool", "fail", "drift: applying the policies now would add /spec/nodeSelector"),)


def test_writes_never_exceed_the_budget_and_a_report_marked_twice_is_written_once() -> None:
    clock = [1000.0]
    api = CountingApi()
    writer = ReportWriter(api, rate=50, burst=100, monotonic=lambda: clock[0])  # type: ignore[arg-type]
    found = {("team-a", f"uid-{index}"): 1.0 for index in range(1_000)}
    built: list[Key] = []

    def build(key: Key) -> JSONObject | None:
        built.append(key)
        if key is None or key not in found:
            return None
        return workload_report(verdict(int(key[1][4:]), FAIL), found[key])

    for key in found:
        writer.mark(key)
    found[("team-a", "uid-5")] = 2.0
    writer.mark(("team-a", "uid-5"))  # marked again before its turn: written once, as it is then
    assert writer.waiting == 1_000, "keys wait, not reports"
    assert writer.flush(build) == 100, "a burst at most"
    assert writer.flush(build) == 0
    clock[0] += 1.0
    assert writer.flush(build) == 50, "then 50 a second"
    for _ in range(20):
        clock[0] += 1.0
        writer.flush(build)
    assert len(api.requests) == 1_000 and writer.waiting == 0
    assert len({path for _, path in api.requests}) == 1_000, "each written once"
    found[("team-a", "uid-7")] = 3.0
    writer.mark(("team-a", "uid-7"))
    assert writer.flush(build) == 0 and writer.waiting == 0, "the time a result was first found is no change"
    del found[("team-a", "uid-7")]
    writer.mark(("team-a", "uid-7"))
    writer.mark(("team-a", "uid-never-written"))
    clock[0] += 1.0
    assert writer.flush(build) == 1 and api.requests[-1] == ("DELETE", f"{TEAM_A_REPORTS}/uid-7")


def test_a_report_stays_within_its_budget_whatever_the_results() -> None:
    message = "drift: " + "x" * 600
    many = tuple(RuleResult(f"policy-{index}", f"rule-{index}", "fail" if index % 3 else "pass", message)
                 for index in range(2_000))
    report = workload_report(verdict(1, many), 1.0)
    assert len(encode(report)) <= 256 * 1024
    assert report["summary"]["pass"] == 667 and report["summary"]["fail"] == 1_333, "everything still counted"
    assert all(result["result"] == "fail" for result in report["results"]), "pass results go first"
    assert report["metadata"]["annotations"][LEFT_OUT_ANNOTATION].startswith("667 pass results, ")
    small = {"metadata": {"name": "a"}, "results": [{"result": "fail"}]}
    assert within_budget(small, budget=1_000) is small


def test_ten_rules_on_one_workload_make_a_few_kilobytes_whatever_its_namespace_holds() -> None:
    """5,000 Deployments with 10 failing rules in one namespace were one 22 MB report; now 5,000 of 4.8 KB."""
    message = "drift: applying the policies now would add /spec/template/spec/nodeSelector " + "x" * 440
    ten = tuple(RuleResult("ten-rules", f"rule-{index}", "fail", message) for index in range(10))
    assert len(encode(workload_report(verdict(4_999, ten), 1.0))) < 8 * 1024


def test_the_cluster_report_counts_by_difference_what_a_count_from_scratch_gives() -> None:
    rng = random.Random(5)
    tally = RuleTally()
    current: dict[tuple[str, int], tuple[tuple[str, str, str], ...]] = {}
    for _ in range(3_000):
        workload = (f"ns-{rng.randrange(20)}", rng.randrange(10))
        after = tuple((f"p{rule}", "r", rng.choice(("pass", "fail", "error", "skip")))
                      for rule in range(rng.randrange(4)))
        tally.move(workload[0], current.get(workload, ()), after)
        current[workload] = after
    report = tally.report()
    for result in report["results"]:
        mine = [(namespace, outcome) for (namespace, _), counted in current.items()
                for policy, _, outcome in counted if policy == result["policy"]]
        counts = {name: sum(1 for _, outcome in mine if outcome == name) for name in ("pass", "fail", "error", "skip")}
        assert result["properties"] == {name: str(count) for name, count in counts.items()}
        failing = len({namespace for namespace, outcome in mine if outcome in ("fail", "error")})
        assert result["message"].endswith(f"; {failing} namespaces to look at")


def test_a_workload_no_rule_matches_any_more_loses_its_report(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    apiserver.reports_served = True
    apiserver.put_namespace("team-a", {"team": "ml"})
    apiserver.put(DEPLOYMENTS, deployment("web"))
    apiserver.put_policy(pool_policy())
    with running(api, tmp_path / "state", apiserver):
        wait_for(lambda: "web" in workload_reports(apiserver), what="the report")
        apiserver.delete(POLICIES, "pools")
        wait_for(lambda: workload_reports(apiserver) == {}, what="the report deleted")


def test_a_new_leader_writes_nothing_that_is_there_already_and_deletes_the_per_namespace_report(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    apiserver.reports_served = True
    apiserver.put_namespace("team-a", {"team": "ml"})
    for name in ("web", "api", "db"):
        apiserver.put(DEPLOYMENTS, deployment(name))
    apiserver.put_policy(pool_policy())
    apiserver.put_readable(TEAM_A_REPORTS, {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
                                            "metadata": {"name": "placer", "namespace": "team-a",
                                                         "labels": dict(MANAGED_BY)},
                                            "scope": {"apiVersion": "v1", "kind": "Namespace", "name": "team-a"},
                                            "results": []})
    with running(api, tmp_path / "first", apiserver) as background:
        wait_for(lambda: set(workload_reports(apiserver)) == {"web", "api", "db"}, what="three reports")
        wait_for(lambda: background.writer.waiting == 0, what="every write made")
    assert "placer" not in (apiserver.other.get(TEAM_A_REPORTS) or {}), "the report of an earlier version went"
    before = [request for request in apiserver.requests if request[0] in ("POST", "PUT", "DELETE")]
    with running(api, tmp_path / "second", apiserver) as background:  # a restart, or another replica leading
        wait_for(lambda: background.judged >= 3 and background.writer.seeded, what="every workload judged")
        wait_for(lambda: background.writer.waiting == 0, what="nothing left to write")
    after = [request for request in apiserver.requests if request[0] in ("POST", "PUT", "DELETE")]
    assert [path for _, path, _ in after[len(before):] if path.startswith(REPORTS_API)] == []


def test_without_the_right_to_list_reports_they_are_still_written(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    """The RBAC of an earlier version grants no list: each report is created, or read and replaced."""
    apiserver.reports_served = True
    apiserver.fail("GET", f"{REPORTS_API}/policyreports", 403, "Forbidden", times=100)
    apiserver.put_namespace("team-a", {"team": "ml"})
    apiserver.put(DEPLOYMENTS, deployment("web"))
    apiserver.put_policy(pool_policy())
    with running(api, tmp_path / "state", apiserver) as background:
        wait_for(lambda: "web" in workload_reports(apiserver), what="the report")
        assert background.writer.seeded


def test_a_new_leader_judges_nothing_before_its_controller_has_served_the_policies(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    """A replica that starts leading with a new state directory lists the reports before its controller has
    published the policies: judged then, no rule would match any workload, and every report would be deleted
    and written again a moment later."""
    apiserver.reports_served = True
    web = apiserver.put(DEPLOYMENTS, deployment("web"))
    drift = (RuleResult("pools", "pool", "fail", "drift: applying the policies now would add "
                        '/spec/template/spec/nodeSelector {"node-pool":"general"}'),)
    reference = WorkloadRef("apps/v1", "Deployment", "team-a", "web", web["metadata"]["uid"])
    apiserver.put_readable(TEAM_A_REPORTS, workload_report(Verdict(reference, drift), 1.0))
    served: list[tuple[PolicySnapshot, bool]] = [(PolicySnapshot.build([], {}, [], None, ready=False), False)]
    background = BackgroundReports(api, tmp_path, lambda: served[-1], leading=lambda: True)
    background.book.put("team-a", "Deployment/team-a/web", {**web, "apiVersion": "apps/v1", "kind": "Deployment"})

    def writes() -> list[tuple[str, str]]:
        return [(method, path) for method, path, _ in apiserver.requests
                if method in ("POST", "PUT", "DELETE") and path.startswith(REPORTS_API)]

    assert background.round() == 0 and writes() == [], "nothing judged, nothing written before the first sync"
    assert background.writer.seeded, "what is there was listed"
    served.append((snapshot_of(yaml.safe_dump(pool_policy()), namespaces=[NamespaceInfo("team-a")]), True))
    assert background.round() == 1
    assert writes() == [("POST", f"{REPORTS_API}/clusterpolicyreports")], "the workload's report was right"
