"""`placer serve | certs | apply | lint | test | export | dev`. Every flag also reads `PLACER_<FLAG>`."""

import argparse
import json
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from webhook import __version__
from webhook.admission.offline import DEFAULT_NAMESPACE, apply_manifests, load_policies, parse_labels, render
from webhook.cluster.client.api import TransportError, api_from_flags
from webhook.cluster.client.connection import ConnectionSetupError, in_cluster
from webhook.commands import dev, drift
from webhook.commands import shares as share_listing
from webhook.commands.certs import ensure_dev_certificates, issue, service_names
from webhook.commands.field_targets import add_target_flags, compiler_from_flags
from webhook.commands.live import LiveError, cluster_snapshot, read_namespaces, read_nodes, read_object
from webhook.commands.suites import find_suites, render_junit, render_text, run_suite
from webhook.engine.configuration import gang_not_enforced
from webhook.engine.enforcement import lint_lines
from webhook.export.admission_policy import export_policies, report_lines
from webhook.export.versions import API_VERSIONS, parse_version
from webhook.support.config import (
    CEL_LEAK_BUDGET_MIB,
    DEFAULT_CERTS,
    DEFAULT_POLICIES,
    IDLE_TIMEOUT_SECONDS,
    READ_TIMEOUT_SECONDS,
    WORKER_MAX_RSS_MIB,
    Settings,
)
from webhook.support.logs import configure_logging

ENV_PREFIX = "PLACER_"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _apply_environment(parser, args, os.environ)
    return int(args.run(args))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="placer", description="Scheduling policy admission webhook.")
    parser.add_argument("--version", action="version", version=f"placer {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the webhook over HTTPS (granian worker processes)")
    serve.add_argument(
        "--policies", action="append", metavar="PATH", help=f"file or directory (default {DEFAULT_POLICIES})"
    )
    kube = serve.add_mutually_exclusive_group()
    kube.add_argument(
        "--kube",
        dest="kube",
        action="store_true",
        default=None,
        help="watch SchedulingPolicies and Namespaces in the cluster (default when KUBERNETES_SERVICE_HOST is set)",
    )
    kube.add_argument("--no-kube", dest="kube", action="store_false", help="do not connect to a cluster")
    serve.add_argument(
        "--kubeconfig", metavar="FILE", help="default: in-cluster credentials, else $KUBECONFIG, else ~/.kube/config"
    )
    serve.add_argument("--bind", metavar="HOST:PORT", default="127.0.0.1:8443")
    serve.add_argument("--tls-cert", metavar="FILE")
    serve.add_argument("--tls-key", metavar="FILE")
    serve.add_argument("--client-ca", metavar="FILE", help="require client certificates signed by this CA")
    serve.add_argument("--workers", type=int, default=2)
    serve.add_argument(
        "--read-timeout", type=float, default=READ_TIMEOUT_SECONDS, metavar="SECONDS",
        help="answer 408 and close a connection whose request body takes longer to arrive",
    )
    serve.add_argument(
        "--idle-timeout", type=float, default=IDLE_TIMEOUT_SECONDS, metavar="SECONDS",
        help="close a connection whose next request head takes longer to arrive, idle or trickling (at most 60)",
    )
    serve.add_argument(
        "--cel-leak-budget-mib", type=float, default=CEL_LEAK_BUDGET_MIB, metavar="MIB",
        help="replace the workers, gracefully, once Kubernetes CEL library calls have leaked this much in one",
    )
    serve.add_argument(
        "--worker-max-rss-mib", type=int, default=WORKER_MAX_RSS_MIB, metavar="MIB",
        help="replace a worker, gracefully, whose resident memory is above this (0: never)",
    )
    serve.add_argument(
        "--worker-lifetime", type=int, default=0, metavar="SECONDS",
        help="replace each worker, gracefully, this long after it started (at least 60; 0: never)",
    )
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--opt-in", default="api-server", choices=["api-server", "label-or-annotation"])
    serve.set_defaults(run=_serve)

    certs = commands.add_parser("certs", help="write a CA and a serving certificate for the webhook Service")
    certs.add_argument("--out", default=str(DEFAULT_CERTS), metavar="DIR")
    certs.add_argument("--service", default="placer")
    certs.add_argument("--namespace", default="placer-system")
    certs.add_argument("--host", action="append", default=None, metavar="DNS_OR_IP")
    certs.add_argument("--days", type=int, default=365)
    certs.set_defaults(run=_certs)

    apply = commands.add_parser("apply", help="show offline what the policies do to manifests")
    apply.add_argument("targets", nargs="*", metavar="KIND/NAME", help="live objects (with --kube)")
    apply.add_argument("--policies", action="append", required=False, metavar="PATH")
    apply.add_argument("-f", "--filename", action="append", dest="manifests", metavar="MANIFEST")
    apply.add_argument(
        "--kube", action="store_true", default=False,
        help="the cluster's SchedulingPolicies and namespaces, and live objects (read, never written)",
    )
    apply.add_argument("--kubeconfig", metavar="FILE")
    apply.add_argument("--context", metavar="NAME", help="kubeconfig context (with --kube)")
    apply.add_argument("-n", "--namespace", metavar="NS", help="namespace of live objects and of manifests without one")
    apply.add_argument("--namespace-labels", metavar="k=v,...", help="labels of the manifests' namespace")
    apply.add_argument("--operation", default="CREATE", choices=["CREATE", "UPDATE"])
    apply.add_argument("-o", "--output", default="yaml", choices=["yaml", "json", "patch", "explain"])
    add_target_flags(apply, kube=False)
    apply.set_defaults(run=_apply)

    lint = commands.add_parser("lint", help="check policies; exit 1 with every error located")
    lint.add_argument("paths", nargs="*", metavar="PATH")
    add_target_flags(lint)
    lint.set_defaults(run=_lint)

    test = commands.add_parser("test", help="run policy test suites (*-test.yaml); exit 1 on any failure")
    test.add_argument("suites", nargs="+", metavar="PATH", help="suite files, or directories to search")
    test.add_argument("-o", "--output", default="text", choices=["text", "junit"])
    add_target_flags(test)
    test.set_defaults(run=_test)

    export = commands.add_parser(
        "export", help="write MutatingAdmissionPolicies + bindings doing what the policies do (no webhook)"
    )
    export.add_argument(
        "--policies", action="append", metavar="PATH", help=f"file or directory (default {DEFAULT_POLICIES})"
    )
    export.add_argument("--api-version", choices=list(API_VERSIONS),
                        help="admissionregistration.k8s.io version (default: v1 where the target serves it, "
                             "from 1.36; else v1beta1)")
    export.add_argument("--allow-partial", action="store_true", default=None,
                        help="write the rules that can be exported of a policy that cannot be exported whole")
    export.add_argument("-o", "--output", default="yaml", choices=["yaml", "json"])
    add_target_flags(export)
    export.set_defaults(run=_export)
    dev.add_parser(commands)
    return parser


