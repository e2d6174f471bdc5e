"""Server benchmark: `placer serve` (granian, TLS, 127.0.0.1) under keep-alive load from separate processes.

    python -m tests.bench.bench_server [--duration 10] [--connections 1,8,32] [--workers 2]

Loads `/mutate` (50 rules, the ~8 KB Deployment of bench_engine) and, as the stack's floor, `GET /healthz`
on the same server, at each connection count, with tests.bench.loadgen; then prints throughput,
p50/p99/p999 latency and the RSS of every worker. `--soak N` instead sends N admissions and samples
worker RSS along the way (growth after warm-up would be a leak); with `--library-calls` a policy calling
Kubernetes' CEL library functions on the object (quantity, regex, lists, URL, IP, semver, format: the calls
cel-expr-python leaks) is added, and the soak shows workers replaced at `--cel-leak-budget-mib` with RSS
bounded:

    python -m tests.bench.bench_server --soak 1000000 --library-calls --cel-leak-budget-mib 64
"""

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.bench.bench_engine import deployment, policies
from tests.bench.loadgen import load
from tests.e2e.server import RunningServer, running_server
from webhook.commands.certs import issue

NAMESPACES = """apiVersion: v1
kind: Namespace
metadata:
  name: team-a
  labels: {placer.dev/inject: enabled, environment: production, team: ml}
"""


LIBRARY_POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: kubernetes-libraries}
spec:
  rules:
  - name: library-calls
    condition: >-
      object.spec.template.spec.containers.exists(c, has(c.resources) && has(c.resources.requests)
      && 'memory' in c.resources.requests && quantity(c.resources.requests.memory).isGreaterThan(quantity('1Mi')))
      && object.metadata.name.find('[a-z]+') != ''
      && object.spec.template.spec.containers.map(c, c.name).indexOf(object.spec.template.spec.containers[0].name) == 0
      && isURL('https://' + object.metadata.name + '.example/path?q=1')
      && url('https://' + object.metadata.name + '.example/').getHostname().endsWith('.example')
      && ip('10.0.0.' + string(size(object.spec.template.spec.containers) % 200)).family() == 4
      && semver('1.' + string(size(object.spec.template.spec.containers)) + '.0').major() == 1
      && !format.dns1123Label().validate(object.metadata.name).hasValue()
    action: add-labels
    parameters: {libraries: used}
"""


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker_rss(server: RunningServer) -> list[float]:
    values = []
    for pid in server.worker_pids():
        try:
            values.append(round(rss_mb(pid), 1))
        except OSError:
            continue  # a worker that was being replaced
    return values


def prepare(workdir: Path, rules: int, library_calls: bool = False) -> tuple[Path, Path, Any]:
    policy_dir = workdir / "policies"
    policy_dir.mkdir()
    for index, text in enumerate(policies(rules)):
        (policy_dir / f"bench-{index}.yaml").write_text(text)
    if library_calls:
        (policy_dir / "kubernetes-libraries.yaml").write_text(LIBRARY_POLICY)
    (policy_dir / "namespaces.yaml").write_text(NAMESPACES)
    body = workdir / "review.json"
    body.write_text(json.dumps(deployment(8_000)))
    certs = issue(workdir / "certs", ["localhost", "127.0.0.1"], common_name="localhost")
    return policy_dir, body, certs


def run(duration: float, connections: list[int], workers: int, rules: int,
        processes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="placer-bench-") as tmp:
        workdir = Path(tmp)
        policy_dir, body, certs = prepare(workdir, rules)
        extra = ["--workers", str(workers), "--log-level", "warning"]
        with running_server(workdir, certs, policies=policy_dir, extra=extra) as server:
            payload = body.read_bytes()
            load(server.url + "/mutate?timeout=5s", payload, connections=4, duration=2, ca=str(certs.ca_cert))
            rows = []
            for count in connections:
                for path, data in (("/mutate?timeout=5s", payload), ("/healthz", None)):
                    summary = load(server.url + path, data, connections=count, duration=duration,
                                   ca=str(certs.ca_cert), processes=min(processes, count))
                    rows.append({"endpoint": path.split("?")[0], **summary})
            return {"rows": rows, "rss_mb": worker_rss(server), "workers": workers,
                    "rules": rules, "body_bytes": len(payload)}


def soak(requests: int, connections: int, workers: int, rules: int, every: float, *,
         library_calls: bool = False, leak_budget_mib: float | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="placer-soak-") as tmp:
        workdir = Path(tmp)
        policy_dir, body, certs = prepare(workdir, rules, library_calls)
        extra = ["--workers", str(workers), "--log-level", "warning"]
        if leak_budget_mib is not None:
            extra += ["--cel-leak-budget-mib", str(leak_budget_mib)]
        with running_server(workdir, certs, policies=policy_dir, extra=extra) as server:
            samples: list[tuple[float, list[float]]] = []
            done = threading.Event()
            started = time.monotonic()

            seen: set[int] = set()

            def sample() -> None:
                while not done.wait(every):
                    seen.update(server.worker_pids())
                    samples.append((round(time.monotonic() - started, 1), worker_rss(server)))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            summary = load(server.url + "/mutate?timeout=5s", body.read_bytes(), connections=connections,
                           duration=24 * 3600, ca=str(certs.ca_cert), limit=requests)
            done.set()
            sampler.join()
            samples.append((round(time.monotonic() - started, 1), worker_rss(server)))
            seen.update(server.worker_pids())
            return {"summary": summary, "samples": samples, "workers_seen": len(seen)}


def print_run(result: dict[str, Any]) -> None:
    print(f"placer serve: {result['workers']} workers, {result['rules']} rules, "
          f"{result['body_bytes']} B AdmissionReview, TLS, keep-alive")
    print(f"{'endpoint':10} {'conns':>5} {'requests':>9} {'errors':>6} {'rps':>8} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'p999 ms':>8}")
    for row in result["rows"]:
        print(f"{row['endpoint']:10} {row['connections']:>5} {row['requests']:>9} {row['errors']:>6} "
              f"{row['rps']:>8.0f} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} {row['p999_ms']:>8.2f}")
    by = {(row["endpoint"], row["connections"]): row["rps"] for row in result["rows"]}
    for count in sorted({row["connections"] for row in result["rows"]}):
        if by.get(("/healthz", count)):
            print(f"/mutate / /healthz throughput at {count} connections: "
                  f"{by[('/mutate', count)] / by[('/healthz', count)]:.2f}")
    print(f"RSS per worker (MB): {result['rss_mb']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--connections", default="1,8,32")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rules", type=int, default=50)
    parser.add_argument("--processes", type=int, default=1, help="load generator processes")
    parser.add_argument("--soak", type=int, default=0, help="send this many admissions and sample RSS")
    parser.add_argument("--sample-every", type=float, default=10.0)
    parser.add_argument("--library-calls", action="store_true",
                        help="add a policy calling Kubernetes CEL library functions (soak)")
    parser.add_argument("--cel-leak-budget-mib", type=float, default=None)
    args = parser.parse_args()
    if args.soak:
        result = soak(args.soak, 8, args.workers, args.rules, args.sample_every,
                      library_calls=args.library_calls, leak_budget_mib=args.cel_leak_budget_mib)
        print(json.dumps(result["summary"]))
        print(f"workers started over the run: {result['workers_seen']} ({args.workers} at a time)")
        for at, values in result["samples"]:
            print(f"t={at:>7.1f}s  worker RSS MB: {values}")
        return
    print_run(run(args.duration, [int(c) for c in args.connections.split(",")], args.workers,
                  args.rules, args.processes))


if __name__ == "__main__":
    main()
