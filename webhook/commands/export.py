"""`placer export`: SchedulingPolicies as MutatingAdmissionPolicies and bindings on stdout, the
exportability report on stderr."""

import argparse
import json
import sys
from typing import Any

import yaml

from webhook.admission.offline import load_policies
from webhook.commands.field_targets import (
    add_policy_paths,
    add_target_flags,
    compiler_from_flags,
    policy_paths,
    quiet_policy_log,
)
from webhook.commands.flags import add_output
from webhook.export.admission_policy import export_policies, report_lines
from webhook.export.versions import API_VERSIONS, parse_version


def add_parser(commands: Any) -> None:
    """`placer export` and its flags."""
    export = commands.add_parser(
        "export", help="write MutatingAdmissionPolicies + bindings doing what the policies do (no webhook)"
    )
    add_policy_paths(export)
    export.add_argument("--api-version", choices=list(API_VERSIONS),
                        help="admissionregistration.k8s.io version (default: v1 where the target serves it, "
                             "from 1.36; else v1beta1)")
    export.add_argument("--allow-partial", action="store_true", default=None,
                        help="write the rules that can be exported of a policy that cannot be exported whole")
    add_output(export, ["yaml", "json"], "the objects as YAML documents, or as JSON (a v1 List)")
    add_target_flags(export)
    export.set_defaults(run=run)


class _ExpressionDumper(yaml.SafeDumper):
    """Long strings (CEL expressions) as literal blocks: no quote doubling, readable in a diff."""


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if len(text) > 80 and "\n" not in text and not text.endswith(" ") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_ExpressionDumper.add_representer(str, _represent_text)


def run(args: argparse.Namespace) -> int:
    """The objects on stdout (ready for `kubectl apply -f -`), the exportability report on stderr; exit 1
    when a policy does not load (nothing is written then) or is not exported whole (the others are written,
    unless --allow-partial: then every rule that can be is written, and the exit is 0 if that is anything at
    all); 2 for a target or API version the export does not support."""
    quiet_policy_log()
    paths = policy_paths(args)
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
        exports = export_policies(snapshot.every_policy, args.api_version, target=target,
                                  allow_partial=bool(args.allow_partial))
    except ValueError as error:
        print(f"placer export: {error}", file=sys.stderr)
        return 2
    objects = [obj for export in exports for obj in export.objects]
    if not objects and not any(export.refused for export in exports):
        # --allow-partial with no rule that can be exported: an empty output is no success
        for line in report_lines(exports, target):
            print(line, file=sys.stderr)
        print("placer export: nothing written: no rule of any policy can be exported", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
    else:
        print(yaml.dump_all(objects, Dumper=_ExpressionDumper, sort_keys=False, width=1 << 16), end="")
    for line in report_lines(exports, target):
        print(line, file=sys.stderr)
    return 1 if any(export.refused for export in exports) else 0
