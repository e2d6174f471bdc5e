"""The spot share's pod counts under load: bursts across replicas, and the controller's cost at scale.

    python -m tests.bench.bench_spot_ledger burst [--pods 20,100] [--lags 0,0.5,2] [--replicas 2] [--workers 2]
    python -m tests.bench.bench_spot_ledger scale [--namespaces 10000] [--pods 50000] [--events 5000]

`burst`: the fake API server (tests.kube.fake_apiserver, over TLS) and, per replica, the controller's pod
watch (`Reflector` + `PodShareSink`, what `webhook.cluster.controller` runs) publishing to that replica's state
directory, read by `--workers` `ShareShards` (one per worker process). A ReplicaSet scales up the way its
controller does (`slowStartBatch` in kubernetes/kubernetes pkg/controller/replicaset/replica_set.go: batches
of 1, 2, 4, 8... creations sent at once), the API server spreading the admissions over every worker of every
replica. Each admission reads the counts, decides with spot-share's rule (spot when `s + 1 <= floor(max% *
(s + d + 1) / 100)`), records its class (`admitted`) and creates the pod. `--lags` adds a watch lag to each
replica (events applied that many seconds after they happen). Printed per case: the spot pods after the
burst beside the most the maximum allows, the overshoot, and how many further single admissions (a scale-up
by one at a time, once the counts are published) it takes until the share is within the maximum again.
Two starts: from no pods, and from 4 on-demand pods left by a scale-down that removed the spot pods first
(pod-deletion-cost), the case with the most headroom.

`scale`: `--pods` labelled pods (the captured ReplicaSet pod of tests/fixtures/requests, running) over
`--namespaces` namespaces, ReplicaSets of 5 pods, handed to the controller's pod sink as its reflector does
(list pages of 500 decoded, each pod kept as its projection, then `--events` watch events decoded and
applied: status updates, creations, deletions), the state directory in memory (/dev/shm) as the Deployment's
is. Printed: time and CPU to a complete publish, the sink's memory (tracemalloc, a second list), CPU per pod
event, the shard bytes, a worker's lookup cost, and what pending admissions cost.
"""

import argparse
import contextlib
import copy
import heapq
import itertools
import logging
import os
import random
import resource
import statistics
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from tests.conftest import fixture_request
from tests.kube.fake_apiserver import PODS, FakeApiServer
from webhook.cluster.client.api import KubeApi, Timeouts, decode_event
from webhook.cluster.client.connection import connect
from webhook.cluster.client.reflector import Reflector
from webhook.cluster.spot.spot_ledger import PODS as POD_RESOURCE
from webhook.cluster.spot.spot_ledger import PodShareSink
from webhook.commands.certs import issue
from webhook.pods.capacity_share import CLASS_LABEL, CapacityClass, ShareCounts
from webhook.policy.state.shards import ShardWriter
from webhook.policy.state.share_shards import ShareShards, shares_directory

NAMESPACE = "team-a"
MEMORY_DIRECTORY = "/dev/shm" if os.path.isdir("/dev/shm") else None
"""Where the state directory goes: memory, as the Deployment's `emptyDir: {medium: Memory}` keeps it."""


def decide(counts: ShareCounts, max_percent: int) -> CapacityClass:
    """spot-share's rule (webhook/pods/pod_share.py `decide`): counts not complete read as no pods."""
    spot, on_demand = (counts.spot, counts.on_demand) if counts.complete else (0, 0)
    return "spot" if spot + 1 <= max_percent * (spot + on_demand + 1) // 100 else "on-demand"


def labelled_pod(name: str, owner: str, capacity_class: str, namespace: str = NAMESPACE) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "generateName": "web-7d4b9c-",
                         "labels": {"app": "web", "pod-template-hash": "7d4b9c", CLASS_LABEL: capacity_class},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c",
                                              "uid": owner, "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"containers": [{"name": "web", "image": "registry.example/web:1",
                                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
                     "nodeName": "node-1", "schedulerName": "default-scheduler"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


