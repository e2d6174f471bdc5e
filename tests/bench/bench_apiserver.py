"""What Placer adds to a create, through a real API server: the measurement users feel.

    PLACER_E2E_KUBECONFIG=~/.kube/config .venv/bin/python -m tests.bench.bench_apiserver [--duration 10]
        [--rounds 3]

Placer is reached as the cluster tier reaches it (tests/cluster/harness.py): started on this machine with
`--kube` and registered by URL (the API server must reach this machine: PLACER_E2E_WEBHOOK_HOST / _PORT), or
already deployed from `deploy/` (PLACER_E2E_IN_CLUSTER=1, the way to measure it as users run it). Three
namespaces are made for the run, and deleted after it:

- `no webhook`: not opted in, so the API server does not call Placer (the webhooks' namespaceSelector);
- `opted in, no policy`: opted in, but no policy selects it: Placer is called and answers without a patch;
- `2 rules`: opted in and labelled `node-pool: ml`; the 2-rule policy of bench_direct (a node selector from
  that label, a GPU toleration), selecting this namespace only, patches every create.

The Pod of tests/fixtures/manifests/pod-bare.yaml (a GPU limit) is POSTed with `?dryRun=All`, the same body
every time, over keep-alive TLS with the kubeconfig's credentials, by the asyncio load generator in separate
processes: at 1 connection for p50 / p99, at 8 for creates/s. The paths are measured in turn, `--rounds`
times; the summary gives each path's medians and, against `no webhook` in the same round, what the webhook
adds to p50 and p99 and the create rate's ratio. Before measuring, one create in each namespace checks that
the path is what it says (patched only in `2 rules`).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.bench.bench_direct import TWO_RULES
from tests.bench.loadgen import Client, load
from tests.cluster.harness import E2E_NAME, KUBECONFIG_ENV, Cluster, NoRouteBack, placer_on_cluster, wait_until
from tests.conftest import REPO
from webhook.actions.metadata import APPLIED_ANNOTATION
from webhook.kube.connection import ClusterConnection, ConnectionSetupError

PATHS = ("no webhook", "opted in, no policy", "2 rules")
SELECTING_LABEL = "placer-e2e-bench"
"""The label the 2-rule policy's namespaceSelector asks for: on the `2 rules` namespace only."""
POLICY = "bench-two-rules"
POD_MANIFEST = REPO / "tests/fixtures/manifests/pod-bare.yaml"
TARGETS = "targets: the webhook adds ≤ 1.5 ms p50 / ≤ 4 ms p99 at 1 connection; ≥ 0.7 times the no-webhook rate at 8"


class OtherPolicies(RuntimeError):
    """SchedulingPolicies this run did not make act in its namespaces (a policy without a namespaceSelector
    selects every opted-in namespace): nothing to measure until they are out of the way."""


def pod_body() -> bytes:
    manifest = yaml.safe_load(POD_MANIFEST.read_text())
    manifest["metadata"].pop("namespace", None)
    return json.dumps(manifest, separators=(",", ":")).encode()


def two_rule_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(TWO_RULES)["spec"]
    spec["namespaceSelector"] = {"matchLabels": {SELECTING_LABEL: "selected"}}
    return spec


def client_for(connection: ClusterConnection) -> Client:
    """The load generator's view of the kubeconfig: its CA (verified as the API server's), client certificate,
    TLS server name and bearer token (taken once: a run lasts minutes)."""
    authorization = connection.authorization()
    return Client(ca=connection.ca_file if connection.verify else None, cert=connection.cert_file,
                  key=connection.key_file, server_name=connection.tls_server_name,
                  headers=(("Authorization", authorization),) if authorization else ())


def applied(created: dict[str, Any]) -> set[str]:
    """The rules Placer applied to the created Pod (its `placer.dev/applied` annotation)."""
    value = ((created.get("metadata") or {}).get("annotations") or {}).get(APPLIED_ANNOTATION, "")
    return {rule for rule in value.split(",") if rule}


def patched(created: dict[str, Any]) -> bool:
    """Whether the created Pod carries what the 2-rule policy adds."""
    spec = created.get("spec") or {}
    tolerated = any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations") or [])
    return (spec.get("nodeSelector") or {}).get("node-pool") == "ml" and tolerated


