"""The direct table: what Placer's `/mutate` costs beside the stack's floor, on the same server (granian) and TLS.

    python -m tests.bench.bench_direct [--duration 5] [--connections 1,8,32] [--workers 2]
                                       [--cases floor,floor-busy,go,2,50,siblings,distinct] [--rounds 1] [--busy-us 450]

Cases, each served by its own server and loaded at each connection count (keep-alive TLS, one request in
flight per connection, `wrk` when installed — Debian's package — else tests.bench.loadgen):

- floor: a minimal RSGI app (tests.bench.floor_app) on granian with Placer's settings (workers, HTTP/1.1,
  TLS 1.2+), the captured Pod review; `floor-busy`: the same spending `--busy-us` of Python per request
  (holding the GIL), with the Deployment:
  the floor at about Placer's throughput, to tell the latency a throughput costs on this stack and machine
  from what Placer's path adds;
- Placer with 2 rules (a node selector from a namespace label, a GPU toleration), the captured Pod review
  (3.1 KB, what the API server sends for such a Pod);
- Placer with 50 rules, the same Pod review, and the 8.5 KB Deployment of bench_engine;
- `siblings`: Placer with 2 rules, the Pods of one ReplicaSet scaling to 1,000 (tests.bench.siblings: a request
  uid and a managedFields time of their own each) sent in turn, so that all but the first are answered
  from the sibling cache (webhook/admission/sibling_cache.py). The captured Pod of the other cases is a bare
  Pod, which has no siblings: each of its reviews is decided;
- `distinct`: Placer with 2 rules, 5,000 copies of the captured Pod review each with a CPU limit of its own
  (`distinct_pods`), sent in turn: the policy observes `resources.limits`, so no outcome kept for an
  earlier Pod applies (webhook/policy/observed_memo.py) and each review is evaluated, as for Pods that all
  differ. The other cases resend one Pod, whose outcomes are found kept after the first;
- `go`: the floor of any webhook answering Placer's patch: bench_apiserver's Go reference webhook (Go's HTTP/1.1
  server and TLS, tests/bench/go_reference) answering the Pod review with the patch Placer answers it with 2
  rules (its worker CPU: the Go process's). Left out, with the reason, when `go` is not on PATH.

Printed per row: requests/s, p50 and p99 latency, CPU seconds per 1,000 requests (the workers' utime +
stime from /proc, summed over workers, before and after the run), the whole machine's CPU seconds per 1,000
requests (every process and the kernel's interrupt work: the workers, the load generator and the TCP
loopback between them), the share of the run the machine's CPUs were stolen by its host (`steal`, a
virtual machine's neighbours), and worker RSS. When the machine is busy all the time, its CPU seconds per
request are what bounds req/s: `CPUs x 1000 / machine CPU s/1k`.

A shared machine's speed drifts by 10-50 % within minutes (a neighbour's load), more than most changes
worth measuring. `--rounds N` runs every case N times in turn (floor, 2, 50, floor, 2, 50, ...) and then
prints each row's median over the rounds, the range of its req/s, and its CPU per request as a multiple of
the floor's in the same round and connection count (a ratio the drift mostly cancels out of).
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

from tests.bench.bench_engine import deployment, policies
from tests.bench.bench_server import NAMESPACES, rss_mb
from tests.bench.floor_app import granian_command
from tests.bench.loadgen import load
from tests.bench.reference_webhook import NoGo, build
from tests.bench.siblings import replicaset_pods
from tests.conftest import fixture_request
from tests.e2e.server import free_port, running_server
from webhook.commands.certs import issue

TWO_RULES = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: two-rules}
spec:
  rules:
  - name: pool-from-namespace
    condition: "'node-pool' in namespaceObject.metadata.labels"
    action: add-node-selector
    parameterExpressions:
      node-pool: "namespaceObject.metadata.labels['node-pool']"
  - name: gpu-toleration
    condition: "'nvidia.com/gpu' in resources.limits"
    action: add-toleration
    parameters: {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
"""
NAMESPACE_WITH_POOL = NAMESPACES.replace("team: ml}", "team: ml, node-pool: ml}")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SIBLINGS = 1000
"""The `siblings` case: Pods of one ReplicaSet as it scales to this many (tests.bench.siblings), sent in turn."""