class LaggedSink:
    """The sink, `lag` seconds later: every event (and list) applied in order, `lag` after it arrived."""

    def __init__(self, sink: PodShareSink, lag: float) -> None:
        self._sink = sink
        self._lag = lag
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        threading.Thread(target=self._run, daemon=True).start()

    def keep(self, name: str, obj: Mapping[str, Any]) -> Any:
        return self._sink.keep(name, obj)

    def replace(self, store: Mapping[str, Any]) -> None:
        self._later(lambda: self._sink.replace(store))

    def upsert(self, name: str, obj: Mapping[str, Any]) -> None:
        self._later(lambda: self._sink.upsert(name, obj))

    def remove(self, name: str) -> None:
        self._later(lambda: self._sink.remove(name))

    def _later(self, apply: Callable[[], None]) -> None:
        if self._lag <= 0:
            apply()
            return
        with self._wake:
            heapq.heappush(self._due, (time.monotonic() + self._lag, next(self._order), apply))
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._wake.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, _, apply = heapq.heappop(self._due)
            apply()


class Worker:
    """A worker process: it answers one admission at a time (the engine runs in its event loop, with no
    await between reading the counts and recording the class), while pods are created concurrently."""

    def __init__(self, ledger: ShareShards) -> None:
        self.ledger = ledger
        self.lock = threading.Lock()

    def admit(self, owner: str, max_percent: int) -> CapacityClass:
        with self.lock:
            capacity_class = decide(self.ledger.counts(NAMESPACE, owner), max_percent)
            self.ledger.admitted(NAMESPACE, owner, capacity_class)
            return capacity_class


class Replica:
    """One Placer replica: its controller's pod watch and state directory, and its workers' readers."""

    def __init__(self, apiserver: FakeApiServer, kubeconfig: Path, state: Path, workers: int, lag: float) -> None:
        self.api = KubeApi(connect(kubeconfig), timeouts=Timeouts(connect=2, read=5, watch_idle=30))
        self.sink = PodShareSink(ShardWriter(shares_directory(state)))
        self.reflector = Reflector(self.api, POD_RESOURCE, LaggedSink(self.sink, lag))
        self.workers = [Worker(ShareShards(state)) for _ in range(workers)]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.reflector.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def close(self, apiserver: FakeApiServer) -> None:
        self.stop.set()
        while self.thread.is_alive():
            apiserver.drop_watches()
            self.thread.join(0.05)
        self.api.close()


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the counts were not published in time")
        time.sleep(0.01)


def live(apiserver: FakeApiServer, owner: str) -> tuple[int, int]:
    pods = [obj for obj in apiserver.objects[PODS].values()
            if obj["metadata"]["ownerReferences"][0]["uid"] == owner]
    spot = sum(1 for obj in pods if obj["metadata"]["labels"][CLASS_LABEL] == "spot")
    return spot, len(pods) - spot


