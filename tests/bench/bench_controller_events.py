"""What one watch event costs the cluster controller, in-process: namespaces, nodes, claims and policies.

    python -m tests.bench.bench_controller_events [--namespaces 10000] [--policies 51] [--nodes 5000]
                                                  [--claims 5000] [--rate 10] [--duration 20] [--profile 200]

The controller (`webhook.cluster.controller.ClusterController`, leading, with its loop running in a thread as
in the controller process) holds `--namespaces` namespaces (3 labels and 2 annotations each), `--nodes`
Nodes and `--claims` bound claims, and `--policies` one-rule policies that each select a 97th of the
namespaces by label, every tenth Enforced (so the leader keeps the fail-closed label on the namespaces
those select). Events are handed to the controller's sinks as its watches hand them over, after decoding:
what is measured is the controller's own work per event (projection, shard written, the fail-closed label,
what the loop does next), not the watch stream, nor the API server. The API is a stub that answers at once
and echoes label patches as the namespace watch would. Printed:

- per kind of event (namespace relabel, node label change, claim resized, policy selector changed), `--rate`
  events a second for `--duration` seconds: CPU of the whole process as a share of one core, and the CPU
  per event over the same time with nothing changing;
- with `--profile N`: a cProfile of N namespace relabels, each handed to the sink and followed by the loop's
  turn, as the functions that took most of it per change.
"""

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webhook.cluster.controller import ClusterController
from webhook.policy.compiler import PolicyCompiler

Event = Callable[[int], None]


class StubApi:
    """What the controller's leader calls, answered at once; a label patch comes back through `echo`."""

    def __init__(self) -> None:
        self.echo: Callable[[str, dict[str, Any]], None] = lambda name, body: None
        self.writes = 0

    def merge_patch(self, path: str, body: Any, query: Any = None) -> dict[str, Any]:
        self.writes += 1
        if path.startswith("/api/v1/namespaces/"):
            self.echo(path.rsplit("/", 1)[-1], body)
        return {}

    def get(self, path: str, query: Any = None, **_: Any) -> dict[str, Any]:
        return {"items": [], "metadata": {}}


class Leading:
    """A Lease always held: this replica leads (writes labels and status)."""

    is_leader = True

    def try_acquire_or_renew(self) -> bool:
        return True

    def release(self) -> None:
        pass


def namespace(index: int, revision: int = 0, team: str | None = None) -> dict[str, Any]:
    labels = {"team": team or f"team-{index % 97}", "env": "prod", "tier": "web"}
    if revision:
        labels["revision"] = str(revision)
    return {"metadata": {"name": f"ns-{index:05d}", "labels": labels,
                         "annotations": {"owner": f"owner-{index}@example.com", "cost-center": str(index % 31)}}}


