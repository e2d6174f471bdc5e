"""In-process engine benchmark: µs per admission, split into decode, engine, encode.

    python -m tests.bench.bench_engine [--iterations N]

Objects are the API server's captured requests, enlarged to realistic sizes (an ~8 KB Deployment with
sidecars and env, a ~50 KB one). Rules are a realistic mix: every action, conditions on namespace labels,
resources, replicas and images; about a third match. Not part of the test run (timings on shared machines
are noisy); tests/bench/test_bench_smoke.py runs it with tiny iteration counts to keep it working.
"""

import argparse
import copy
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from tests.conftest import fixture_request
from tests.helpers import snapshot_of
from webhook.pipeline import admit
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.review import decode_json, parse_review
from webhook.workloads import default_workload_table

NAMESPACE = NamespaceInfo("team-a", {"placer.dev/inject": "enabled", "environment": "production", "team": "ml"})

RULE_SHAPES = [
    ("namespaceObject.metadata.labels['environment'] == 'production'", "add-node-selector", "{{env-{i}: prod}}"),
    ("'nvidia.com/gpu' in resources.limits", "add-toleration", "{{key: gpu-{i}, value: 'yes', effect: NoSchedule}}"),
    ("workload.replicas >= 3", "add-topology-spread", "{{topologyKey: topo-{i}, maxSkew: 1}}"),
    ("pod.spec.containers.exists(c, c.image.startsWith('registry.corp/'))", "add-labels", "{{l-{i}: v}}"),
    ("resources.requests['cpu'] > 64.0", "add-node-affinity", "{{key: big-{i}, operator: Exists}}"),
    ("pod.metadata.?labels.?tier.orValue('') == 'db'", "add-pod-anti-affinity", "{{topologyKey: host-{i}}}"),
    ("request.userInfo.groups.exists(g, g == 'ml-admins')", "set-priority-class", "{{priorityClassName: p{i}}}"),
    ("workload.kind == 'StatefulSet'", "add-annotations", "{{a-{i}: v}}"),
    ("variables.gpus > 4.0", "add-node-selector", "{{huge-{i}: 'true'}}"),
    ("namespaceObject.metadata.labels['team'] == 'ml' && workload.replicas < 100", "add-toleration",
     "{{key: team-{i}, operator: Exists}}"),
]


def policies(rule_count: int, per_policy: int = 10) -> list[str]:
    texts = []
    for start in range(0, rule_count, per_policy):
        rules = ""
        for i in range(start, min(rule_count, start + per_policy)):
            condition, action, parameters = RULE_SHAPES[i % len(RULE_SHAPES)]
            rules += f"  - name: r{i}\n    condition: {condition!r}\n    action: {action}\n"
            rules += f"    parameters: {parameters.format(i=i)}\n"
        texts.append(
            f"apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: bench-{start}}}\nspec:\n"
            f"  priority: {start}\n  variables:\n  - name: gpus\n    expression: \"resources.limits[?'nvidia.com/gpu']"
            f".orValue(0.0)\"\n  rules:\n{rules}"
        )
    return texts


def deployment(target_bytes: int) -> dict[str, Any]:
    """The captured Deployment CREATE, grown with containers and env vars to about `target_bytes`."""
    body = fixture_request("deployment-create-dryrun")
    spec = body["request"]["object"]["spec"]["template"]["spec"]
    base = spec["containers"][0]
    index = 0
    while len(json.dumps(body)) < target_bytes:
        container = copy.deepcopy(base)
        container["name"] = f"sidecar-{index}"
        container["image"] = f"registry.corp/sidecar-{index}:1.{index}"
        container["env"] = [{"name": f"VAR_{index}_{j}", "value": f"value-{j}" * 3} for j in range(6)]
        spec["containers"].append(container)
        index += 1
    return body


def measure(step: Callable[[], Any], iterations: int) -> list[float]:
    samples = []
    for _ in range(iterations):
        started = time.perf_counter()
        step()
        samples.append((time.perf_counter() - started) * 1e6)
    return samples


def bench_case(label: str, body: dict[str, Any], snapshot: PolicySnapshot, iterations: int) -> dict[str, Any]:
    raw = json.dumps(body).encode()
    table = default_workload_table()
    request = parse_review(decode_json(raw))
    admission = admit(request, snapshot, table)
    decode = measure(lambda: parse_review(decode_json(raw)), iterations)
    engine = measure(lambda: admit(request, snapshot, table), iterations)
    encode = measure(lambda: json.dumps(admission.response, separators=(",", ":")), iterations)
    total = measure(lambda: json.dumps(admit(parse_review(decode_json(raw)), snapshot, table).response), iterations)
    return {
        "case": label,
        "bytes": len(raw),
        "decode": statistics.median(decode),
        "engine": statistics.median(engine),
        "encode": statistics.median(encode),
        "total_p50": statistics.median(total),
        "total_p99": sorted(total)[int(len(total) * 0.99) - 1],
        "patch_ops": len(admission.mutation.patch),
    }


def run(iterations: int) -> list[dict[str, Any]]:
    results = []
    pod = fixture_request("pod-complex-create-dryrun")
    eight_kb, fifty_kb = deployment(8_000), deployment(50_000)
    for rules in (0, 10, 50, 200):
        snapshot = snapshot_of(*policies(rules), namespaces=[NAMESPACE]) if rules else snapshot_of(namespaces=[NAMESPACE])
        results.append(bench_case(f"Deployment ~8KB, {rules} rules", eight_kb, snapshot, iterations))
        results.append(bench_case(f"Pod, {rules} rules", pod, snapshot, iterations))
    snapshot = snapshot_of(*policies(50), namespaces=[NAMESPACE])
    results.append(bench_case("Deployment ~50KB, 50 rules", fifty_kb, snapshot, iterations))
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    print(f"{'case':32} {'bytes':>7} {'decode':>8} {'engine':>8} {'encode':>8} {'p50':>8} {'p99':>8} {'ops':>4}  (µs)")
    for row in run(args.iterations):
        print(f"{row['case']:32} {row['bytes']:>7} {row['decode']:>8.0f} {row['engine']:>8.0f} {row['encode']:>8.0f} "
              f"{row['total_p50']:>8.0f} {row['total_p99']:>8.0f} {row['patch_ops']:>4}")


if __name__ == "__main__":
    main()