def burst(apiserver: FakeApiServer, replicas: list[Replica], owner: str, pods: int, max_percent: int,
          rng: random.Random, latency: float) -> None:
    """Scale the ReplicaSet up by `pods` in slow-start batches; each batch's admissions run at once, each on
    a worker the API server picked, and each pod is stored `latency` seconds after its admission was
    answered (the rest of the API server's create)."""
    workers = [worker for replica in replicas for worker in replica.workers]
    names = itertools.count(len(apiserver.objects[PODS]))
    remaining, batch = pods, 1
    while remaining:
        size = min(batch, remaining)
        start = threading.Barrier(size)

        def admit(worker: Worker, start: threading.Barrier = start) -> None:
            start.wait()
            capacity_class = worker.admit(owner, max_percent)
            time.sleep(latency)
            apiserver.put(PODS, labelled_pod(f"web-{next(names):05d}", owner, capacity_class))

        threads = [threading.Thread(target=admit, args=(rng.choice(workers),)) for _ in range(size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        remaining -= size
        batch *= 2


def run_burst(apiserver: FakeApiServer, kubeconfig: Path, workdir: Path, *, pods: int, lag: float,
              replica_count: int, workers: int, max_percent: int, start_on_demand: int, seed: int,
              latency: float) -> dict[str, Any]:
    owner = f"rs-{pods}-{lag}-{start_on_demand}-{seed}"
    for index in range(start_on_demand):
        apiserver.put(PODS, labelled_pod(f"{owner}-left-{index}", owner, "on-demand"))
    replicas = [Replica(apiserver, kubeconfig, workdir / f"{owner}-replica-{index}", workers, lag)
                for index in range(replica_count)]
    try:
        for replica in replicas:  # every replica has listed what is there
            wait_until(lambda r=replica: r.sink.synced and all(w.ledger.known() for w in r.workers))
        started = time.monotonic()
        burst(apiserver, replicas, owner, pods, max_percent, random.Random(seed), latency)
        took = time.monotonic() - started
        spot, on_demand = live(apiserver, owner)
        total = spot + on_demand
        allowed = max_percent * total // 100
        corrections = 0
        rng = random.Random(seed + 1)
        while True:  # one at a time, once every replica published what is there: later admissions correct
            for replica in replicas:
                wait_until(lambda r=replica: r.sink.counts(NAMESPACE, owner) == live(apiserver, owner))
            now_spot, now_on_demand = live(apiserver, owner)
            if now_spot <= max_percent * (now_spot + now_on_demand) // 100:
                break
            burst(apiserver, [rng.choice(replicas)], owner, 1, max_percent, rng, latency)
            corrections += 1
        return {"pods": pods, "start": start_on_demand, "lag": lag, "seconds": took, "spot": spot, "total": total,
                "allowed": allowed, "overshoot": max(0, spot - allowed), "share": 100 * spot / total,
                "corrections": corrections}
    finally:
        for replica in replicas:
            replica.close(apiserver)


def burst_main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="placer-spot-burst-") as temporary:
        workdir = Path(temporary)
        certs = issue(workdir / "certs", ["localhost", "127.0.0.1"], common_name="localhost")
        apiserver = FakeApiServer().serve(certs.cert, certs.key)
        kubeconfig = apiserver.kubeconfig(workdir / "kubeconfig", certs.ca_cert)
        print(f"{args.replicas} replicas x {args.workers} workers, max {args.max}% spot, {args.runs} runs per case "
              f"(worst and mean of the overshoot), {args.latency * 1000:.0f} ms from admission to stored pod")
        print(f"{'pods':>5} {'start':>6} {'lag s':>6} {'spot/total':>11} {'max':>5} {'share %':>8} "
              f"{'overshoot worst/mean':>21} {'corrections worst':>18} {'burst s':>8}")
        try:
            for pods, start, lag in itertools.product(
                    (int(n) for n in args.pods.split(",")), (0, 4), (float(x) for x in args.lags.split(","))):
                rows = [run_burst(apiserver, kubeconfig, workdir, pods=pods, lag=lag, replica_count=args.replicas,
                                  workers=args.workers, max_percent=args.max, start_on_demand=start, seed=seed,
                                  latency=args.latency)
                        for seed in range(args.runs)]
                worst = max(rows, key=lambda row: (row["overshoot"], row["spot"]))
                mean = statistics.mean(row["overshoot"] for row in rows)
                print(f"{pods:>5} {start:>6} {lag:>6.1f} {worst['spot']:>5}/{worst['total']:<5} {worst['allowed']:>5} "
                      f"{worst['share']:>8.1f} {worst['overshoot']:>10}/{mean:<10.2f} "
                      f"{max(r['corrections'] for r in rows):>18} {statistics.mean(r['seconds'] for r in rows):>8.2f}",
                      flush=True)
        finally:
            apiserver.shutdown()


# -- scale ----------------------------------------------------------------------------------------------------

RUNNING_STATUS: dict[str, Any] = {
    "phase": "Running", "hostIP": "172.18.0.3", "hostIPs": [{"ip": "172.18.0.3"}], "podIP": "10.244.1.17",
    "podIPs": [{"ip": "10.244.1.17"}], "qosClass": "Burstable", "startTime": "2026-11-25T10:00:00Z",
    "conditions": [{"type": kind, "status": "True", "lastProbeTime": None,
                    "lastTransitionTime": "2026-11-25T10:00:02Z"}
                   for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                "PodScheduled")],
    "containerStatuses": [{"name": "web", "ready": True, "restartCount": 0, "started": True,
                           "image": "registry.example/web:2.1", "imageID": f"registry.example/web@sha256:{'ab' * 32}",
                           "containerID": f"containerd://{'cd' * 32}",
                           "state": {"running": {"startedAt": "2026-11-25T10:00:01Z"}},
                           "lastState": {}, "volumeMounts": [{"name": "kube-api-access-x7k2p",
                                                              "mountPath": "/var/run/secrets/kubernetes.io/"
                                                                           "serviceaccount", "readOnly": True,
                                                              "recursiveReadOnly": "Disabled"}]}],
}


