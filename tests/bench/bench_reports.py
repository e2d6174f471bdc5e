"""What background evaluation costs: PolicyReports for a big cluster, in-process.

    python -m tests.bench.bench_reports [--namespaces 1000,10000] [--workloads 50000] [--policies 10]
    python -m tests.bench.bench_reports --largest 5000 --rules 10
    python -m tests.bench.bench_reports --churn --namespaces 10000 --workloads 50000 --percent 1 --duration 120

The controller's background evaluation (`webhook.cluster.reports.background`) is fed what its reflectors would hand it:
`--workloads` Deployments as kube-apiserver stores them (the captured v1.34 Deployment, with status and
managedFields, ~3 KB of JSON), spread over `--namespaces` namespaces; the policies are the org-wide example
(3 rules, every namespace) and `--policies` team policies, each selecting a tenth of the namespaces by label.
Reports go to a stub API that counts writes (no HTTP: what is measured is Placer's own work). Printed per
namespace count (each in a process of its own):

- memory: RSS growth once every workload is kept (compressed CREATE, digest, results), and per workload;
- first report: CPU and wall seconds from nothing judged to every namespace's report written (and the writes);
- idle round: CPU seconds of a round when nothing changed (what a big quiet cluster pays);
- team policy change (selects 1/10 of the namespaces): CPU seconds, workloads judged, reports written;
- org-wide policy change (every namespace): the same;
- one workload changed: the same.

`--largest N --rules R`: N Deployments in one namespace, each failing R rules (the patch in every message):
the largest PolicyReport object written, the ClusterPolicyReport, and what one report for the whole
namespace would have held (how reports were laid out before they were per workload).

`--churn`: the reports of `--workloads` Deployments over `--namespaces` namespaces are written, then
`--percent` of the workloads a minute change in a way that moves their results (a nodeSelector added or
taken away, so `fail` and `pass` alternate), for `--duration` seconds, while the evaluation thread runs as in
the controller (a round when something changed, at least once a second) with the report writer's budget
(`writer.WRITES_PER_SECOND`): report writes a second (mean and the busiest second), and what still waits at
the end.

`--in-step` stores every workload as Placer leaves it under the policies (the patch of its first judgement
applied), so that each matching rule finds its own value in place: what a cluster whose workloads all came
through Placer costs, where every rule also compares the value in place with the one it writes now.
"""

import argparse
import copy
import json
import random
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import jsonpatch
import yaml

from tests.conftest import REPO, fixture_request
from tests.helpers import compile_policies
from webhook.cluster.client.api import ApiError
from webhook.cluster.reports.background import BackgroundReports
from webhook.cluster.reports.compliance import evaluate
from webhook.cluster.reports.writer import ReportWriter
from webhook.policy.model import Policy
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.workloads import default_workload_table

ORG_WIDE = (REPO / "policies" / "org-wide-policy.yaml").read_text()


def team_policy(index: int, pool: str = "general") -> str:
    return yaml.safe_dump({"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy",
                           "metadata": {"name": f"team-{index}"},
                           "spec": {"namespaceSelector": {"matchLabels": {"team": f"team-{index}"}}, "rules": [
                               {"name": "pool", "action": "add-node-selector",
                                "parameters": {"node-pool": f"{pool}-{index}"}}]}})


