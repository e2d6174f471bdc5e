"""The scale table: what cluster state costs Placer when the cluster is big and changing, with no admissions.

    python -m tests.bench.bench_scale [--namespaces 1000,10000] [--nodes 0,5000] [--churn 10] [--duration 30]
                                      [--selected]

For each namespace count N: the fake API server (tests.kube.fake_apiserver, in this process) holds N
namespaces (3 labels and 2 annotations each, like a platform's) and `--policies` SchedulingPolicies plus the
2-rule policy; `placer serve --kube` (2 workers, TLS) is started against it. Printed per N:

- startup: seconds from launch until every worker serves the cluster's policies and the last namespace;
- state: bytes of `policies.json` and of the namespace shards;
- idle: `--duration` seconds with nothing changing: CPU of each Placer process, and the total as a share of
  one core (what the churn below adds to);
- churn: `--churn` namespace relabels per second for `--duration` seconds; publish latency p50/p99 from the
  relabel to its shard being on disk (a worker reads a namespace's shard at each admission, so that is when
  every worker serves it), and CPU seconds per minute and RSS of each Placer process (arbiter, controller,
  workers) from /proc, with the total as a share of one core;
- policy freshness: p50/p99 from a policy update until 12 admissions in a row (both workers) serve it;
- admission p50/p99 of the captured Pod review at 1 connection (3 s), beside the same with no namespaces;
- with `--selected`: the policies select namespaces by label (`team: team-N`, each a 97th of them) and every
  tenth is Enforced, so the controller keeps the fail-closed label (`placer.dev/enforce`) on the namespaces
  those select and looks at each relabelled namespace for it;
- with `--nodes M`: M Nodes (as kubelets report them, ~7 KB each), and a phase in which each reports its
  status every 10 s and nothing else changes (M/10 watch events a second): Placer's share of a core.
"""

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.bench.bench_direct import TWO_RULES, cpu_seconds
from tests.bench.bench_engine import policies
from tests.bench.bench_server import rss_mb
from tests.bench.loadgen import load, percentile
from tests.conftest import fixture_request
from tests.e2e.server import RunningServer, running_server
from tests.helpers import decode_patch
from tests.kube.fake_apiserver import NAMESPACES, FakeApiServer
from webhook.commands.certs import issue
from webhook.policy.state.cluster_state import namespaces_directory, nodes_directory, policies_path
from webhook.policy.state.namespace_shards import NamespaceShards

POD_NAMESPACE = "team-a"


def populate(apiserver: FakeApiServer, namespaces: int, policy_count: int, *, selected: bool = False) -> None:
    apiserver.put_namespace(POD_NAMESPACE, {"node-pool": "ml", "placer.dev/inject": "enabled"})
    for index in range(namespaces - 1):
        apiserver.put_namespace(f"ns-{index:05d}", {"team": f"team-{index % 97}", "env": "prod", "tier": "web"},
                                {"owner": f"owner-{index}@example.com", "cost-center": str(index % 31)})
    for document in selected_policies(policy_count) if selected else [
            yaml.safe_load(text) for text in (policies(policy_count) if policy_count else [])]:
        apiserver.put_policy(document)
    apiserver.put_policy(yaml.safe_load(TWO_RULES))


def selected_policies(count: int) -> list[dict[str, Any]]:
    """`count` one-rule policies, each selecting the namespaces of one team by label; every tenth Enforced."""
    return [{"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": f"team-{index}"},
             "spec": {"priority": index, "namespaceSelector": {"matchLabels": {"team": f"team-{index % 97}"}},
                      **({"enforcement": "Enforced"} if index % 10 == 0 else {}),
                      "rules": [{"name": "pool", "action": "add-node-selector",
                                 "parameters": {"node-pool": f"pool-{index}"}}]}}
            for index in range(count)]


def placer_processes(server: RunningServer) -> dict[str, int]:
    """arbiter, controller and workers by pid (the controller is the arbiter's child running webhook.kube)."""
    found = {"arbiter": server.process.pid}
    workers = 0
    for pid in sorted(server.worker_pids()):
        with contextlib.suppress(OSError):
            if b"webhook.cluster.process" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found["controller"] = pid
            else:
                found[f"worker-{workers}"], workers = pid, workers + 1
    return found


def state_directory(pids: dict[str, int]) -> Path:
    words = Path(f"/proc/{pids['controller']}/cmdline").read_bytes().split(b"\0")
    return Path(words[words.index(b"--state") + 1].decode())