DISTINCT = 5000
"""The `distinct` case: this many Pods, more than an observed memo keeps (webhook/policy/observed_memo.KEPT)."""


def distinct_pods(count: int, start: int = 0) -> list[bytes]:
    """`count` copies of the captured Pod review, each with a CPU limit of its own (`4001m`, `4002m`...): the
    2-rule policy observes `resources.limits`, so no Pod's outcomes are those of another."""
    review = fixture_request("pod-bare-create-dryrun")
    found = []
    for index in range(start, start + count):
        review["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = f"{4001 + index}m"
        found.append(json.dumps(review).encode())
    return found


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLOCK_TICKS


def machine_cpu() -> tuple[float, float, float]:
    """Seconds since boot the machine's CPUs were busy (user, nice, system, irq, softirq), stolen by the host,
    and counted at all (every field of /proc/stat's `cpu` line)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    # guest time is counted in user time already
    return ((user + nice + system + irq + softirq) / CLOCK_TICKS, steal / CLOCK_TICKS,
            sum(fields[:8]) / CLOCK_TICKS)


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


@contextlib.contextmanager
def floor_server(workdir: Path, certs: Any, workers: int, busy_us: int | None = None, routes: Path | None = None
                 ) -> Iterator[tuple[str, list[int]]]:
    """The floor app on granian, configured as `placer serve` configures it (webhook/server/serve.py);
    `routes`: the routed floor, answering the patches of that file (floor_app.routed)."""
    port = free_port()
    target = (["--factory", "tests.bench.floor_app:busy"] if busy_us is not None
              else ["--factory", "tests.bench.floor_app:routed"] if routes is not None
              else ["tests.bench.floor_app:app"])
    args = granian_command(host="127.0.0.1", port=port, cert=certs.cert, key=certs.key, workers=workers,
                           target=target)
    environment = {**os.environ, "FLOOR_BUSY_US": str(busy_us or 0), "FLOOR_ROUTES": str(routes or "")}
    with (workdir / "floor.log").open("wb") as output:
        process = subprocess.Popen(args, cwd=Path(__file__).resolve().parents[2], start_new_session=True,
                                   stdout=output, stderr=subprocess.STDOUT, env=environment)
    url = f"https://127.0.0.1:{port}"
    try:
        for _ in range(200):
            with contextlib.suppress(requests.RequestException):
                if (requests.post(url + "/mutate", data=b"{}", verify=str(certs.ca_cert), timeout=1).status_code == 200
                        and len(children(process.pid)) == workers):
                    break
            time.sleep(0.05)
        yield url, children(process.pid)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=15)


@contextlib.contextmanager
def placer_server(workdir: Path, certs: Any, rules: int, workers: int) -> Iterator[tuple[str, list[int]]]:
    policy_dir = workdir / f"policies-{rules}"
    policy_dir.mkdir(exist_ok=True)  # the siblings case serves the 2 rules too
    texts = [TWO_RULES] if rules == 2 else policies(rules)
    for index, text in enumerate(texts):
        (policy_dir / f"policy-{index}.yaml").write_text(text)
    (policy_dir / "namespaces.yaml").write_text(NAMESPACE_WITH_POOL)
    extra = ["--workers", str(workers), "--log-level", "info"]
    with running_server(workdir, certs, policies=policy_dir, extra=extra) as server:
        yield server.url, server.worker_pids()


def two_rule_patch(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The patch Placer answers the review `body` with, under the 2-rule policy and the bench's namespace."""
    from tests.helpers import run as run_engine  # noqa: PLC0415
    from tests.helpers import snapshot_of  # noqa: PLC0415
    from webhook.policy.snapshot import NamespaceInfo  # noqa: PLC0415

    namespace = NamespaceInfo(body["request"]["namespace"], {"node-pool": "ml"})
    return run_engine(snapshot_of(TWO_RULES, namespaces=[namespace]), body).patch


@contextlib.contextmanager
def go_server(binary: Path, workdir: Path, certs: Any, patch: list[dict[str, Any]]
              ) -> Iterator[tuple[str, list[int]]]:
    """The Go reference webhook (`binary`, from reference_webhook.build) answering `patch` on /mutate."""
    port = free_port()
    patch_file = workdir / "go-patch.json"
    patch_file.write_text(json.dumps(patch))
    with (workdir / "go.log").open("wb") as output:
        process = subprocess.Popen([str(binary), "-addr", f"127.0.0.1:{port}", "-tls-cert", str(certs.cert),
                                    "-tls-key", str(certs.key), "-route", f"/mutate={patch_file}"],
                                   stdout=output, stderr=subprocess.STDOUT)
    url = f"https://127.0.0.1:{port}"
    try:
        for _ in range(200):
            with contextlib.suppress(requests.RequestException):
                if requests.post(url + "/mutate", json=fixture_request("pod-bare-create-dryrun"),
                                 verify=str(certs.ca_cert), timeout=1).status_code == 200:
                    break
            time.sleep(0.05)
        yield url, [process.pid]
    finally:
        process.terminate()
        process.wait(timeout=15)


def request_bodies(body: Path) -> bytes | list[bytes]:
    """A body file's request body, or, from a `.jsonl` file, one body a line, sent in turn."""
    return body.read_bytes().splitlines() if body.suffix == ".jsonl" else body.read_bytes()


def wrk(url: str, body: Path, connections: int, duration: float) -> dict[str, Any]:
    script = body.with_suffix(".lua")
    head = 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
    if body.suffix == ".jsonl":  # each thread sends the bodies in turn, one a line
        script.write_text(head + f'bodies = {{}}\nfor line in io.lines("{body}") do bodies[#bodies + 1] = line end\n'
                          'sent = 0\nrequest = function()\n  sent = sent + 1\n'
                          '  return wrk.format(nil, nil, nil, bodies[(sent % #bodies) + 1])\nend\n')
    else:
        script.write_text(head + f'wrk.body = io.open("{body}", "rb"):read("*a")\n')
    seconds = f"{max(1, round(duration))}s"
    output = subprocess.run(["wrk", "-t", str(min(connections, 2)), "-c", str(connections), "-d", seconds,
                             "--latency", "-s", str(script), url], capture_output=True, text=True, check=True).stdout
    def latency(label: str) -> float:
        match = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", output, re.M)
        if not match:
            return float("nan")
        return float(match.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[match.group(2)]
    requests_done = int(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    errors = sum(int(n) for n in re.findall(r"(?:Non-2xx or 3xx responses|Socket errors: .*?):?\s+(\d+)", output))
    return {"requests": requests_done, "errors": errors,
            "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),  # type: ignore[union-attr]
            "p50_ms": latency("50"), "p99_ms": latency("99")}


def measure(url: str, pids: list[int], body: Path, connections: int, duration: float, ca: str) -> dict[str, Any]:
    use_wrk = shutil.which("wrk") is not None
    before, machine_before = cpu_seconds(pids), machine_cpu()
    if use_wrk:
        result = wrk(url, body, connections, duration)
    else:
        result = load(url, request_bodies(body), connections=connections, duration=duration, ca=ca,
                      processes=min(2, connections))
    spent = cpu_seconds(pids) - before
    busy, stolen, counted = (after - start for after, start in zip(machine_cpu(), machine_before, strict=True))
    result["cpu_s_per_1000"] = round(spent / max(result["requests"], 1) * 1000, 3)
    result["machine_cpu_s_per_1000"] = round(busy / max(result["requests"], 1) * 1000, 3)
    result["steal_pct"] = round(100 * stolen / counted, 1) if counted > 0 else 0.0
    result["rss_mb"] = [round(rss_mb(pid), 1) for pid in pids]
    result["generator"] = "wrk" if use_wrk else "loadgen"
    return result


def run(duration: float, connections: list[int], workers: int, *, quiet: bool = False,
        big: bool = True, only: frozenset[str] = frozenset({"floor", "2", "50", "siblings"}), busy_us: int = 450
        ) -> list[dict[str, Any]]:
    """Every case in `only` (floor, floor-busy, go, 2, 50, siblings, distinct), loaded at each connection count; one
    row each."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="placer-direct-") as tmp:
        workdir = Path(tmp)
        certs = issue(workdir / "certs", ["localhost", "127.0.0.1"], common_name="localhost")
        pod = workdir / "pod.json"
        pod.write_text(json.dumps(fixture_request("pod-bare-create-dryrun")))
        deployment_body = workdir / "deployment.json"
        deployment_body.write_text(json.dumps(deployment(8_500)))
        siblings = workdir / "replicaset-pods.jsonl"
        siblings.write_bytes(b"\n".join(replicaset_pods(SIBLINGS)) + b"\n")
        distinct = workdir / "distinct-pods.jsonl"
        if "distinct" in only:
            distinct.write_bytes(b"\n".join(distinct_pods(DISTINCT)) + b"\n")
        cases: list[tuple[str, str, int | tuple[int | None], list[Path]]] = [
            ("floor (minimal RSGI)", "floor", (None,), [pod]),
            (f"floor, {busy_us} µs busy", "floor-busy", (busy_us,), [deployment_body]),
            ("go, 2-rule patch", "go", 0, [pod]),
            ("placer, 2 rules", "2", 2, [pod]),
            ("placer, 50 rules", "50", 50, [pod, deployment_body] if big else [pod]),
            (f"placer, 2 rules, {SIBLINGS:,} siblings", "siblings", 2, [siblings]),
            (f"placer, 2 rules, {DISTINCT:,} distinct", "distinct", 2, [distinct])]
        for label, name, setup, bodies in cases:
            if name not in only:
                continue
            server: Any
            if isinstance(setup, tuple):
                server = floor_server(workdir, certs, workers, *setup)
            elif name == "go":
                try:
                    binary = build(workdir)
                except NoGo as missing:
                    print(f"{label}: left out: {missing}", flush=True)
                    continue
                server = go_server(binary, workdir, certs, two_rule_patch(fixture_request("pod-bare-create-dryrun")))
            else:
                server = placer_server(workdir, certs, setup, workers)
            with server as (url, pids):
                for body in bodies:
                    measure(url + "/mutate?timeout=10s", pids, body, 4, 1.0, str(certs.ca_cert))  # warm-up
                    for count in connections:
                        row = measure(url + "/mutate?timeout=10s", pids, body, count, duration, str(certs.ca_cert))
                        rows.append({"case": label, "body": body_label(body),
                                     "connections": count, **row})
                        if not quiet:
                            print_row(rows[-1])
    return rows


def body_label(body: Path) -> str:
    bodies = request_bodies(body)
    if isinstance(bodies, list):
        return f"{body.stem} {sum(map(len, bodies)) / len(bodies) / 1024:.1f} KB"
    return f"{body.stem} {len(bodies) / 1024:.1f} KB"


HEADER = (f"{'case':32} {'body':22} {'conns':>5} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'CPU s/1k':>9} "
          f"{'machine':>8} {'steal %':>7} {'errors':>6}  worker RSS MB")


def print_row(row: dict[str, Any]) -> None:
    print(f"{row['case']:32} {row['body']:22} {row['connections']:>5} {row['rps']:>8.0f} {row['p50_ms']:>8.2f} "
          f"{row['p99_ms']:>8.2f} {row['cpu_s_per_1000']:>9.3f} {row['machine_cpu_s_per_1000']:>8.3f} "
          f"{row['steal_pct']:>7.1f} {row['errors']:>6}  {row['rss_mb']}", flush=True)


def summarise(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each row's median over the rounds, with its req/s range and its CPU per request over the floor's (the
    floor's row in the same round at the same connection count, Pod body), when the floor was measured."""
    floors: dict[tuple[int, int], float] = {}
    for index, rows in enumerate(rounds):
        for row in rows:
            if row["case"].startswith("floor (") and row["cpu_s_per_1000"] > 0:
                floors[(index, row["connections"])] = row["cpu_s_per_1000"]
    grouped: dict[tuple[str, str, int], list[tuple[int, dict[str, Any]]]] = {}
    for index, rows in enumerate(rounds):
        for row in rows:
            grouped.setdefault((row["case"], row["body"], row["connections"]), []).append((index, row))
    summary = []
    for (case, body, connections), measured in grouped.items():
        rows = [row for _, row in measured]
        ratios = [row["cpu_s_per_1000"] / floors[(index, connections)]
                  for index, row in measured if (index, connections) in floors]
        summary.append({
            "case": case, "body": body, "connections": connections, "rounds": len(rows),
            **{key: statistics.median(row[key] for row in rows)
               for key in ("rps", "p50_ms", "p99_ms", "cpu_s_per_1000", "machine_cpu_s_per_1000", "steal_pct")},
            "rps_range": (min(row["rps"] for row in rows), max(row["rps"] for row in rows)),
            "cpu_over_floor": statistics.median(ratios) if ratios else None,
            "errors": sum(row["errors"] for row in rows),
        })
    return summary


SUMMARY_HEADER = (f"{'case':32} {'body':22} {'conns':>5} {'req/s':>8} {'req/s range':>13} {'p50 ms':>8} {'p99 ms':>8} "
                  f"{'CPU s/1k':>9} {'x floor':>7} {'machine':>8} {'steal %':>7} {'errors':>6}")


def print_summary_row(row: dict[str, Any]) -> None:
    low, high = row["rps_range"]
    ratio = f"{row['cpu_over_floor']:.2f}" if row["cpu_over_floor"] is not None else "-"
    print(f"{row['case']:32} {row['body']:22} {row['connections']:>5} {row['rps']:>8.0f} "
          f"{f'{low:.0f}-{high:.0f}':>13} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} "
          f"{row['cpu_s_per_1000']:>9.3f} {ratio:>7} {row['machine_cpu_s_per_1000']:>8.3f} {row['steal_pct']:>7.1f} "
          f"{row['errors']:>6}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", default="1,8,32")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cases", default="floor,2,50,siblings",
                        help="which of: floor, floor-busy (the floor spending --busy-us of Python per request, "
                             "with the Deployment), go (the Go webhook answering Placer's 2-rule patch), 2 (rules), "
                             "50 (rules), siblings (2 rules, the Pods of one ReplicaSet in turn), distinct (2 rules, "
                             "5,000 Pods each with a CPU limit of its own, in turn)")
    parser.add_argument("--busy-us", type=int, default=450,
                        help="the Python work per request of the floor-busy case, µs (about what Placer's 50 rules "
                             "add to the floor for the Deployment)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every case this many times in turn, then print each row's median")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, granian, {args.workers} workers, TLS, keep-alive, "
          f"load from {'wrk' if shutil.which('wrk') else 'tests.bench.loadgen'}")
    rounds = []
    for index in range(max(args.rounds, 1)):
        if args.rounds > 1:
            print(f"round {index + 1} of {args.rounds}, {time.strftime('%H:%M:%S')}")
        print(HEADER, flush=True)
        rounds.append(run(args.duration, [int(c) for c in args.connections.split(",")], args.workers,
                          only=frozenset(args.cases.split(",")), busy_us=args.busy_us))
    if args.rounds > 1:
        print(f"median of {args.rounds} rounds (x floor: CPU per request over the floor's in the same round)")
        print(SUMMARY_HEADER)
        for row in summarise(rounds):
            print_summary_row(row)


if __name__ == "__main__":
    main()
