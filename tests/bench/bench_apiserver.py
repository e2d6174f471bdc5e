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
  that label, a GPU toleration), selecting this namespace only, patches every create;
- `50 rules`: opted in, with the labels bench_engine's 50 rules read; its five policies select it only;
- `Go, no patch`, `Go, 2-rule patch`, `Go, 50-rule patch`: the floor of any webhook, and of any webhook
  answering the same patch as Placer: a minimal Go webhook (tests/bench/reference_webhook.py), started here
  beside Placer and registered for namespaces of its own, answering with no patch or with the patch Placer
  answered in `2 rules` and `50 rules` (read off the cluster; a create through each must give the Pod
  Placer gave). Skipped, with the reason, when `go` is not on PATH;
- `Python floor, no patch`, `… 2-rule patch`, `… 50-rule patch`: the floor of a Python webhook, the direct
  benchmark's floor app on granian with Placer's settings (tests/bench/floor_app.py), registered and checked
  as the Go webhook is and answering the same patches: what of Placer's distance to the Go webhook belongs to
  the Python stack, and what to Placer.

The Pod of tests/fixtures/manifests/pod-bare.yaml (a GPU limit) is POSTed with `?dryRun=All`, the same body
every time, over keep-alive TLS with the kubeconfig's credentials, by the asyncio load generator in separate
processes: at 1 connection for p50 / p99, at 8 for creates/s. The paths are measured in turn, `--rounds`
times; the summary gives each path's medians and, against `no webhook` in the same round, what the webhook
adds to p50 and p99 and the create rate's ratio. Before measuring, one create in each namespace checks that
the path is what it says (patched only in `2 rules` and `50 rules`). The summary also compares Placer with the Go
webhook and with the Python floor answering the same patch, round by round: the difference of their p50 and the
ratio of their rates.
"""

import argparse
import contextlib
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
from tests.bench.bench_engine import policies as bench_policies
from tests.bench.loadgen import Client, load
from tests.bench.reference_webhook import NoGo, comparable, go_reference, patch_between, python_floor
from tests.cluster.harness import E2E_NAME, Cluster, NoRouteBack, placer_on_cluster, wait_until
from tests.conftest import KUBECONFIG_ENV, REPO
from webhook.actions.metadata import APPLIED_ANNOTATION
from webhook.cluster.client.connection import ClusterConnection, ConnectionSetupError

PLACER_PATHS = ("no webhook", "opted in, no policy", "2 rules", "50 rules")
GO_PATHS = {"Go, no patch": "opted in, no policy", "Go, 2-rule patch": "2 rules", "Go, 50-rule patch": "50 rules"}
"""Each path of the Go reference webhook, and the path of Placer's it answers like."""
FLOOR_PATHS = {"Python floor, no patch": "opted in, no policy", "Python floor, 2-rule patch": "2 rules",
               "Python floor, 50-rule patch": "50 rules"}
"""Each path of the Python floor webhook, and the path of Placer's it answers like."""
PATHS = (*PLACER_PATHS, *GO_PATHS, *FLOOR_PATHS)
SELECTING_LABEL = "placer-e2e-bench"
"""The label the bench's policies select by: `selected` on the `2 rules` namespace, `fifty` on `50 rules`."""
POLICY = "bench-two-rules"
FIFTY_LABELS = {"environment": "production", "team": "ml", SELECTING_LABEL: "fifty"}
"""What the 50 rules read of their namespace (bench_engine's), and the label their policies select."""
POD_MANIFEST = REPO / "tests/fixtures/manifests/pod-bare.yaml"
TARGETS = ("targets: Placer within 0.25 ms of the Go webhook's p50 answering the same patch, and at least 0.95 "
           "times its create rate at 8 connections, with 2 and with 50 rules")


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


def fifty_rule_specs() -> dict[str, dict[str, Any]]:
    """bench_engine's 50 rules (five policies), each policy selecting the `50 rules` namespace only."""
    specs = {}
    for text in bench_policies(50):
        document = yaml.safe_load(text)
        document["spec"]["namespaceSelector"] = {"matchLabels": {SELECTING_LABEL: "fifty"}}
        specs[document["metadata"]["name"]] = document["spec"]
    return specs


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