def _apply_environment(parser: argparse.ArgumentParser, args: argparse.Namespace, environ: Any) -> None:
    """Fill every flag left unset on the command line from `PLACER_<FLAG>` (lists: comma-separated)."""
    subparser = next(
        action.choices[args.command] for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    for action in subparser._actions:
        if not action.option_strings or action.dest in ("help",):
            continue
        flag = max(action.option_strings, key=len).lstrip("-")
        if flag.startswith("no-"):
            continue
        raw = environ.get(ENV_PREFIX + flag.upper().replace("-", "_"))
        if raw is None or getattr(args, action.dest) not in (None, action.default):
            continue
        if isinstance(action, argparse._AppendAction):
            value: Any = [item.strip() for item in raw.split(",") if item.strip()]
        elif isinstance(action, argparse._StoreTrueAction) or action.dest == "kube":
            value = raw.strip().lower() in ("1", "true", "yes", "on")
        else:
            value = action.type(raw) if callable(action.type) else raw
        setattr(args, action.dest, value)
    if args.command == "lint" and not args.paths and environ.get(ENV_PREFIX + "POLICIES"):
        args.paths = environ[ENV_PREFIX + "POLICIES"].split(",")


MIN_WORKER_LIFETIME_SECONDS = 60
"""granian refuses a shorter worker lifetime (`workers_lifetime`); said as a usage error, not a traceback."""


def _serve(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    if 0 < args.worker_lifetime < MIN_WORKER_LIFETIME_SECONDS:
        print(f"placer serve: --worker-lifetime {args.worker_lifetime}: at least {MIN_WORKER_LIFETIME_SECONDS} "
              "seconds (granian's minimum), or 0 for never", file=sys.stderr)
        return 2
    default_tls = args.tls_cert is None and args.tls_key is None
    kube = args.kube if args.kube is not None else in_cluster()
    # The controller process writes the cluster's policies and namespaces here; every worker reads them here.
    cluster_state = Path(tempfile.mkdtemp(prefix="placer-cluster-")) if kube else None
    settings = Settings(
        policies=tuple(args.policies or (DEFAULT_POLICIES,)),
        policies_explicit=bool(args.policies),
        bind=args.bind,
        tls_cert=Path(args.tls_cert) if args.tls_cert else DEFAULT_CERTS / "tls.crt",
        tls_key=Path(args.tls_key) if args.tls_key else DEFAULT_CERTS / "tls.key",
        client_ca=Path(args.client_ca) if args.client_ca else None,
        workers=args.workers,
        worker_max_rss_mib=args.worker_max_rss_mib or None,
        worker_lifetime=args.worker_lifetime or None,
        read_timeout=args.read_timeout,
        idle_timeout=args.idle_timeout,
        cel_leak_budget_mib=args.cel_leak_budget_mib,
        log_level=args.log_level,
        opt_in=args.opt_in,
        kubeconfig=Path(args.kubeconfig) if args.kubeconfig else None,
        cluster_state=cluster_state,
    )
    if default_tls and ensure_dev_certificates(DEFAULT_CERTS):
        print(f"placer: created development certificates for localhost in {DEFAULT_CERTS}/", file=sys.stderr)
    # Metrics from every worker land in one directory. prometheus_client decides at import time whether
    # to write there, so the server (and with it prometheus_client) is imported only after this line.
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="placer-metrics-"))
    from webhook.server.serve import serve  # noqa: PLC0415

    serve(settings)
    return 0