def review(namespace: str = POD_NAMESPACE) -> dict[str, Any]:
    body = fixture_request("pod-bare-create-dryrun")
    body["request"]["namespace"] = namespace
    return body


def toleration_keys(server: RunningServer) -> set[str]:
    keys = set()
    for op in decode_patch(server.post("/mutate", json=review()).json()):
        if op["path"].startswith("/spec/tolerations"):
            keys.update(str(t.get("key")) for t in (op["value"] if isinstance(op["value"], list) else [op["value"]]))
    return keys


def served_everywhere(server: RunningServer, key: str) -> bool:
    return all(f"bench/{key}" in toleration_keys(server) for _ in range(12))


@contextlib.contextmanager
def placer_against(apiserver: FakeApiServer, workdir: Path, certs: Any) -> Iterator[RunningServer]:
    kubeconfig = apiserver.kubeconfig(workdir / "kubeconfig", certs.ca_cert)
    empty = workdir / "no-policies"
    empty.mkdir(exist_ok=True)
    with running_server(workdir, certs, policies=empty, wait=False,
                        extra=["--kube", "--kubeconfig", str(kubeconfig), "--log-level", "warning"]) as server:
        yield server


def gpu_pod_policy(key: str) -> dict[str, Any]:
    """The 2-rule policy with a toleration every admission of the bench's Pod gets (its key marks the version)."""
    policy = yaml.safe_load(TWO_RULES)
    policy["spec"]["rules"][1].update(condition="true", parameters={"key": f"bench/{key}", "operator": "Exists"})
    return policy


def measure(namespaces: int, policy_count: int, churn: float, duration: float, workdir: Path,
            certs: Any, *, nodes: int = 0, policy_updates: int = 8, admission_seconds: float = 3.0,
            selected: bool = False) -> dict[str, Any]:
    apiserver = FakeApiServer().serve(certs.cert, certs.key)
    try:
        populate(apiserver, namespaces, policy_count, selected=selected)
        for index in range(nodes):
            apiserver.put_node(node_name(index), {"node-pool": f"pool-{index % 7}"})
        apiserver.put_policy(gpu_pod_policy("v0"))
        last = f"ns-{namespaces - 2:05d}" if namespaces > 1 else POD_NAMESPACE
        started = time.monotonic()
        with placer_against(apiserver, workdir, certs) as server:
            deadline = started + 120
            while time.monotonic() < deadline:
                with contextlib.suppress(Exception):
                    if served_everywhere(server, "v0"):
                        break
                time.sleep(0.05)
            pids = placer_processes(server)
            directory = state_directory(pids)
            shards = NamespaceShards(namespaces_directory(directory))
            while last not in shards and time.monotonic() < deadline:
                time.sleep(0.05)
            while nodes and node_count(directory) < nodes and time.monotonic() < deadline:
                time.sleep(0.05)
            startup = time.monotonic() - started
            time.sleep(2.0)  # let start-up work settle before counting CPU
            labelled, steady = -1, 0
            if selected:  # the leader has labelled every namespace the Enforced policies select
                while time.monotonic() < deadline + 60 and steady < 3:
                    count = sum("placer.dev/enforce" in (obj["metadata"].get("labels") or {})
                                for obj in list(apiserver.objects[NAMESPACES].values()))
                    steady, labelled = (steady + 1 if count == labelled and count else 0), count
                    time.sleep(1.0)
            row: dict[str, Any] = {"namespaces": namespaces, "nodes": nodes, "startup_s": round(startup, 2),
                                   "labelled": labelled if selected else None,
                                   "nodes_kb": round(sum(p.stat().st_size for p in
                                                         nodes_directory(directory).glob("*.json")) / 1024, 1),
                                   "policies_kb": round(policies_path(directory).stat().st_size / 1024, 1),
                                   "shards_kb": round(sum(p.stat().st_size for p in
                                                          namespaces_directory(directory).glob("*.json")) / 1024, 1)}
            row["idle"] = idle_phase(pids, duration)
            row.update(churn_phase(apiserver, server, pids, directory, namespaces, churn, duration))
            row["heartbeats"] = heartbeat_phase(apiserver, pids, nodes, duration) if nodes else None
            row["policy_ms"] = policy_freshness(apiserver, server, policy_updates)
            result = load(server.url + "/mutate?timeout=10s", json.dumps(review()).encode(), connections=1,
                          duration=admission_seconds, ca=str(certs.ca_cert), processes=1)
            row["admission_p50_ms"], row["admission_p99_ms"] = result["p50_ms"], result["p99_ms"]
            return row
    finally:
        apiserver.shutdown()


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def node_count(directory: Path) -> int:
    return sum(len(json.loads(path.read_bytes())) for path in nodes_directory(directory).glob("*.json"))


