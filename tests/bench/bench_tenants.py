"""Many tenants: what 500 SchedulingPolicies of 5 rules, one per team label, cost Placer on a living cluster.

    PLACER_E2E_KUBECONFIG=... PLACER_E2E_WEBHOOK_HOST=... python -m tests.bench.bench_tenants
        [--policies 500] [--few 6] [--windows 3] [--window 10] [--dry-runs 40]

Placer runs as the cluster tier starts it (`tests.cluster.harness.placer_on_cluster`: `placer serve --kube`
on this machine, 2 workers, its webhooks registered by URL, the tier's Lease held so no other run overlaps).
Without PLACER_E2E_KUBECONFIG the same phases run against the fake API server in this process (what the
API-server dry run measures is then Placer's own /mutate: there is no API server to call it).

1. `--few` policies are applied, and a dry-run create of a Deployment in a team namespace is timed through the
   API server (`--dry-runs` times, median): the time with a handful of policies;
2. the rest, up to `--policies`, are applied one by one through the API server: seconds from the first create
   and from the last until every policy is Ready (its status observes its generation), and the CPU seconds
   every Placer process spent meanwhile;
3. memory: the RSS of every process, and per policy (the growth from step 1 over the policies added);
4. idle: `--windows` windows of `--window` seconds with nothing changing: CPU seconds of each, and the
   share of one core;
5. one edit: one policy's rule changed; seconds until 12 admissions in a row (both workers) serve it, and the
   CPU seconds from the write until then plus its status (observedGeneration) written;
6. the dry run again, with every policy: its median, and the ratio to step 1.
"""

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from tests.bench.bench_direct import cpu_seconds
from tests.bench.bench_scale import placer_against, placer_processes
from tests.bench.bench_server import rss_mb
from tests.e2e.server import RunningServer
from tests.helpers import decode_patch, review_for
from tests.kube.fake_apiserver import POLICIES, FakeApiServer
from webhook.commands.certs import issue

RULES = 5
POOL = "placer-bench/pool"
KUBECONFIG_ENV = "PLACER_E2E_KUBECONFIG"