def stored_pod(index: int, namespaces: int, per_workload: int = 5) -> dict[str, Any]:
    """The captured ReplicaSet pod (tests/fixtures/requests), as the API server stores it once running, with
    the class Placer gave it: 3 spot and 2 on-demand pods per ReplicaSet."""
    workload = index // per_workload
    capacity_class = "spot" if index % per_workload < 3 else "on-demand"
    obj = copy.deepcopy(fixture_request("pod-rs-owned-generatename-create-real")["request"]["object"])
    metadata = obj["metadata"]
    metadata.update(name=f"web-{workload:06d}-{index:06d}", namespace=f"ns-{workload % namespaces:05d}",
                    uid=f"00000000-0000-4000-8000-{index:012d}", resourceVersion=str(1000 + index),
                    creationTimestamp="2026-11-25T10:00:00Z")
    metadata["labels"][CLASS_LABEL] = capacity_class
    metadata["ownerReferences"][0]["uid"] = f"00000000-0000-4000-9000-{workload:012d}"
    metadata["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": "-100" if capacity_class == "spot"
                               else "100"}
    obj["spec"]["nodeName"] = f"node-{index % 500}"
    obj["status"] = copy.deepcopy(RUNNING_STATUS)
    return obj


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def list_into(sink: PodShareSink, pages: list[bytes]) -> None:
    """What Reflector._list does: each page decoded, each item kept as the sink's projection, then replace."""
    kept: dict[str, Any] = {}
    for page in pages:
        for item in orjson.loads(page)["items"]:
            metadata = item["metadata"]
            kept[f"{metadata['namespace']}/{metadata['name']}"] = sink.keep(metadata["name"], item)
    sink.replace(kept)