def create_in(cluster: Cluster, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    return cluster.api.create(f"/api/v1/namespaces/{namespace}/pods", pod, {"dryRun": "All"})


def prepare(cluster: Cluster, body: bytes) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """Placer's namespaces and policies, once Placer patches creates in the selected ones, and only there and
    only with their own policies' rules; with the Pod each path's create gave. OtherPolicies when the
    cluster's own SchedulingPolicies act there too (the paths would be something else: said, not measured)."""
    namespaces = {
        "no webhook": cluster.namespace({"node-pool": "ml"}, opted_in=False),
        "opted in, no policy": cluster.namespace({"node-pool": "ml"}),
        "2 rules": cluster.namespace({"node-pool": "ml", SELECTING_LABEL: "selected"}),
        "50 rules": cluster.namespace(FIFTY_LABELS),
    }
    cluster.policy(POLICY, two_rule_spec())
    fifty = fifty_rule_specs()
    for name, spec in fifty.items():
        cluster.policy(name, spec)
    pod = json.loads(body)
    wait_until(lambda: patched(create_in(cluster, namespaces["2 rules"], pod)), timeout=60,
               what="Placer to serve the 2-rule policy")
    wait_until(lambda: {rule.split("/")[0] for rule in applied(create_in(cluster, namespaces["50 rules"], pod))}
               == {f"{E2E_NAME}-{name}" for name in fifty}, timeout=60, what="Placer to serve the 50 rules")
    own = {"no webhook": set(), "opted in, no policy": set(), "2 rules": {f"{E2E_NAME}-{POLICY}"},
           "50 rules": {f"{E2E_NAME}-{name}" for name in fifty}}
    created = {}
    for path in PLACER_PATHS:
        created[path] = create_in(cluster, namespaces[path], pod)
        rules = applied(created[path])
        foreign = sorted(rule for rule in rules if not rule.startswith(f"{E2E_NAME}-"))
        if foreign:
            raise OtherPolicies(f"SchedulingPolicies of this cluster select the {path!r} namespace too ({foreign}): "
                                "the paths would not be what they say")
        if {rule.split("/")[0] for rule in rules} != own[path] or patched(created[path]) != (path == "2 rules"):
            raise AssertionError(f"the {path!r} namespace's create came back with rules {sorted(rules)}, "
                                 f"not those of {sorted(own[path])}")
    return namespaces, created


def go_patches(created: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each Go route's patch: none, and the ones Placer answered in `2 rules` and `50 rules`."""
    plain = created["no webhook"]
    return {"none": None, "two": patch_between(plain, created["2 rules"]),
            "fifty": patch_between(plain, created["50 rules"])}


GO_ROUTES = {"none": "Go, no patch", "two": "Go, 2-rule patch", "fifty": "Go, 50-rule patch"}
FLOOR_ROUTES = {"none": "Python floor, no patch", "two": "Python floor, 2-rule patch",
                "fifty": "Python floor, 50-rule patch"}


def measure(cluster: Cluster, *, duration: float, rounds: int, workdir: Path,
            report: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every path at 1 and 8 connections, `rounds` times in turn; returns the summary rows. The Go paths are
    left out, with the reason reported, when the reference webhook cannot be built (no `go` on PATH)."""
    body = pod_body()
    namespaces, created = prepare(cluster, body)
    pod = json.loads(body)
    patches = go_patches(created)
    with contextlib.ExitStack() as stack:
        try:
            routes = stack.enter_context(go_reference(cluster, workdir, patches))
        except NoGo as missing:
            report(f"the Go reference paths are left out: {missing}")
        else:
            _check_routes(cluster, routes, GO_ROUTES, GO_PATHS, namespaces, created, pod)
        floor_routes = stack.enter_context(python_floor(cluster, workdir, patches))
        _check_routes(cluster, floor_routes, FLOOR_ROUTES, FLOOR_PATHS, namespaces, created, pod)
        return _load_each(cluster, namespaces, body, duration=duration, rounds=rounds, report=report)


def _check_routes(cluster: Cluster, routes: dict[str, str], paths_of: dict[str, str], placer_of: dict[str, str],
                  namespaces: dict[str, str], created: dict[str, dict[str, Any]], pod: dict[str, Any]) -> None:
    """Adds each reference route's namespace to `namespaces`, once a create there gives the Pod that Placer's
    path it answers like gave."""
    for route, namespace in routes.items():
        path = paths_of[route]
        namespaces[path] = namespace
        answered = create_in(cluster, namespace, pod)
        if comparable(answered) != comparable(created[placer_of[path]]):
            raise AssertionError(f"a create through {path!r} does not give the Pod {placer_of[path]!r} "
                                 f"gave: {patch_between(created[placer_of[path]], answered)}")


def _load_each(cluster: Cluster, namespaces: dict[str, str], body: bytes, *, duration: float, rounds: int,
               report: Callable[[str], None]) -> list[dict[str, Any]]:
    client = client_for(cluster.connection)
    server = cluster.connection.server.rstrip("/")
    measured: dict[str, list[dict[str, Any]]] = {path: [] for path in PATHS if path in namespaces}
    for round_index in range(rounds):
        report(f"round {round_index + 1} of {rounds}")
        for path, rows in measured.items():
            url = f"{server}/api/v1/namespaces/{namespaces[path]}/pods?dryRun=All"
            one = load(url, body, connections=1, duration=duration, client=client)
            eight = load(url, body, connections=8, duration=duration, client=client, processes=2)
            row = {"p50": one["p50_ms"], "p99": one["p99_ms"], "rate": eight["rps"],
                   "requests": one["requests"] + eight["requests"], "errors": one["errors"] + eight["errors"],
                   "error_kinds": {kind: one["error_kinds"].get(kind, 0) + eight["error_kinds"].get(kind, 0)
                                   for kind in {**one["error_kinds"], **eight["error_kinds"]}}}
            rows.append(row)
            report(f"  {path:<28} p50 {row['p50']:6.2f} ms  p99 {row['p99']:6.2f} ms  at 8: {row['rate']:7.1f}/s"
                   f"  errors {row['errors']}")
    return summarise(measured)


def summarise(measured: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Medians per path, and per round against `no webhook`: what the path adds and its rate's ratio; for a
    path of Placer's whose Go counterpart was measured, per round against it: `vs_go_p50` (Placer's p50 less
    the Go webhook's) and `vs_go_rate` (Placer's rate over the Go webhook's); `vs_floor_p50` and
    `vs_floor_rate` the same against the Python floor."""
    base = measured["no webhook"]
    counterparts = {placer: go for go, placer in GO_PATHS.items() if go in measured}
    floors = {placer: floor for floor, placer in FLOOR_PATHS.items() if floor in measured}
    rows = []
    for path, rounds in measured.items():
        row = {
            "path": path,
            "p50": statistics.median(r["p50"] for r in rounds),
            "p99": statistics.median(r["p99"] for r in rounds),
            "rate": statistics.median(r["rate"] for r in rounds),
            "added_p50": statistics.median(r["p50"] - b["p50"] for r, b in zip(rounds, base, strict=True)),
            "added_p99": statistics.median(r["p99"] - b["p99"] for r, b in zip(rounds, base, strict=True)),
            "ratio": _median_ratio(rounds, base),
            "requests": sum(r["requests"] for r in rounds),
            "errors": sum(r["errors"] for r in rounds),
            "error_kinds": {kind: sum(r.get("error_kinds", {}).get(kind, 0) for r in rounds)
                            for kind in {kind for r in rounds for kind in r.get("error_kinds", {})}},
        }
        if path in counterparts:
            go = measured[counterparts[path]]
            row["vs_go_p50"] = statistics.median(r["p50"] - g["p50"] for r, g in zip(rounds, go, strict=True))
            row["vs_go_rate"] = _median_ratio(rounds, go)
        if path in floors:
            floor = measured[floors[path]]
            row["vs_floor_p50"] = statistics.median(r["p50"] - f["p50"] for r, f in zip(rounds, floor, strict=True))
            row["vs_floor_rate"] = _median_ratio(rounds, floor)
        if path in FLOOR_PATHS and f"Go{path.removeprefix('Python floor')}" in measured:
            go = measured[f"Go{path.removeprefix('Python floor')}"]
            row["vs_go_p50"] = statistics.median(r["p50"] - g["p50"] for r, g in zip(rounds, go, strict=True))
            row["vs_go_rate"] = _median_ratio(rounds, go)
        rows.append(row)
    return rows


def _median_ratio(rounds: list[dict[str, Any]], base: list[dict[str, Any]]) -> float:
    return statistics.median(r["rate"] / b["rate"] if b["rate"] else 0.0 for r, b in zip(rounds, base, strict=True))


def print_summary(rows: list[dict[str, Any]], rounds: int) -> None:
    print(f"median of {rounds} round(s); added and ratio against `no webhook` in the same round")
    print(f"{'path':<28} {'p50 ms':>7} {'p99 ms':>7} {'added p50':>10} {'added p99':>10} {'creates/s at 8':>15}"
          f" {'ratio':>6} {'errors':>7}")
    for row in rows:
        print(f"{row['path']:<28} {row['p50']:7.2f} {row['p99']:7.2f} {row['added_p50']:+10.2f} "
              f"{row['added_p99']:+10.2f} {row['rate']:15.1f} {row['ratio']:6.2f} {row['errors']:7d}")
    compared = [row for row in rows if "vs_go_p50" in row or "vs_floor_p50" in row]
    if compared:
        print("against the Go webhook and the Python floor answering the same patch, round by round (median)")
        print(f"{'path':<28} {'p50 - Go p50':>13} {'rate / Go rate':>15} {'p50 - floor p50':>16} {'rate / floor':>13}")
        for row in compared:
            go = (f"{row['vs_go_p50']:+13.2f} {row['vs_go_rate']:15.2f}" if "vs_go_p50" in row else f"{'':>29}")
            floor = (f" {row['vs_floor_p50']:+16.2f} {row['vs_floor_rate']:13.2f}" if "vs_floor_p50" in row else "")
            print(f"{row['path']:<28} {go}{floor}")
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
            rows = measure(cluster, duration=args.duration, rounds=args.rounds, workdir=Path(workdir),
                           report=lambda line: print(line, flush=True))
    except (OtherPolicies, NoRouteBack, ConnectionSetupError) as problem:
        parser.exit(2, f"bench_apiserver: {problem}\n")
    print_summary(rows, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