def heartbeat_phase(apiserver: FakeApiServer, pids: dict[str, int], nodes: int, duration: float,
                    period: float = 10.0) -> dict[str, Any]:
    """Every node reports its status every `period` seconds, and nothing else changes: what that costs Placer.

    Two figures: the first round after the controller listed the nodes (each node's first update since the
    list is decoded once: the list gives no event bytes to compare with), then `duration` seconds of steady
    heartbeats (each recognised from its bytes and dropped)."""
    rate = nodes / period

    def beats(seconds: float, first: int) -> tuple[int, float, dict[str, float]]:
        cpu_before = {role: cpu_seconds([pid]) for role, pid in pids.items()}
        began = time.monotonic()
        count = 0
        while time.monotonic() < began + seconds:
            serial = first + count
            index = serial % nodes
            apiserver.put_node(node_name(index), {"node-pool": f"pool-{index % 7}"},
                               heartbeat=f"2026-11-22T{10 + serial // nodes % 10:02d}:00:{serial % 60:02d}Z")
            count += 1
            time.sleep(max(0.0, began + count / rate - time.monotonic()))
        elapsed = time.monotonic() - began
        cpu = {role: (cpu_seconds([pid]) - cpu_before[role]) / elapsed * 60 for role, pid in pids.items()}
        return count, elapsed, cpu

    first_count, _, first_cpu = beats(period, 0)
    count, elapsed, cpu = beats(duration, first_count)
    return {"events_per_s": round(count / elapsed), "cpu_s_per_min": {k: round(v, 2) for k, v in cpu.items()},
            "core_share_pct": round(sum(cpu.values()) / 60 * 100, 2),
            "first_round_pct": round(sum(first_cpu.values()) / 60 * 100, 2)}


def idle_phase(pids: dict[str, int], duration: float) -> dict[str, Any]:
    """Nothing changes for `duration` seconds: what each Placer process spends on its own."""
    cpu_before = {role: cpu_seconds([pid]) for role, pid in pids.items()}
    began = time.monotonic()
    time.sleep(duration)
    elapsed = time.monotonic() - began
    cpu = {role: (cpu_seconds([pid]) - cpu_before[role]) / elapsed * 60 for role, pid in pids.items()}
    return {"cpu_s_per_min": {role: round(value, 2) for role, value in cpu.items()},
            "core_share_pct": round(sum(cpu.values()) / 60 * 100, 2)}


def churn_phase(apiserver: FakeApiServer, server: RunningServer, pids: dict[str, int], directory: Path,
                namespaces: int, churn: float, duration: float) -> dict[str, Any]:
    names = [f"ns-{index:05d}" for index in range(max(namespaces - 1, 0))] or [POD_NAMESPACE]
    pending: list[tuple[str, str, float]] = []
    latencies: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()

    def watch_shards() -> None:
        reader = NamespaceShards(namespaces_directory(directory))
        while not stop.is_set() or pending:
            with lock:
                waiting = list(pending)
            for item in waiting:
                name, revision, sent = item
                found = reader.get(name)
                if found is not None and found.labels.get("revision") == revision:
                    latencies.append((time.monotonic() - sent) * 1000)
                    with lock:
                        pending.remove(item)
            time.sleep(0.002)
            if stop.is_set() and time.monotonic() > stop_time + 5:
                break

    stop_time = float("inf")
    watcher = threading.Thread(target=watch_shards, daemon=True)
    watcher.start()
    rng = random.Random(7)
    cpu_before = {role: cpu_seconds([pid]) for role, pid in pids.items()}
    began = time.monotonic()
    count = 0
    while (now := time.monotonic()) < began + duration:
        name = rng.choice(names)
        count += 1
        with lock:
            pending.append((name, str(count), now))
        labels = {"team": "team-x", "env": "prod", "tier": "web", "revision": str(count)}
        apiserver.put_namespace(name, labels, {"owner": "someone@example.com"})
        time.sleep(max(0.0, began + count / churn - time.monotonic()))
    elapsed = time.monotonic() - began
    cpu = {role: (cpu_seconds([pid]) - cpu_before[role]) / elapsed * 60 for role, pid in pids.items()}
    stop_time = time.monotonic()
    stop.set()
    watcher.join(10)
    return {
        "changes": count,
        "publish_p50_ms": round(percentile(latencies, 0.5), 1) if latencies else float("nan"),
        "publish_p99_ms": round(percentile(latencies, 0.99), 1) if latencies else float("nan"),
        "unpublished": len(pending),
        "cpu_s_per_min": {role: round(value, 2) for role, value in cpu.items()},
        "core_share_pct": round(sum(cpu.values()) / 60 * 100, 2),
        "rss_mb": {role: round(rss_mb(pid), 1) for role, pid in pids.items()},
    }