def scale_main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="placer-spot-scale-", dir=MEMORY_DIRECTORY) as temporary:
        state = Path(temporary)
        pods = [stored_pod(index, args.namespaces) for index in range(args.pods)]
        pages = [orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "99"},
                               "items": pods[start:start + 500]}) for start in range(0, len(pods), 500)]
        size = sum(len(page) for page in pages) / len(pods)
        del pods
        started, cpu_started = time.monotonic(), cpu()
        sink = PodShareSink(ShardWriter(shares_directory(state)))
        list_into(sink, pages)
        publish_seconds, publish_cpu = time.monotonic() - started, cpu() - cpu_started
        shards = list(shares_directory(state).glob("*.json"))
        labelled, workloads = sink.size()
        print(f"{labelled} labelled pods ({size / 1024:.1f} KiB each as listed) in {workloads} ReplicaSets over "
              f"{args.namespaces} namespaces")
        print(f"complete publish (pages decoded, pods counted, {len(shards)} shards written): "
              f"{publish_seconds:.2f} s wall, {publish_cpu:.2f} s CPU")
        tracemalloc.start()
        measured = PodShareSink(ShardWriter(shares_directory(state / "memory")))
        list_into(measured, pages)
        held, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del measured
        print(f"controller memory for the counts: {held / 2**20:.1f} MiB held after the list (peak "
              f"{peak / 2**20:.1f} MiB while listing, one 500-pod page decoded at a time); shards on disk "
              f"{sum(path.stat().st_size for path in shards) / 2**20:.2f} MiB")
        rng = random.Random(7)
        events = []
        for index in range(args.events):
            pod_index = rng.randrange(args.pods)
            kind = ("MODIFIED", "MODIFIED", "MODIFIED", "DELETED", "ADDED")[index % 5]
            obj = stored_pod(pod_index if kind != "ADDED" else args.pods + index, args.namespaces)
            if kind == "ADDED":  # a new pod of an existing ReplicaSet
                obj["metadata"]["ownerReferences"][0]["uid"] = f"00000000-0000-4000-9000-{pod_index // 5:012d}"
                obj["metadata"]["namespace"] = f"ns-{(pod_index // 5) % args.namespaces:05d}"
                obj["status"] = {"phase": "Pending"}
            else:
                obj["status"]["conditions"][2]["lastTransitionTime"] = f"2026-11-25T11:{index % 60:02d}:00Z"
            obj["metadata"]["resourceVersion"] = str(200_000 + index)
            events.append((kind, orjson.dumps({"type": kind, "object": obj})))
        cpu_started = cpu()
        writes_before = sink.published
        for kind, line in events:  # what Reflector._watch and _apply do with each event
            event = decode_event(line)
            metadata = event["object"]["metadata"]
            name = f"{metadata['namespace']}/{metadata['name']}"
            if kind == "DELETED":
                sink.remove(name)
            else:
                sink.upsert(name, event["object"])
        per_event = (cpu() - cpu_started) / len(events)
        print(f"{len(events)} watch events (3/5 status updates, 1/5 deletions, 1/5 creations): "
              f"{per_event * 1e6:.0f} µs CPU each (decoding included), {sink.published - writes_before} shard writes")
        reader = ShareShards(state)
        keys = [(f"ns-{w % args.namespaces:05d}", f"00000000-0000-4000-9000-{w:012d}")
                for w in rng.sample(range(workloads), min(2000, workloads))]
        hot = keys[:1] * len(keys)
        for label, chosen in (("one workload (a burst: its shard parsed)", hot),
                              ("2,000 workloads at random (most shards parsed again)", keys)):
            for namespace, owner in chosen[:10]:
                reader.counts(namespace, owner)
            started = time.perf_counter()
            for namespace, owner in chosen:
                reader.counts(namespace, owner)
            print(f"worker lookup, {label}: {(time.perf_counter() - started) / len(chosen) * 1e6:.1f} µs")
        namespace, owner = keys[0]
        others = [ShareShards(state, worker=f"other-{index}") for index in range(3)]
        started = time.perf_counter()
        for index in range(300):  # a burst on one workload, over a replica's 4 workers
            (others[index % 3] if index % 4 else reader).admitted(namespace, owner, "spot" if index % 5 < 3
                                                                  else "on-demand")
        admitted = (time.perf_counter() - started) / 300
        started = time.perf_counter()
        for _ in range(300):
            reader.counts(namespace, owner)
        print(f"with 300 pending admissions of 4 workers on that workload: admitted {admitted * 1e6:.0f} µs "
              f"(one pending file written), lookup {(time.perf_counter() - started) / 300 * 1e6:.0f} µs")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    bursts = commands.add_parser("burst")
    bursts.add_argument("--pods", default="20,100")
    bursts.add_argument("--lags", default="0,0.5,2")
    bursts.add_argument("--replicas", type=int, default=2)
    bursts.add_argument("--workers", type=int, default=2)
    bursts.add_argument("--max", type=int, default=60)
    bursts.add_argument("--runs", type=int, default=5)
    bursts.add_argument("--latency", type=float, default=0.01, help="seconds from an admission to its pod stored")
    scale = commands.add_parser("scale")
    scale.add_argument("--namespaces", type=int, default=10_000)
    scale.add_argument("--pods", type=int, default=50_000)
    scale.add_argument("--events", type=int, default=5_000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the watches the bench ends say so; nothing to see
    with contextlib.suppress(KeyboardInterrupt):
        (burst_main if args.command == "burst" else scale_main)(args)


if __name__ == "__main__":
    main()
