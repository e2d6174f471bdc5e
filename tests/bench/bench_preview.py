"""What `kubectl placer preview` costs on a big cluster: one changed policy over many live workloads.

    python -m tests.bench.bench_preview [--workloads 1000] [--namespaces 20] [--nodes 50]

The fake API server (tests.kube.fake_apiserver, over TLS on 127.0.0.1) holds `--workloads` Deployments as
kube-apiserver stores them (the captured v1.34 Deployment, with status and managedFields), spread over
`--namespaces` namespaces, half of them team ml's, half team web's; `--nodes` nodes (a tenth of them the
tainted GPU pool); and the policy of docs/examples/changing-policies/gpu-pool.yaml, under which every
workload was admitted (each stored as Placer left it). The change is that page's gpu-pool-v2.yaml, which
moves team ml to a pool no node has: every team ml workload changes and is stranded. Measured: the whole
command, as a user runs it (`kubectl placer preview -f gpu-pool-v2.yaml -A`: reading policies, workloads,
namespaces and nodes, judging each workload twice, the placement checks, the text report), wall and CPU
seconds, best of `--runs`.
"""

import argparse
import contextlib
import copy
import io
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO, fixture_request
from tests.kube.fake_apiserver import DEPLOYMENTS, NODES, FakeApiServer
from webhook.admission.offline import apply_manifests
from webhook.commands.certs import issue
from webhook.commands.cli import kubectl_main

EXAMPLES = REPO / "docs/examples/changing-policies"


def stored_deployment(namespace: str, index: int) -> dict[str, Any]:
    obj: dict[str, Any] = copy.deepcopy(fixture_request("deployment-update-label-real")["request"]["oldObject"])
    obj["metadata"].update(name=f"web-{index}", namespace=namespace)
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"):
        obj["metadata"].pop(key, None)
    return obj


def populate(apiserver: FakeApiServer, *, workloads: int, namespaces: int, nodes: int) -> None:
    """The cluster described in the module docstring, every workload admitted under gpu-pool.yaml."""
    names = [f"{'ml' if i % 2 == 0 else 'web'}-{i}" for i in range(namespaces)]
    for name in names:
        apiserver.put_namespace(name, {"team": name[:name.index("-")]})
    for index in range(nodes):
        gpu = index < max(1, nodes // 10)
        node = apiserver.put_node(
            f"{'gpu' if gpu else 'general'}-{index}", {"node-pool": "gpu" if gpu else "general"},
            taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}] if gpu else None)
        if gpu:  # the captured Deployment asks for one GPU
            node["status"]["allocatable"]["nvidia.com/gpu"] = "8"
            apiserver.put(NODES, node)
    for policy in yaml.safe_load_all((EXAMPLES / "gpu-pool.yaml").read_text()):
        apiserver.put_policy(policy)
    for offset, name in enumerate(names):
        report = apply_manifests(
            policy_paths=[str(EXAMPLES / "gpu-pool.yaml")], manifest_paths=[],
            namespace_labels={"team": name[:name.index("-")]},
            objects=[(f"bench:{i}", stored_deployment(name, i)) for i in range(offset, workloads, namespaces)])
        for result in report.results:
            apiserver.put(DEPLOYMENTS, result.mutated)
    assert len(apiserver.objects[NODES]) == nodes


def measure(*, workloads: int = 1000, namespaces: int = 20, nodes: int = 50, runs: int = 3) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="placer-bench-preview-") as temporary:
        workdir = Path(temporary)
        certs = issue(workdir / "certs", ["localhost", "127.0.0.1"], common_name="localhost")
        apiserver = FakeApiServer().serve(certs.cert, certs.key)
        try:
            kubeconfig = apiserver.kubeconfig(workdir / "kubeconfig", certs.ca_cert)
            populate(apiserver, workloads=workloads, namespaces=namespaces, nodes=nodes)
            best: tuple[float, float] | None = None
            printed = ""
            code = -1
            for _ in range(runs):
                out = io.StringIO()
                wall, cpu = time.perf_counter(), _cpu()
                with contextlib.redirect_stdout(out):
                    code = kubectl_main(["preview", "-f", str(EXAMPLES / "gpu-pool-v2.yaml"), "-A",
                                         "--kubeconfig", str(kubeconfig)])
                taken = (time.perf_counter() - wall, _cpu() - cpu)
                best = taken if best is None or taken[0] < best[0] else best
                printed = out.getvalue()
        finally:
            apiserver.shutdown()
    assert best is not None
    return {"workloads": workloads, "namespaces": namespaces, "nodes": nodes, "exit": code,
            "summary": printed.splitlines()[-1], "wall_s": best[0], "cpu_s": best[1]}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    row = measure(workloads=args.workloads, namespaces=args.namespaces, nodes=args.nodes, runs=args.runs)
    print(f"kubectl placer preview -f gpu-pool-v2.yaml -A: {row['workloads']} live workloads in "
          f"{row['namespaces']} namespaces, {row['nodes']} nodes")
    print(f"  {row['summary']}")
    print(f"  exit {row['exit']}; {row['wall_s']:.2f} s wall, {row['cpu_s']:.2f} s CPU (best of {args.runs})")


if __name__ == "__main__":
    main()