class CountingApi:
    """What the report writer calls, answered at once: reports are created, then replaced or deleted; none
    is there to begin with. Keeps the largest body written and when each write came."""

    def __init__(self) -> None:
        self.writes = 0
        self.version = 0
        self.largest: dict[str, int] = {}
        """Per kind written, the largest body (bytes of JSON)."""
        self.times: list[float] = []
        self.kinds: list[str] = []
        """What each write was (PolicyReport, ClusterPolicyReport, or a deletion)."""

    def get(self, path: str, query: Any = None, **_: Any) -> dict[str, Any]:
        if path.endswith("/policyreports"):
            return {"items": [], "metadata": {}}
        raise ApiError(404, "NotFound", "not found")

    def create(self, path: str, body: Any, query: Any = None) -> dict[str, Any]:
        return self._written(body)

    def replace(self, path: str, body: Any) -> dict[str, Any]:
        return self._written(body)

    def delete(self, path: str, options: Any = None) -> dict[str, Any]:
        return self._written(None)

    def _written(self, body: Any) -> dict[str, Any]:
        self.writes += 1
        self.version += 1
        self.times.append(time.monotonic())
        self.kinds.append(body["kind"] if body is not None else "deletion")
        if body is not None:
            size = len(json.dumps(body, separators=(",", ":")))
            self.largest[body["kind"]] = max(size, self.largest.get(body["kind"], 0))
        return {"metadata": {"resourceVersion": str(self.version)}}


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Cluster:
    """The policies the stub controller serves, replaceable one at a time."""

    def __init__(self, namespaces: int, team_policies: int) -> None:
        self.team_policies = team_policies
        self.namespaces = {f"ns-{i:05d}": NamespaceInfo(f"ns-{i:05d}", {
            "kubernetes.io/metadata.name": f"ns-{i:05d}", "team": f"team-{i % 10}", "environment": "production"})
            for i in range(namespaces)}
        texts = [ORG_WIDE, *(team_policy(i) for i in range(team_policies))]
        policies, self.compiler = compile_policies(texts)
        self.policies: dict[str, Policy] = {policy.name: policy for policy in policies}
        self.changed = True

    def replace(self, text: str) -> None:
        (policy,), _ = compile_policies([text])
        self.policies[policy.name] = policy
        self.changed = True

    def __call__(self) -> tuple[PolicySnapshot, bool]:
        changed, self.changed = self.changed, False
        return PolicySnapshot.build(self.policies.values(), self.namespaces, [], self.compiler.environment), changed


def stored_deployment(namespace: str, index: int) -> dict[str, Any]:
    obj: dict[str, Any] = copy.deepcopy(fixture_request("deployment-update-label-real")["request"]["oldObject"])
    obj["metadata"].update(name=f"web-{index}", namespace=namespace, uid=f"uid-{index}",
                           resourceVersion=str(1000 + index))
    return obj


def timed(work: Callable[[], Any]) -> tuple[float, Any]:
    started = cpu()
    value = work()
    return cpu() - started, value


def measure(namespaces: int, workloads: int, team_policies: int, in_step: bool = False) -> dict[str, Any]:
    cluster = Cluster(namespaces, team_policies)
    api = CountingApi()
    unbounded = ReportWriter(api, rate=1e9, burst=10**9)  # type: ignore[arg-type]  # every write of a round
    background = BackgroundReports(api, REPO / "does-not-matter", cluster, leading=lambda: True,  # type: ignore[arg-type]
                                   period=1e9, cluster_interval=0.0, writer=unbounded)
    names = sorted(cluster.namespaces)
    template = stored_deployment(names[0], 0)
    placed: dict[str, dict[str, Any]] = {}

    def as_placer_leaves_it(namespace: str) -> dict[str, Any]:
        """The template as admitted under the policies that select `namespace` (one per team label)."""
        team = cluster.namespaces[namespace].labels["team"]
        if team not in placed:
            obj = copy.deepcopy(template)
            obj["metadata"]["namespace"] = namespace
            snapshot, _ = cluster()
            cluster.changed = True
            placed[team] = jsonpatch.apply_patch(obj, evaluate(obj, snapshot, default_workload_table()).patch)
        return placed[team]

    before = rss_mb()
    for index in range(workloads):
        namespace = names[index % len(names)]
        obj = copy.deepcopy(as_placer_leaves_it(namespace) if in_step else template)
        obj["metadata"].update(name=f"web-{index}", namespace=namespace, uid=f"uid-{index}")
        background.book.put(namespace, f"Deployment/{namespace}/web-{index}", obj)
    kept_mb = rss_mb() - before
    row: dict[str, Any] = {"namespaces": namespaces, "workloads": workloads, "in_step": in_step,
                           "memory_mb": round(kept_mb, 1), "bytes_per_workload": int(kept_mb * 2**20 / workloads)}

    def phase(name: str, change: Callable[[], None]) -> None:
        change()
        writes, judged, started = api.writes, background.judged, time.monotonic()
        seconds, _ = timed(background.round)
        row[name] = {"cpu_s": round(seconds, 2), "wall_s": round(time.monotonic() - started, 2),
                     "judged": background.judged - judged, "reports_written": api.writes - writes}

    phase("first_report", lambda: None)
    row["rss_after_reports_mb"] = round(rss_mb() - before, 1)
    phase("idle_round", lambda: None)
    phase("team_policy_change", lambda: cluster.replace(team_policy(3, pool="moved")))
    phase("org_wide_policy_change", lambda: cluster.replace(ORG_WIDE.replace("environment: production",
                                                                             "environment: prod")))

    def one_workload() -> None:
        obj = copy.deepcopy(template)
        obj["metadata"].update(name="web-7", namespace=names[7 % len(names)], uid="uid-7")
        obj["spec"]["replicas"] = 12
        background.book.put(names[7 % len(names)], f"Deployment/{names[7 % len(names)]}/web-7", obj)

    phase("one_workload_change", one_workload)
    return row