def _certs(args: argparse.Namespace) -> int:
    hosts = [*service_names(args.service, args.namespace), *(args.host or [])]
    issued = issue(Path(args.out), hosts, days=args.days, common_name=f"{args.service}.{args.namespace}.svc")
    print(f"wrote {issued.ca_cert}, {issued.cert}, {issued.key} for: {', '.join(hosts)}", file=sys.stderr)
    print(issued.ca_bundle())
    return 0


def _quiet_policy_log() -> None:
    """One-shot commands print every policy error themselves; the source's log lines (written for a server,
    "keeping its last good content") would only repeat them, misleadingly."""
    logging.getLogger("webhook.policy").setLevel(logging.CRITICAL)


def _lint(args: argparse.Namespace) -> int:
    _quiet_policy_log()
    paths = args.paths or [DEFAULT_POLICIES]
    compiler = compiler_from_flags(args)
    if isinstance(compiler, int):
        return compiler
    snapshot = load_policies(paths, required=True, compiler=compiler)
    for error in snapshot.errors:
        print(error)
    if snapshot.errors:
        print(f"{len(snapshot.errors)} error(s)", file=sys.stderr)
        return 1
    if not snapshot.policies:
        print(f"no SchedulingPolicy found in {', '.join(paths)}")
        return 1
    print(f"{len(snapshot.policies)} policies OK: {', '.join(p.name for p in snapshot.policies)}")
    for policy in snapshot.policies:  # loads, but cannot work as written: said, not an error
        for finding in gang_not_enforced(policy):
            print(f"Warning: {policy.source}: {finding.message}", file=sys.stderr)
        for line in lint_lines(policy):
            print(line, file=sys.stderr if line.startswith("Warning: ") else sys.stdout)
    return 0


class _ExpressionDumper(yaml.SafeDumper):
    """Long strings (CEL expressions) as literal blocks: no quote doubling, readable in a diff."""


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if len(text) > 80 and "\n" not in text and not text.endswith(" ") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_ExpressionDumper.add_representer(str, _represent_text)


def _export(args: argparse.Namespace) -> int:
    """The objects on stdout (ready for `kubectl apply -f -`), the exportability report on stderr; exit 1
    when a policy does not load (nothing is written then) or is not exported whole (the others are written,
    unless --allow-partial: then every rule that can be is written, and the exit is 0); 2 for a target or
    API version the export does not support."""
    _quiet_policy_log()
    paths = args.policies or [DEFAULT_POLICIES]
    compiler = compiler_from_flags(args)
    if isinstance(compiler, int):
        return compiler
    snapshot = load_policies(paths, required=True, compiler=compiler)
    if snapshot.errors:
        for error in snapshot.errors:
            print(error, file=sys.stderr)
        return 1
    try:
        # The target of the field checks (the flag, the cluster's with --kube, or the newest supported) is
        # the API server the objects are for: its CEL environment and its admissionregistration version.
        target = parse_version(compiler.fields.version)
        exports = export_policies(snapshot.policies, args.api_version, target=target,
                                  allow_partial=bool(args.allow_partial))
    except ValueError as error:
        print(f"placer export: {error}", file=sys.stderr)
        return 2
    objects = [obj for export in exports for obj in export.objects]
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
    else:
        print(yaml.dump_all(objects, Dumper=_ExpressionDumper, sort_keys=False, width=1 << 16), end="")
    for line in report_lines(exports, target):
        print(line, file=sys.stderr)
    return 1 if any(export.refused for export in exports) else 0


