"""`placer apply` (and `kubectl placer explain`): what the policies do to manifests or live objects,
shown offline; nothing is ever written to the cluster."""

import argparse
import sys
from pathlib import Path
from typing import Any

from webhook.admission.offline import DEFAULT_NAMESPACE, apply_manifests, parse_labels, render
from webhook.admission.request_options import RequestOptions
from webhook.cluster.client.api import TransportError, api_from_flags
from webhook.cluster.client.connection import ConnectionSetupError
from webhook.commands.field_targets import add_target_flags, compiler_from_flags, quiet_policy_log
from webhook.commands.flags import add_cluster, add_output, add_policies
from webhook.commands.live import LiveError, cluster_snapshot, read_namespaces, read_nodes, read_object
from webhook.policy.sources.documents import ManifestError
from webhook.support.config import DEFAULT_POLICIES
from webhook.support.suggestions import counted


def add_parser(commands: Any) -> None:
    """`placer apply` and its flags."""
    apply = commands.add_parser("apply", help="show offline what the policies do to manifests")
    apply.add_argument("targets", nargs="*", metavar="KIND/NAME", help="live objects (with --kube)")
    add_policies(apply)
    apply.add_argument("-f", "--filename", action="append", dest="manifests", metavar="MANIFEST",
                       help="manifests to admit, YAML or JSON, multi-document or kind: List (repeatable)")
    apply.add_argument(
        "--kube", action="store_true", default=False,
        help="the cluster's SchedulingPolicies and namespaces, and live objects (read, never written)",
    )
    add_cluster(apply, when="--kube")
    apply.add_argument("-n", "--namespace", metavar="NS",
                       help="namespace of live objects and of manifests without one (default: default)")
    apply.add_argument("--namespace-labels", metavar="k=v,...", help="labels of the manifests' namespace")
    apply.add_argument("--operation", default="CREATE", choices=["CREATE", "UPDATE"],
                       help="the admission request's operation (default: %(default)s)")
    apply.add_argument("--old", action="append", default=None, metavar="MANIFEST",
                       help="with --operation UPDATE: the objects as they were (matched by kind, namespace, name)")
    apply.add_argument("--as", dest="as_user", metavar="USER",
                       help="the request's user, as kubectl --as (default: placer-apply)")
    apply.add_argument("--as-group", action="append", default=None, metavar="GROUP", help="a group of the user")
    apply.add_argument("--exemption-key", metavar="FILE", help="the key of exemption seals (as placer serve)")
    add_output(apply, ["yaml", "json", "patch", "explain"],
               "the mutated manifests (yaml, json), their JSON patches, or every rule's verdict and why")
    add_target_flags(apply, kube=False)
    apply.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    quiet_policy_log()
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
    labels = namespace_labels(prog, args.namespace_labels)
    if labels is None:
        return 2
    namespace = args.namespace or DEFAULT_NAMESPACE
    try:
        options = RequestOptions.from_flags(args.as_user, args.as_group, args.old, args.exemption_key)
    except (OSError, ValueError, ManifestError) as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
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
                nodes=nodes, request_options=options,
            )
        except (ConnectionSetupError, LiveError, TransportError) as error:
            print(f"{prog}: {error}", file=sys.stderr)
            return 1
    else:
        paths = args.policies or [DEFAULT_POLICIES]
        if not args.policies and not Path(DEFAULT_POLICIES).exists():
            print(f"{prog}: no policies: --policies names none and {DEFAULT_POLICIES} (its default) does not exist; "
                  "name policy files or directories with --policies PATH (repeatable)", file=sys.stderr)
            return 2
        report = apply_manifests(
            policy_paths=paths,
            manifest_paths=args.manifests,
            namespace_labels=labels,
            operation=args.operation,
            default_namespace=namespace,
            compiler=compiler,
            request_options=options,
        )
    if not args.kube:
        found = report.snapshot.every_policy
        where = ", ".join(paths) + ("" if args.policies else " (the default of --policies)")
        if not found and not report.snapshot.errors:
            print(f"{prog}: no SchedulingPolicy in {where}; name policy files or directories with --policies PATH",
                  file=sys.stderr)
            return 1
        names = ", ".join(policy.name for policy in found)
        print(f"{prog}: {counted(len(found), 'policy', 'policies')} from {where}" + (f": {names}" if names else ""),
              file=sys.stderr)
    for problem in (*report.problems, *report.rule_errors):
        print(f"error: {problem}", file=sys.stderr)
    for warning in report.warnings:
        print(f"Warning: {warning}", file=sys.stderr)
    sys.stdout.write(render(report, args.output))
    return 1 if report.problems or report.rule_errors else 0


def namespace_labels(prog: str, raw: str | None) -> dict[str, str] | None:
    """`--namespace-labels k=v,...` as a map, or None once stderr says what is wrong with it."""
    try:
        return parse_labels(raw or "")
    except ValueError as error:
        print(f"{prog}: --namespace-labels: {error}", file=sys.stderr)
        return None