def ten_rules(rules: int) -> str:
    """One policy on every namespace with `rules` node-selector rules: a plain Deployment fails every one."""
    return yaml.safe_dump({"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy",
                           "metadata": {"name": f"{rules}-rules"}, "spec": {"rules": [
                               {"name": f"rule-{index}", "action": "add-node-selector",
                                "parameters": {f"example.com/key-{index}": f"value-{index}"}}
                               for index in range(rules)]}})


def largest(workloads: int, rules: int) -> dict[str, Any]:
    """`workloads` Deployments in one namespace, each failing `rules` rules: the largest objects written."""
    policies, compiler = compile_policies([ten_rules(rules)])
    namespaces = {"big": NamespaceInfo("big", {"kubernetes.io/metadata.name": "big"})}
    snapshot = PolicySnapshot.build(policies, namespaces, [], compiler.environment)
    api = CountingApi()
    writer = ReportWriter(api, rate=1e9, burst=10**9)  # type: ignore[arg-type]
    background = BackgroundReports(api, REPO / "does-not-matter", lambda: (snapshot, False),  # type: ignore[arg-type]
                                   leading=lambda: True, period=1e9, cluster_interval=0.0, writer=writer)
    for index in range(workloads):
        background.book.put("big", f"Deployment/big/web-{index}", stored_deployment("big", index))
    background.round()
    results = [result for record in background.book.by_namespace["big"].values() for result in record.results or ()]
    one_report = sum(len(json.dumps({"policy": r.policy, "rule": r.rule, "result": r.result,
                                     "message": r.message[:512], "source": "placer", "scored": True,
                                     "timestamp": {"seconds": 0, "nanos": 0}}, separators=(",", ":")))
                     + 150 for r in results)  # and each result's resource reference, about 150 bytes
    return {"workloads": workloads, "rules": rules, "reports_written": api.writes, "results": len(results),
            "largest_policy_report_bytes": api.largest.get("PolicyReport", 0),
            "cluster_policy_report_bytes": api.largest.get("ClusterPolicyReport", 0),
            "one_report_per_namespace_would_hold_bytes": one_report}