def _apply(args: argparse.Namespace) -> int:
    _quiet_policy_log()
    prog = getattr(args, "prog", "placer apply")  # `kubectl placer explain` when run as the kubectl plugin
    if not args.manifests and not args.targets:
        print(f"{prog}: -f MANIFEST (or, with --kube, KIND/NAME) is required", file=sys.stderr)
        return 2
    if args.targets and not args.kube:
        print(f"{prog}: KIND/NAME reads a live object: add --kube", file=sys.stderr)
        return 2
    if args.kube and args.policies:
        print(f"{prog}: --kube evaluates the cluster's policies; --policies is for files", file=sys.stderr)
        return 2
    try:
        labels = parse_labels(args.namespace_labels or "")
    except ValueError as error:
        print(f"{prog}: --namespace-labels: {error}", file=sys.stderr)
        return 2
    namespace = args.namespace or DEFAULT_NAMESPACE
    compiler = compiler_from_flags(args)
    if isinstance(compiler, int):
        return compiler
    if args.kube:
        try:
            api = api_from_flags(args.kubeconfig, args.context)
            snapshot = cluster_snapshot(api, compiler)
            objects = [(f"{target} (live)", read_object(api, target, namespace)) for target in args.targets]
            nodes = read_nodes(api)
            if nodes is None:
                print("Warning: nodes cannot be listed with these credentials: no node fit shown", file=sys.stderr)
            report = apply_manifests(
                policy_paths=[], manifest_paths=args.manifests or [], namespace_labels=labels,
                operation=args.operation, snapshot=snapshot, objects=objects,
                read_namespaces=lambda names: read_namespaces(api, names), default_namespace=namespace,
                nodes=nodes,
            )
        except (ConnectionSetupError, LiveError, TransportError) as error:
            print(f"{prog}: {error}", file=sys.stderr)
            return 1
    else:
        report = apply_manifests(
            policy_paths=args.policies or [DEFAULT_POLICIES],
            manifest_paths=args.manifests,
            namespace_labels=labels,
            operation=args.operation,
            default_namespace=namespace,
            compiler=compiler,
        )
    for problem in report.problems:
        print(f"error: {problem}", file=sys.stderr)
    for warning in report.warnings:
        print(f"Warning: {warning}", file=sys.stderr)
    sys.stdout.write(render(report, args.output))
    return 1 if report.problems else 0


def _test(args: argparse.Namespace) -> int:
    _quiet_policy_log()
    suites = find_suites(args.suites)
    if not suites:
        print(f"placer test: no *-test.yaml under {', '.join(args.suites)}", file=sys.stderr)
        return 1
    compiler = compiler_from_flags(args)
    if isinstance(compiler, int):
        return compiler
    cases = [case for suite in suites for case in run_suite(suite, compiler)]
    sys.stdout.write(render_junit(cases) if args.output == "junit" else render_text(cases))
    return 0 if all(case.passed for case in cases) else 1


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """`kubectl placer explain KIND/NAME... [-f FILE] [-n NS] [--context C] [--kubeconfig F] [-o FORMAT]`: the
    kubectl plugin (installed as `kubectl-placer`), `placer apply --kube` with kubectl's flag conventions."""
    parser = argparse.ArgumentParser(prog="kubectl placer", description="Which Placer policy does what, live.")
    commands = parser.add_subparsers(dest="command", required=True)
    explain = commands.add_parser("explain", help="what the cluster's SchedulingPolicies do to objects now")
    explain.add_argument("targets", nargs="*", metavar="KIND/NAME")
    explain.add_argument("-f", "--filename", action="append", default=[], metavar="FILE")
    explain.add_argument("-n", "--namespace", metavar="NS")
    explain.add_argument("--context", metavar="NAME")
    explain.add_argument("--kubeconfig", metavar="FILE")
    explain.add_argument("-o", "--output", default="explain", choices=["explain", "yaml", "json", "patch"])
    drift.add_parser(commands)
    share_listing.add_parser(commands)
    args = parser.parse_args(argv)
    if args.command in ("drift", "shares"):
        return int(args.run(args))
    forwarded = ["apply", "--kube", "-o", args.output, *args.targets]
    forwarded += [item for path in args.filename for item in ("-f", path)]
    for flag, value in (("-n", args.namespace), ("--context", args.context), ("--kubeconfig", args.kubeconfig)):
        if value:
            forwarded += [flag, value]
    placer = _parser()
    forwarded_args = placer.parse_args(forwarded)
    _apply_environment(placer, forwarded_args, os.environ)
    forwarded_args.prog = "kubectl placer explain"
    return _apply(forwarded_args)


if __name__ == "__main__":
    raise SystemExit(main())