def tenant_policy(run: str, index: int, *, pool: str | None = None) -> dict[str, Any]:
    """One team's policy: 5 rules, selecting the namespaces labelled with the team."""
    team = f"{run}-{index:03d}"
    return {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": f"placer-e2e-tenant-{team}"},
            "spec": {"namespaceSelector": {"matchLabels": {"placer-bench/team": team}}, "rules": [
                {"name": "pool", "action": "add-node-selector", "parameters": {POOL: pool or f"pool-{index % 7}"}},
                {"name": "zone", "action": "add-node-affinity", "parameters": {
                    "key": "topology.kubernetes.io/zone", "values": "zone-a,zone-b", "type": "preferred"}},
                {"name": "gpu", "condition": "'nvidia.com/gpu' in resources.limits", "action": "add-toleration",
                 "parameters": {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}},
                {"name": "spread", "condition": "workload.replicas >= 3", "action": "add-topology-spread",
                 "parameters": {"topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}},
                {"name": "team", "action": "add-labels", "parameters": {"placer-bench/team": team}}]}}


def deployment(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bench", "namespace": namespace},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "bench"}}, "template": {
                "metadata": {"labels": {"app": "bench"}},
                "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                         "resources": {"requests": {"cpu": "10m"}}}]}}}}


class Target(Protocol):
    """Where the policies live: a living cluster, or the fake API server."""

    def put_policy(self, obj: dict[str, Any]) -> None: ...

    def namespace(self, name: str, labels: dict[str, str]) -> None: ...

    def ready(self) -> dict[str, tuple[int, int]]:
        """Each policy's (generation, observedGeneration of its Ready=True condition, 0 when not Ready)."""

    def dry_run(self, namespace: str) -> float:
        """Seconds of one dry-run create of the bench Deployment in `namespace`."""


class LiveTarget:
    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def put_policy(self, obj: dict[str, Any]) -> None:
        self.cluster.apply(POLICIES, obj)

    def namespace(self, name: str, labels: dict[str, str]) -> None:
        self.cluster.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": name, "labels": labels}})

    def ready(self) -> dict[str, tuple[int, int]]:
        return {item["metadata"]["name"]: (item["metadata"]["generation"], _observed(item))
                for item in self.cluster.api.get(POLICIES)["items"]}

    def dry_run(self, namespace: str) -> float:
        started = time.perf_counter()
        created = self.cluster.api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment(namespace),
                                          {"dryRun": "All"})
        elapsed = time.perf_counter() - started
        assert created["spec"]["template"]["spec"].get("nodeSelector"), "the dry run was not mutated"
        return elapsed


class FakeTarget:
    def __init__(self, apiserver: FakeApiServer, server: RunningServer) -> None:
        self.apiserver, self.server = apiserver, server

    def put_policy(self, obj: dict[str, Any]) -> None:
        self.apiserver.put_policy(obj)

    def namespace(self, name: str, labels: dict[str, str]) -> None:
        self.apiserver.put_namespace(name, labels)

    def ready(self) -> dict[str, tuple[int, int]]:
        return {name: (obj["metadata"]["generation"], _observed(obj))
                for name, obj in list(self.apiserver.objects[POLICIES].items())}

    def dry_run(self, namespace: str) -> float:
        body = review_for(deployment(namespace))
        body["request"]["dryRun"] = True
        started = time.perf_counter()
        answer = self.server.post("/mutate", json=body).json()
        elapsed = time.perf_counter() - started
        assert answer["response"].get("patch"), "not mutated"
        return elapsed


def _observed(obj: dict[str, Any]) -> int:
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = [c for c in conditions if c.get("type") == "Ready" and c.get("status") == "True"]
    return int(ready[0].get("observedGeneration") or 0) if ready else 0


def pool_served(server: RunningServer, namespace: str) -> str | None:
    body = review_for(deployment(namespace))
    body["request"]["dryRun"] = True
    for op in decode_patch(server.post("/mutate", json=body).json()):
        if op["path"] == "/spec/template/spec/nodeSelector":
            return str(op["value"].get(POOL))
        if op["path"] == "/spec/template/spec/nodeSelector/" + POOL.replace("/", "~1"):
            return str(op["value"])
    return None


def wait(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)


def measure(target: Target, server: RunningServer, *, run: str, policies: int, few: int, windows: int,
            window: float, dry_runs: int) -> dict[str, Any]:
    pids = placer_processes(server)
    cpu = lambda: {role: cpu_seconds([pid]) for role, pid in pids.items()}  # noqa: E731
    names = [tenant_policy(run, index)["metadata"]["name"] for index in range(policies)]
    team = f"{run}-000"
    namespace = f"placer-e2e-bench-{run}"
    target.namespace(namespace, {"placer.dev/inject": "enabled", "placer-bench/team": team})

    def all_ready(count: int) -> bool:
        states = target.ready()
        return all(name in states and states[name][1] >= states[name][0] for name in names[:count])

    for index in range(few):
        target.put_policy(tenant_policy(run, index))
    wait(lambda: all_ready(few), 60, "the first policies Ready")
    wait(lambda: pool_served(server, namespace) == "pool-0", 30, "the team's policy served")
    time.sleep(2.0)
    seen = len(admissions(server, namespace))
    few_dry = [target.dry_run(namespace) for _ in range(dry_runs)]
    few_placer = admissions(server, namespace)[seen:]
    rss_few = {role: rss_mb(pid) for role, pid in pids.items()}

    before, started = cpu(), time.monotonic()
    for index in range(few, policies):
        target.put_policy(tenant_policy(run, index))
    applied = time.monotonic()
    wait(lambda: all_ready(policies), 300, "every policy Ready", interval=0.5)
    ready_at = time.monotonic()
    load_cpu = {role: round(value - before[role], 2) for role, value in cpu().items()}
    time.sleep(5.0)  # the last statuses, reports and counts settle before the idle windows
    rss = {role: rss_mb(pid) for role, pid in pids.items()}

    idle = []
    for _ in range(windows):
        before, began = cpu(), time.monotonic()
        time.sleep(window)
        spent = {role: value - before[role] for role, value in cpu().items()}
        idle.append({"seconds": round(time.monotonic() - began, 1), "cpu_s": round(sum(spent.values()), 3),
                     "by_process": {role: round(value, 3) for role, value in spent.items()}})
    idle_share = sum(w["cpu_s"] for w in idle) / sum(w["seconds"] for w in idle) * 100

    before, began = cpu(), time.monotonic()
    target.put_policy(tenant_policy(run, 0, pool="edited"))
    wait(lambda: all(pool_served(server, namespace) == "edited" for _ in range(12)), 30, "the edit served",
         interval=0.0)
    served = time.monotonic() - began
    wait(lambda: target.ready()[names[0]][1] >= 2, 30, "the edit's status")
    edit_cpu = sum(cpu().values()) - sum(before.values())

    seen = len(admissions(server, namespace))
    many_dry = [target.dry_run(namespace) for _ in range(dry_runs)]
    many_placer = admissions(server, namespace)[seen:]
    few_median, many_median = statistics.median(few_dry), statistics.median(many_dry)
    added = policies - few
    return {
        "policies": policies, "rules": policies * RULES,
        "ready_after_apply_s": round(ready_at - applied, 1),
        "ready_after_first_create_s": round(ready_at - started, 1), "apply_s": round(applied - started, 1),
        "load_cpu_s": load_cpu, "load_cpu_total_s": round(sum(load_cpu.values()), 2),
        "rss_mib": {role: round(value, 1) for role, value in rss.items()},
        "rss_total_mib": round(sum(rss.values()), 1),
        "kib_per_policy": {role: round((rss[role] - rss_few[role]) * 1024 / added, 1) for role in rss},
        "idle_windows": idle, "idle_core_pct": round(idle_share, 2),
        "edit_served_s": round(served, 2), "edit_cpu_s": round(edit_cpu, 2),
        "dry_run_ms": {f"{few} policies": round(few_median * 1000, 1),
                       f"{policies} policies": round(many_median * 1000, 1)},
        "dry_run_ratio": round(many_median / few_median, 2),
        "placer_ms_of_a_dry_run": {f"{few} policies": _median(few_placer),
                                   f"{policies} policies": _median(many_placer)},
    }


def admissions(server: RunningServer, namespace: str) -> list[float]:
    """Placer's own time (`durationMs` of its log line) of each dry run of the bench Deployment so far."""
    found = []
    for line in server.log_text().splitlines():
        if '"dryRun":true' in line and f'"namespace":"{namespace}"' in line and '"name":"bench"' in line:
            with contextlib.suppress(ValueError, KeyError):
                found.append(float(json.loads(line)["durationMs"]))
    return found


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


@contextlib.contextmanager
def target_and_server(workdir: Path) -> Iterator[tuple[Target, RunningServer]]:
    kubeconfig = os.environ.get(KUBECONFIG_ENV)
    if kubeconfig:
        from tests.cluster.harness import placer_on_cluster  # noqa: PLC0415 - the cluster tier's harness

        with placer_on_cluster(Path(kubeconfig), workdir) as cluster:
            assert cluster.server is not None, "PLACER_E2E_IN_CLUSTER: the bench measures a Placer started here"
            yield LiveTarget(cluster), cluster.server
        return
    certs = issue(workdir / "certs", ["localhost", "127.0.0.1"])
    apiserver = FakeApiServer().serve(certs.cert, certs.key)
    try:
        with placer_against(apiserver, workdir, certs) as server:
            wait(lambda: _answers(server), 60, "Placer ready")
            yield FakeTarget(apiserver, server), server
    finally:
        apiserver.shutdown()


def _answers(server: RunningServer) -> bool:
    with contextlib.suppress(OSError):
        return bool(server.get("/readyz").status_code == 200)
    return False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="500 tenants' policies on a living cluster")
    parser.add_argument("--policies", type=int, default=500)
    parser.add_argument("--few", type=int, default=6, help="the handful the dry run is compared with")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--dry-runs", type=int, default=40)
    args = parser.parse_args(argv)
    run = uuid.uuid4().hex[:6]
    with tempfile.TemporaryDirectory(prefix="placer-bench-tenants-") as directory:
        workdir = Path(directory)
        with target_and_server(workdir) as (target, server):  # on a cluster, what it made is deleted after
            result = measure(target, server, run=run, policies=args.policies, few=args.few,
                             windows=args.windows, window=args.window, dry_runs=args.dry_runs)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