def churn(namespaces: int, workloads: int, percent: float, duration: float) -> dict[str, Any]:
    """Reports under churn, written as the controller writes them (its budget, rounds in a thread)."""
    cluster = Cluster(namespaces, 0)
    api = CountingApi()
    ahead = [0.0]
    """Seconds the writer's clock runs ahead: the first write of every report is made at once (at 50 a
    second, 50,000 reports take 1,000 s), then the clock runs as it does."""
    writer = ReportWriter(api, monotonic=lambda: time.monotonic() + ahead[0])  # type: ignore[arg-type]
    background = BackgroundReports(api, REPO / "does-not-matter", cluster, leading=lambda: True,  # type: ignore[arg-type]
                                   period=1e9, writer=writer)
    names = sorted(cluster.namespaces)
    template = stored_deployment(names[0], 0)

    def workload(index: int, pinned: bool) -> tuple[str, str, dict[str, Any]]:
        namespace = names[index % len(names)]
        obj = copy.deepcopy(template)
        obj["metadata"].update(name=f"web-{index}", namespace=namespace, uid=f"uid-{index}")
        if pinned:  # in step with the org-wide policy's production-isolation rule: pass instead of fail
            obj["spec"]["template"]["spec"]["nodeSelector"] = {"environment": "production"}
        return namespace, f"Deployment/{namespace}/web-{index}", obj

    for index in range(workloads):
        background.book.put(*workload(index, False))
    started = time.monotonic()
    while True:  # everything written once
        background.round()
        if background.writer.waiting == 0 and background.judged >= workloads:
            break
        ahead[0] += 3600.0
    first = {"seconds": round(time.monotonic() - started, 1), "writes": api.writes}
    time.sleep(3.0)  # the writer's budget fills up again
    stop = threading.Event()

    def evaluation() -> None:
        while not stop.is_set():
            background.book.wake.wait(1.0)
            background.book.wake.clear()
            background.round()

    thread = threading.Thread(target=evaluation, daemon=True)
    thread.start()
    rate = workloads * percent / 100 / 60
    rng = random.Random(3)
    pinned: set[int] = set()
    writes, cpu_before, began = len(api.times), cpu(), time.monotonic()
    count = 0
    while time.monotonic() < began + duration:
        index = rng.randrange(workloads)
        pinned ^= {index}
        background.book.put(*workload(index, index in pinned))
        count += 1
        time.sleep(max(0.0, began + count / rate - time.monotonic()))
    elapsed = time.monotonic() - began
    cpu_share = (cpu() - cpu_before) / elapsed * 100
    stop.set()
    thread.join(5)
    seconds = [at for at in api.times[writes:] if at < began + elapsed]
    cluster_writes = sum(1 for at, kind in zip(api.times[writes:], api.kinds[writes:], strict=True)
                         if at < began + elapsed and kind == "ClusterPolicyReport")
    busiest = max((sum(1 for at in seconds if start <= at < start + 1.0) for start in seconds), default=0)
    return {"namespaces": namespaces, "workloads": workloads, "percent_per_minute": percent,
            "first_write_of_every_report": first, "changes": count, "changes_per_s": round(count / elapsed, 2),
            "writes_per_s": round(len(seconds) / elapsed, 2), "busiest_second_writes": busiest,
            "cluster_report_writes": cluster_writes,
            "waiting_at_end": background.writer.waiting, "cpu_pct": round(cpu_share, 2),
            "largest_policy_report_bytes": api.largest.get("PolicyReport", 0)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespaces", default="1000,10000")
    parser.add_argument("--workloads", type=int, default=50_000)
    parser.add_argument("--policies", type=int, default=10, help="team policies besides the org-wide one")
    parser.add_argument("--in-step", action="store_true", help="workloads stored as Placer leaves them")
    parser.add_argument("--largest", type=int, default=0, help="Deployments in one namespace (the size test)")
    parser.add_argument("--rules", type=int, default=10, help="rules each of them fails")
    parser.add_argument("--churn", action="store_true", help="writes a second under churn")
    parser.add_argument("--percent", type=float, default=1.0, help="workloads changing a minute, in %%")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of churn")
    args = parser.parse_args(argv)
    if args.largest:
        print(json.dumps(largest(args.largest, args.rules)), flush=True)
        return
    if args.churn:
        print(json.dumps(churn(int(args.namespaces.split(",")[0]), args.workloads, args.percent, args.duration)),
              flush=True)
        return
    counts = [int(value) for value in args.namespaces.split(",")]
    if len(counts) == 1:
        print(json.dumps(measure(counts[0], args.workloads, args.policies, args.in_step)), flush=True)
        return
    for count in counts:  # each in a fresh process: memory a previous row freed would hide this one's growth
        subprocess.run([sys.executable, "-m", "tests.bench.bench_reports", "--namespaces", str(count),
                        "--workloads", str(args.workloads), "--policies", str(args.policies),
                        *(["--in-step"] if args.in_step else [])], check=True)


if __name__ == "__main__":
    main()