def prepare(cluster: Cluster, body: bytes) -> dict[str, str]:
    """The three namespaces and the policy, once Placer patches creates in the selected one, and only there
    and only with the policy's two rules. OtherPolicies when the cluster's own SchedulingPolicies act there
    too (the paths would be something else: said, not measured)."""
    namespaces = {
        "no webhook": cluster.namespace({"node-pool": "ml"}, opted_in=False),
        "opted in, no policy": cluster.namespace({"node-pool": "ml"}),
        "2 rules": cluster.namespace({"node-pool": "ml", SELECTING_LABEL: "selected"}),
    }
    cluster.policy(POLICY, two_rule_spec())
    pod = json.loads(body)

    def create(path: str) -> dict[str, Any]:
        return cluster.api.create(f"/api/v1/namespaces/{namespaces[path]}/pods", pod, {"dryRun": "All"})

    wait_until(lambda: patched(create("2 rules")), timeout=60, what="Placer to serve the 2-rule policy")
    rules = {f"{E2E_NAME}-{POLICY}/{rule['name']}" for rule in two_rule_spec()["rules"]}
    expected: dict[str, set[str]] = {"no webhook": set(), "opted in, no policy": set(), "2 rules": rules}
    for path in PATHS:
        created = create(path)
        foreign = sorted(rule for rule in applied(created) if not rule.startswith(f"{E2E_NAME}-"))
        if foreign:
            raise OtherPolicies(f"SchedulingPolicies of this cluster select the {path!r} namespace too ({foreign}): "
                                "the paths would not be what they say")
        if applied(created) != expected[path] or patched(created) != (path == "2 rules"):
            raise AssertionError(f"the {path!r} namespace's create came back with rules {sorted(applied(created))}, "
                                 f"not {sorted(expected[path])}")
    return namespaces


def measure(cluster: Cluster, *, duration: float, rounds: int,
            report: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every path at 1 and 8 connections, `rounds` times in turn; returns the summary rows."""
    body = pod_body()
    namespaces = prepare(cluster, body)
    client = client_for(cluster.connection)
    server = cluster.connection.server.rstrip("/")
    measured: dict[str, list[dict[str, Any]]] = {path: [] for path in PATHS}
    for round_index in range(rounds):
        report(f"round {round_index + 1} of {rounds}")
        for path in PATHS:
            url = f"{server}/api/v1/namespaces/{namespaces[path]}/pods?dryRun=All"
            one = load(url, body, connections=1, duration=duration, client=client)
            eight = load(url, body, connections=8, duration=duration, client=client, processes=2)
            row = {"p50": one["p50_ms"], "p99": one["p99_ms"], "rate": eight["rps"],
                   "requests": one["requests"] + eight["requests"], "errors": one["errors"] + eight["errors"]}
            measured[path].append(row)
            report(f"  {path:<22} p50 {row['p50']:6.2f} ms  p99 {row['p99']:6.2f} ms  at 8: {row['rate']:7.1f}/s"
                   f"  errors {row['errors']}")
    return summarise(measured)


def summarise(measured: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Medians per path, and per round against `no webhook`: what the path adds and its rate's ratio."""
    base = measured["no webhook"]
    rows = []
    for path, rounds in measured.items():
        rows.append({
            "path": path,
            "p50": statistics.median(r["p50"] for r in rounds),
            "p99": statistics.median(r["p99"] for r in rounds),
            "rate": statistics.median(r["rate"] for r in rounds),
            "added_p50": statistics.median(r["p50"] - b["p50"] for r, b in zip(rounds, base, strict=True)),
            "added_p99": statistics.median(r["p99"] - b["p99"] for r, b in zip(rounds, base, strict=True)),
            "ratio": statistics.median(r["rate"] / b["rate"] if b["rate"] else 0.0
                                       for r, b in zip(rounds, base, strict=True)),
            "requests": sum(r["requests"] for r in rounds),
            "errors": sum(r["errors"] for r in rounds),
        })
    return rows


def print_summary(rows: list[dict[str, Any]], rounds: int) -> None:
    print(f"median of {rounds} round(s); added and ratio against `no webhook` in the same round")
    print(f"{'path':<22} {'p50 ms':>7} {'p99 ms':>7} {'added p50':>10} {'added p99':>10} {'creates/s at 8':>15}"
          f" {'ratio':>6} {'errors':>7}")
    for row in rows:
        print(f"{row['path']:<22} {row['p50']:7.2f} {row['p99']:7.2f} {row['added_p50']:+10.2f} "
              f"{row['added_p99']:+10.2f} {row['rate']:15.1f} {row['ratio']:6.2f} {row['errors']:7d}")
    print(TARGETS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", default=os.environ.get(KUBECONFIG_ENV),
                        help=f"the cluster (default: ${KUBECONFIG_ENV})")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load per path and connection count")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if not args.kubeconfig:
        parser.error(f"no cluster: pass --kubeconfig or set {KUBECONFIG_ENV}")
    try:
        with (tempfile.TemporaryDirectory() as workdir,
              placer_on_cluster(Path(args.kubeconfig), Path(workdir)) as cluster):
            rows = measure(cluster, duration=args.duration, rounds=args.rounds,
                           report=lambda line: print(line, flush=True))
    except (OtherPolicies, NoRouteBack, ConnectionSetupError) as problem:
        parser.exit(2, f"bench_apiserver: {problem}\n")
    print_summary(rows, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
