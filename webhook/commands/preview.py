"""`kubectl placer preview`: what a policy change would do to the live cluster's workloads, before it is
served. Reads only (lists and gets, as `drift` does); the judgement is `webhook.change.live_preview`'s.

Exit status: 0 when nothing `--fail-on` names happens, 1 when it does, 2 when the preview cannot be made
(bad flags, policy files that do not load, a deleted policy that does not exist, the cluster not readable).
"""

import argparse
import sys
from typing import Any

from webhook.admission.offline import load_policies
from webhook.change.live_preview import preview
from webhook.change.output import render
from webhook.change.policy_change import ChangeError, change_policies
from webhook.cluster.client.api import ApiError, TransportError
from webhook.commands.change_flags import add_report_flags
from webhook.commands.drift import read_workloads
from webhook.commands.field_targets import quiet_policy_log
from webhook.commands.live import LiveError, cluster_snapshot, namespace_scope, open_api, read_nodes
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.snapshot import PolicySnapshot

PROG = "kubectl placer preview"


def add_parser(commands: Any) -> None:
    """Register `kubectl placer preview` on the plugin's subcommands."""
    command = commands.add_parser(
        "preview", help="what a policy change would do to the live workloads, before it is served",
        description="Judge every live workload under the cluster's SchedulingPolicies and under them with the "
        "given policies added or replacing the same-named ones (and --delete NAME removed); for each whose "
        "result changes: the patch today and after, whether drift --apply would roll it out, and whether its "
        "pods would still have a node. Reads only. Exit 0, 1 when --fail-on is met, 2 on errors.")
    command.add_argument("-f", "--filename", action="append", default=[], metavar="POLICIES",
                         help="policy file or directory: added, or replacing the same-named policy (repeatable)")
    command.add_argument("--delete", action="append", default=[], metavar="NAME",
                         help="a SchedulingPolicy to preview the removal of (repeatable)")
    scope = command.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", metavar="NS", help="only workloads in this namespace (default: default)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="workloads in every namespace")
    command.add_argument("-l", "--selector", metavar="SELECTOR", help="only workloads with these labels, as kubectl's")
    add_report_flags(command, "a workload")
    command.add_argument("--context", metavar="NAME", help="kubeconfig context")
    command.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config)")
    command.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    quiet_policy_log()
    if not args.filename and not args.delete:
        print(f"{PROG}: nothing to preview: give -f POLICIES or --delete NAME", file=sys.stderr)
        return 2
    compiler = PolicyCompiler()
    given = load_policies(args.filename, required=True, compiler=compiler) if args.filename else None
    if given is not None and given.errors:
        for error in given.errors:
            print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    api = open_api(PROG, args)
    if api is None:
        return 2
    namespace = namespace_scope(args)
    try:
        before = cluster_snapshot(api, compiler)
        change = change_policies(before, given or PolicySnapshot.build([], {}, [], compiler.environment),
                                 args.delete)
        listed, namespaces = read_workloads(api, namespace, args.selector)
        report = preview(listed, namespaces, change, read_nodes(api))
    except (ApiError, TransportError, LiveError, ChangeError) as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    finally:
        api.close()
    for problem in before.errors:
        print(f"error: {problem} (judged without it)", file=sys.stderr)
    sys.stdout.write(render(report, args.output))
    return report.exit_code(args.fail_on)

