"""What cluster-aware placement costs: claims, volumes and PodGroups at scale.

    python -m tests.bench.bench_cluster_aware [--nodes 5000] [--claims 20000] [--jobs 500] [--churn 10]
                                              [--duration 20] [--iterations 2000]

The fake API server (tests.kube.fake_apiserver, in this process) holds `--nodes` Nodes as kubelets report
them, `--claims` bound PersistentVolumeClaims over 1,000 namespaces with as many local PersistentVolumes
(local-path style: node affinity on kubernetes.io/hostname, spread over the nodes), and `--jobs` Jobs marked
for a PodGroup. The controller runs as Placer runs it (`python -m webhook.cluster.process --no-status`, its
own process). Printed:

- sync: seconds from the controller's start until every claim and volume is published, and until every
  marked Job has its PodGroup (created through the API, one POST each); the controller's RSS and CPU;
- state: bytes of the claims/, volumes/ and nodes/ shards (what each worker may read);
- churn: `--churn` claims bound a second (a PVC update naming its volume) for `--duration` s: publish latency
  p50/p99 from the update to its shard on disk, and the controller's share of a core;
- admission: µs per admission, in-process, of a StatefulSet pod mounting two claims, with a pin rule reading
  the published 20,000 claims beside the same pod with no pin rule.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.bench.bench_direct import cpu_seconds
from tests.bench.bench_server import rss_mb
from tests.bench.loadgen import percentile
from tests.helpers import snapshot_of
from tests.kube.fake_apiserver import CLAIMS, JOBS, PODGROUPS, VOLUMES, FakeApiServer
from tests.kube.marked_workloads import marked_job
from tests.volumes.data import statefulset_pod
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.commands.certs import issue
from webhook.placement.claims import ClaimLookup
from webhook.policy.state.cluster_state import claims_directory, nodes_directory, volumes_directory
from webhook.policy.state.node_facts import NodeFactsReader
from webhook.policy.state.volume_shards import VolumeShards
from webhook.workloads import default_workload_table

NAMESPACES = 1000
PIN_POLICY = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: local-data}\nspec:\n"
              "  rules:\n  - {name: follow-data, action: pin-to-volume-node, parameters: {strict: true}}\n")
OTHER_POLICY = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: pools}\nspec:\n"
                "  rules:\n  - {name: pool, action: add-node-selector, parameters: {pool: db}}\n")


def claim_name(index: int) -> tuple[str, str]:
    """(namespace, name) of claim `index`: db-N's data claim in namespace ns-(N mod 1000), team-a for 0."""
    namespace = index % NAMESPACES
    return ("team-a" if namespace == 0 else f"ns-{namespace:04d}"), f"data-db-{index}"


def claim(index: int, *, bound: bool = True) -> dict[str, Any]:
    namespace, name = claim_name(index)
    annotations = {"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes",
                   "volume.kubernetes.io/storage-provisioner": "rancher.io/local-path",
                   "volume.kubernetes.io/selected-node": f"node-{index % 5000:05d}"}
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                            "storageClassName": "standard", "volumeMode": "Filesystem"}
    if bound:
        spec["volumeName"] = f"pvc-{index:08d}"
    return {"metadata": {"name": name, "namespace": namespace, "labels": {"app": "db"},
                         "annotations": annotations if bound else {}, "finalizers": ["kubernetes.io/pvc-protection"]},
            "spec": spec, "status": {"phase": "Bound" if bound else "Pending"}}


def volume(index: int, nodes: int) -> dict[str, Any]:
    namespace, name = claim_name(index)
    node = f"node-{index % nodes:05d}"
    return {"metadata": {"name": f"pvc-{index:08d}", "annotations": {"pv.kubernetes.io/provisioned-by":
                                                                      "rancher.io/local-path"},
                         "finalizers": ["kubernetes.io/pv-protection"]},
            "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                     "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": name,
                                  "namespace": namespace},
                     "hostPath": {"path": f"/var/local-path-provisioner/pvc-{index:08d}_{namespace}_{name}",
                                  "type": "DirectoryOrCreate"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
                     "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "standard",
                     "volumeMode": "Filesystem"},
            "status": {"phase": "Bound"}}


def populate(apiserver: FakeApiServer, nodes: int, claims: int, jobs: int) -> None:
    for index in range(nodes):
        apiserver.put_node(f"node-{index:05d}", {"node-pool": f"pool-{index % 7}"})
    for index in range(claims):
        apiserver.put(CLAIMS, claim(index))
        apiserver.put(VOLUMES, volume(index, max(nodes, 1)))
    for index in range(jobs):
        job = marked_job(f"train-{index:04d}", parallelism=1 + index % 8)
        job["metadata"]["namespace"] = f"ns-{index % NAMESPACES:04d}"
        apiserver.put(JOBS, job)


def entries(directory: Path) -> int:
    total = 0
    for path in directory.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            total += len(json.loads(path.read_bytes()))
    return total


def size(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.glob("*.json"))


@contextlib.contextmanager
def controller(kubeconfig: Path, state: Path) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-m", "webhook.cluster.process", "--state", str(state),
                                "--kubeconfig", str(kubeconfig), "--no-status", "--log-level", "warning"])
    try:
        yield process
    finally:
        process.terminate()
        process.wait(10)