def node(index: int, pool: str) -> dict[str, Any]:
    return {"metadata": {"name": f"node-{index:05d}", "labels": {"node-pool": pool, "kubernetes.io/os": "linux"}},
            "spec": {}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                                   "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}


def claim(index: int, size: str) -> dict[str, Any]:
    return {"metadata": {"name": f"data-{index}", "namespace": f"ns-{index % 1000:05d}"},
            "spec": {"volumeName": f"pv-{index}", "resources": {"requests": {"storage": size}}},
            "status": {"phase": "Bound"}}


def policy(index: int, team: int | None = None) -> dict[str, Any]:
    selected = f"team-{index % 97 if team is None else team}"
    spec: dict[str, Any] = {"priority": index, "namespaceSelector": {"matchLabels": {"team": selected}},
                            "rules": [{"name": "pool", "action": "add-node-selector",
                                       "parameters": {"node-pool": f"pool-{index}"}}]}
    if index % 10 == 0:
        spec["enforcement"] = "Enforced"
    return {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": f"team-{index}", "uid": f"uid-{index}", "generation": 1}, "spec": spec}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Bench:
    def __init__(self, state: Path, namespaces: int, policies: int, nodes: int, claims: int) -> None:
        self.api = StubApi()
        self.controller = ClusterController(self.api, state, compiler=PolicyCompiler(),  # type: ignore[arg-type]
                                            elector=Leading())  # type: ignore[arg-type]
        self.controller.pod_group_api.check = lambda wanted: False  # type: ignore[method-assign]
        self.namespace_sink = self.controller.reflectors[1]._sink
        self.namespace_count, self.node_count, self.claim_count = namespaces, nodes, claims
        self.labels: dict[str, dict[str, str]] = {}
        self.api.echo = self._echo
        self.policies = {f"team-{index}": policy(index) for index in range(policies)}
        self.controller._set_policies(dict(self.policies))
        self.controller._set_priority_classes({})
        self._list(self.namespace_sink, [namespace(index) for index in range(namespaces)])
        self._list(self.controller.nodes, [node(index, f"pool-{index % 7}") for index in range(nodes)])
        self._list(self.controller.claims, [claim(index, "10Gi") for index in range(claims)], namespaced=True)
        self.controller.step()  # the first round: publish, label every namespace an Enforced policy selects
        self.controller.step()  # and take in the labels the patches brought back
        self.rng = random.Random(7)

    def _list(self, sink: Any, objects: list[dict[str, Any]], namespaced: bool = False) -> None:
        store = {}
        for obj in objects:
            metadata = obj["metadata"]
            name = f"{metadata['namespace']}/{metadata['name']}" if namespaced else metadata["name"]
            store[name] = sink.keep(name, obj)
            if sink is self.namespace_sink:
                self.labels[name] = dict(metadata["labels"])
        sink.replace(store)

    def _echo(self, name: str, body: dict[str, Any]) -> None:
        labels = {**self.labels[name], **body["metadata"]["labels"]}
        self.labels[name] = {key: value for key, value in labels.items() if value is not None}
        obj = namespace(int(name[3:]))
        obj["metadata"]["labels"] = self.labels[name]
        self.namespace_sink.upsert(name, obj)

    def relabel(self, serial: int) -> None:
        index = self.rng.randrange(self.namespace_count)
        obj = namespace(index, serial, team=f"team-{self.rng.randrange(97)}")
        self.labels[obj["metadata"]["name"]] = dict(obj["metadata"]["labels"])
        self.namespace_sink.upsert(obj["metadata"]["name"], obj)

    def node_change(self, serial: int) -> None:
        index = self.rng.randrange(self.node_count)
        self.controller.nodes.upsert(f"node-{index:05d}", node(index, f"pool-{serial % 7}-{serial}"))

    def claim_change(self, serial: int) -> None:
        index = self.rng.randrange(self.claim_count)
        obj = claim(index, f"{10 + serial}Gi")
        self.controller.claims.upsert(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}", obj)

    def policy_change(self, serial: int) -> None:
        index = self.rng.randrange(len(self.policies))
        changed = policy(index, team=self.rng.randrange(97))
        changed["metadata"]["generation"] = 1 + serial
        self.policies[changed["metadata"]["name"]] = changed
        self.controller._set_policies(dict(self.policies))


def phase(bench: Bench, event: Event | None, rate: float, duration: float) -> float:
    """% of one core the process spent while `event` came `rate` times a second (None: nothing came)."""
    stop = threading.Event()
    loop = threading.Thread(target=bench.controller.loop, args=(stop,), daemon=True)
    loop.start()
    time.sleep(1.0)
    began, cpu = time.monotonic(), cpu_seconds()
    count = 0
    while time.monotonic() < began + duration:
        count += 1
        if event is not None:
            event(count)
        time.sleep(max(0.0, began + count / rate - time.monotonic()))
    share = (cpu_seconds() - cpu) / (time.monotonic() - began) * 100
    stop.set()
    loop.join(5)
    return round(share, 2)


def profile(bench: Bench, changes: int) -> str:
    """The functions that took most of `changes` relabels (each handed over, then the loop's turn), per change."""
    profiler = cProfile.Profile(time.process_time)  # CPU, not wall time: a rename waits on the disk
    profiler.enable()
    for serial in range(1, changes + 1):
        bench.relabel(10_000 + serial)
        bench.controller.follow_labels()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(18)
    total: float = stats.total_tt  # type: ignore[attr-defined]
    return f"{changes} relabels, {total / changes * 1e3:.3f} ms of CPU per change\n" + text.getvalue()


def measure(namespaces: int, policies: int, nodes: int, claims: int, rate: float, duration: float,
            profiled: int = 0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="placer-events-") as directory:
        bench = Bench(Path(directory), namespaces, policies, nodes, claims)
        labelled = bench.api.writes
        idle = phase(bench, None, rate, duration)
        row: dict[str, Any] = {"labelled_at_start": labelled, "idle_pct": idle}
        for name, event in (("namespace_relabel", bench.relabel), ("node_change", bench.node_change),
                            ("claim_change", bench.claim_change), ("policy_change", bench.policy_change)):
            share = phase(bench, event, rate, duration)
            row[name] = {"pct": share, "ms_per_event": round((share - idle) / 100 / rate * 1e3, 3)}
        row["profile"] = profile(bench, profiled) if profiled else None
        row["namespaces_looked_at"] = bench.controller.enforce_labels.looked_at
        return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--namespaces", type=int, default=10_000)
    parser.add_argument("--policies", type=int, default=51)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--claims", type=int, default=5_000)
    parser.add_argument("--rate", type=float, default=10.0, help="events a second")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per kind of event")
    parser.add_argument("--profile", type=int, default=0, help="relabels to profile (0: none)")
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {args.namespaces} namespaces, {args.policies} "
          f"policies (every tenth Enforced), {args.nodes} nodes, {args.claims} claims, {args.rate:g} events/s",
          flush=True)
    row = measure(args.namespaces, args.policies, args.nodes, args.claims, args.rate, args.duration, args.profile)
    profiled = row.pop("profile")
    print(json.dumps(row), flush=True)
    if profiled:
        print(profiled, flush=True)


if __name__ == "__main__":
    main()