def policy_freshness(apiserver: FakeApiServer, server: RunningServer, updates: int = 8) -> list[float]:
    """p50 and p99 (ms) from a policy update until every worker serves it (12 admissions in a row)."""
    samples = []
    for version in range(1, updates + 1):
        key = f"v{version}"
        sent = time.monotonic()
        apiserver.put_policy(gpu_pod_policy(key))
        while not served_everywhere(server, key):
            if time.monotonic() - sent > 30:
                break
        samples.append((time.monotonic() - sent) * 1000)
        time.sleep(0.3)
    return [round(percentile(samples, 0.5), 0), round(percentile(samples, 0.99), 0)]


HEADER = (f"{'namespaces':>10} {'nodes':>5} {'startup s':>9} {'policies KB':>11} {'shards KB':>9} {'nodes KB':>8} "
          f"{'changes':>7} "
          f"{'publish p50/p99 ms':>18} {'policy p50/p99 ms':>17} {'% core':>6} {'admit p50/p99 ms':>16}")


def print_row(row: dict[str, Any]) -> None:
    publish = f"{row['publish_p50_ms']}/{row['publish_p99_ms']}"
    policy = f"{row['policy_ms'][0]:.0f}/{row['policy_ms'][1]:.0f}"
    admit = f"{row['admission_p50_ms']:.2f}/{row['admission_p99_ms']:.2f}"
    print(f"{row['namespaces']:>10} {row['nodes']:>5} {row['startup_s']:>9} {row['policies_kb']:>11} "
          f"{row['shards_kb']:>9} {row['nodes_kb']:>8} {row['changes']:>7} {publish:>18} {policy:>17} "
          f"{row['core_share_pct']:>6} {admit:>16}")
    print(f"{'':>10} idle: {row['idle']['core_share_pct']} % of a core, CPU s/min {row['idle']['cpu_s_per_min']}")
    print(f"{'':>10} CPU s/min {row['cpu_s_per_min']}  RSS MB {row['rss_mb']}"
          + (f"  unpublished {row['unpublished']}" if row["unpublished"] else ""), flush=True)
    if row["heartbeats"]:
        beats = row["heartbeats"]
        print(f"{'':>10} node heartbeats only, {beats['events_per_s']}/s: {beats['core_share_pct']} % of a core, "
              f"CPU s/min {beats['cpu_s_per_min']} (first round after the list: {beats['first_round_pct']} %)",
              flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--namespaces", default="1,1000,10000", help="namespace counts (1: only the Pod's)")
    parser.add_argument("--nodes", default="0", help="node counts (each row: every namespace count times node count)")
    parser.add_argument("--churn", type=float, default=10.0, help="namespace relabels per second")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of churn per row")
    parser.add_argument("--policies", type=int, default=50, help="SchedulingPolicies besides the 2-rule one")
    parser.add_argument("--selected", action="store_true",
                        help="the policies select namespaces by label, every tenth Enforced")
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, placer serve --kube, 2 workers, "
          f"{args.policies} + 1 policies{' selecting namespaces by label' if args.selected else ''}, "
          f"{args.churn:g} namespace changes/s for {args.duration:g} s")
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="placer-scale-") as tmp:
        workdir = Path(tmp)
        certs = issue(workdir / "certs", ["localhost", "127.0.0.1"], common_name="localhost")
        for count in (int(n) for n in args.namespaces.split(",")):
            for nodes in (int(m) for m in args.nodes.split(",")):
                case = workdir / f"n{count}-m{nodes}"
                case.mkdir()
                print_row(measure(count, args.policies, args.churn, args.duration, case, certs, nodes=nodes,
                                  selected=args.selected))


if __name__ == "__main__":
    main()