def wait(predicate: Any, timeout: float, interval: float = 0.05) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError("the controller did not catch up")
        time.sleep(interval)
    return time.monotonic()


def churn(apiserver: FakeApiServer, state: Path, pid: int, claims: int, rate: float, duration: float
          ) -> dict[str, float]:
    """Claims bound at `rate` a second: new claims, created unbound, then updated to name their volume."""
    lookup = VolumeShards(state)
    latencies: list[float] = []
    cpu_before, began = cpu_seconds([pid]), time.monotonic()
    count = 0
    while time.monotonic() < began + duration:
        index = claims + count
        apiserver.put(CLAIMS, claim(index, bound=False))
        apiserver.put(VOLUMES, volume(index, 5000))
        sent = time.monotonic()
        apiserver.put(CLAIMS, claim(index))
        namespace, name = claim_name(index)
        wait(lambda: (lookup.claim(namespace, name) or {}).get("volumeName") is not None, 10, 0.001)  # noqa: B023
        latencies.append((time.monotonic() - sent) * 1000)
        count += 1
        time.sleep(max(0.0, began + count / rate - time.monotonic()))
    elapsed = time.monotonic() - began
    return {"p50_ms": percentile(latencies, 0.5), "p99_ms": percentile(latencies, 0.99),
            "core_pct": (cpu_seconds([pid]) - cpu_before) / elapsed * 100}


def admission_us(state: Path, claims: int, iterations: int) -> dict[str, float]:
    """A pod in team-a mounting two of the published claims (claims 0 and 1,000 live there)."""
    lookup = ClaimLookup(VolumeShards(state), NodeFactsReader(nodes_directory(state)))
    body = statefulset_pod("data")
    pod = body["request"]["object"]
    mounted = [f"data-db-{index}" for index in (0, NAMESPACES) if index < claims]
    pod["spec"]["volumes"] = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": name}}
                              for i, name in enumerate(mounted)]
    request, table = parse_review(body), default_workload_table()
    figures = {}
    for label, texts in (("without", (OTHER_POLICY,)), ("with", (OTHER_POLICY, PIN_POLICY))):
        snapshot = snapshot_of(*texts)
        result = admit(request, snapshot, table, claims=lookup)
        pins = result.mutation.volume_outcomes
        assert label == "without" or pins == dict.fromkeys(mounted, "pinned"), pins
        started = time.perf_counter()
        for _ in range(iterations):
            admit(request, snapshot, table, claims=lookup)
        figures[label] = (time.perf_counter() - started) / max(iterations, 1) * 1e6
    return figures


def run(nodes: int, claims: int, jobs: int, rate: float, duration: float, iterations: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        certs = issue(workdir / "certs", ["localhost", "127.0.0.1"], common_name="localhost")
        apiserver = FakeApiServer().serve(certs.cert, certs.key)
        try:
            populate(apiserver, nodes, claims, jobs)
            kubeconfig = apiserver.kubeconfig(workdir / "kubeconfig", certs.ca_cert)
            state = workdir / "state"
            with controller(kubeconfig, state) as process:
                started = time.monotonic()
                published = wait(lambda: entries(claims_directory(state)) >= claims
                                 and entries(volumes_directory(state)) >= claims
                                 and entries(nodes_directory(state)) >= nodes, 300)
                grouped = wait(lambda: len(apiserver.objects[PODGROUPS]) >= jobs, 300)
                row: dict[str, Any] = {
                    "published_s": published - started, "pod_groups_s": grouped - started,
                    "controller_rss_mb": rss_mb(process.pid), "controller_cpu_s": cpu_seconds([process.pid]),
                    "claims_kb": size(claims_directory(state)) / 1024,
                    "volumes_kb": size(volumes_directory(state)) / 1024,
                    "nodes_kb": size(nodes_directory(state)) / 1024,
                }
                if duration > 0:
                    row["churn"] = churn(apiserver, state, process.pid, claims, rate, duration)
                row["admission_us"] = admission_us(state, claims, iterations)
        finally:
            apiserver.shutdown()
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--claims", type=int, default=20000)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--churn", type=float, default=10.0, help="claims bound a second")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args(argv)
    row = run(args.nodes, args.claims, args.jobs, args.churn, args.duration, args.iterations)
    print(f"{args.nodes} nodes, {args.claims} claims and volumes, {args.jobs} Jobs marked for a PodGroup "
          f"({os.cpu_count()} cores)")
    print(f"  published after start   {row['published_s']:6.1f} s     every PodGroup created after start "
          f"{row['pod_groups_s']:6.1f} s")
    print(f"  controller RSS          {row['controller_rss_mb']:6.0f} MB    CPU to sync "
          f"{row['controller_cpu_s']:.1f} s")
    print(f"  state: claims {row['claims_kb']:.0f} KB, volumes {row['volumes_kb']:.0f} KB, "
          f"nodes {row['nodes_kb']:.0f} KB")
    if "churn" in row:
        churned = row["churn"]
        print(f"  {args.churn:g} claims bound/s: on disk p50 {churned['p50_ms']:.1f} ms, "
              f"p99 {churned['p99_ms']:.1f} ms; controller {churned['core_pct']:.2f} % of a core")
    admission = row["admission_us"]
    print(f"  admission of a pod with 2 claims: {admission['without']:.0f} µs without a pin rule, "
          f"{admission['with']:.0f} µs with one")


if __name__ == "__main__":
    main()
