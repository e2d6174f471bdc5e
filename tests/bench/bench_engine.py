"""In-process engine benchmark: µs per admission, split into decode, engine, encode, and the engine's phases.

    python -m tests.bench.bench_engine [--iterations N]

The second table splits the engine's time into building the activation (`pod`, `resources`, `workload`,
the CEL activation), evaluating conditions and expressions (CEL), applying actions (with the rule loop's
own bookkeeping), and diffing templates into the patch. It is measured by wrapping those functions with
timers, which adds a little overhead of its own; the first table is measured without wrappers.

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
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

from tests.conftest import fixture_request
from tests.helpers import snapshot_of
from webhook.admission.pipeline import admit
from webhook.admission.review import decode_json, parse_review
from webhook.engine import passes as engine
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.workloads import TemplateSlot, default_workload_table

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


@contextmanager
def phase_timers() -> Iterator[dict[str, float]]:
    """Accumulate the time spent in each engine phase while the block runs (seconds, by phase)."""
    totals = {"activation": 0.0, "cel": 0.0, "diff": 0.0}

    def timed(phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                totals[phase] += time.perf_counter() - started

        return wrapper

    with ExitStack() as stack:
        for name, phase in (("pod_variable", "activation"), ("workload_variable", "activation"),
                            ("apply_sharing", "diff")):
            stack.enter_context(mock.patch.object(engine, name, timed(phase, getattr(engine, name))))
        stack.enter_context(mock.patch.object(TemplateSlot, "patch", timed("diff", TemplateSlot.patch)))
        stack.enter_context(mock.patch.object(engine.cel, "activation", timed("activation", engine.cel.activation)))
        stack.enter_context(mock.patch.object(engine.cel, "evaluate", timed("cel", engine.cel.evaluate)))
        yield totals


def phases(label: str, body: dict[str, Any], snapshot: PolicySnapshot, iterations: int) -> dict[str, Any]:
    """Mean µs per admission in each engine phase; `actions` is the rest of the engine's time."""
    table = default_workload_table()
    request = parse_review(body)
    with phase_timers() as totals:
        started = time.perf_counter()
        for _ in range(iterations):
            admit(request, snapshot, table)
        engine_total = time.perf_counter() - started
    split = {phase: seconds / iterations * 1e6 for phase, seconds in totals.items()}
    split["actions"] = engine_total / iterations * 1e6 - sum(split.values())
    return {"case": label, **split}


def run(iterations: int) -> list[dict[str, Any]]:
    results = []
    pod = fixture_request("pod-complex-create-dryrun")
    eight_kb, fifty_kb = deployment(8_000), deployment(50_000)
    for rules in (0, 10, 50, 200):
        snapshot = snapshot_of(*policies(rules), namespaces=[NAMESPACE])
        results.append(bench_case(f"Deployment ~8KB, {rules} rules", eight_kb, snapshot, iterations))
        results.append(bench_case(f"Pod, {rules} rules", pod, snapshot, iterations))
    snapshot = snapshot_of(*policies(50), namespaces=[NAMESPACE])
    results.append(bench_case("Deployment ~50KB, 50 rules", fifty_kb, snapshot, iterations))
    return results


def phase_rows(iterations: int) -> list[dict[str, Any]]:
    rows = []
    eight_kb = deployment(8_000)
    for rules in (10, 50, 200):
        snapshot = snapshot_of(*policies(rules), namespaces=[NAMESPACE])
        rows.append(phases(f"Deployment ~8KB, {rules} rules", eight_kb, snapshot, iterations))
    snapshot = snapshot_of(*policies(50), namespaces=[NAMESPACE])
    rows.append(phases("Pod, 50 rules", fixture_request("pod-complex-create-dryrun"), snapshot, iterations))
    rows.append(phases("Deployment ~50KB, 50 rules", deployment(50_000), snapshot, iterations))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    print(f"{'case':32} {'bytes':>7} {'decode':>8} {'engine':>8} {'encode':>8} {'p50':>8} {'p99':>8} {'ops':>4}  (µs)")
    for row in run(args.iterations):
        print(f"{row['case']:32} {row['bytes']:>7} {row['decode']:>8.0f} {row['engine']:>8.0f} {row['encode']:>8.0f} "
              f"{row['total_p50']:>8.0f} {row['total_p99']:>8.0f} {row['patch_ops']:>4}")
    print()
    print(f"{'engine phases (mean µs)':32} {'activation':>10} {'cel':>8} {'actions':>8} {'diff':>8}")
    for row in phase_rows(args.iterations):
        print(f"{row['case']:32} {row['activation']:>10.0f} {row['cel']:>8.0f} {row['actions']:>8.0f} "
              f"{row['diff']:>8.0f}")


if __name__ == "__main__":
    main()
