"""`placer lint`: load policies as the webhook would, print every error located, and the warnings of
policies that load but cannot work as written."""

import argparse
import sys
from typing import Any

from webhook.admission.offline import load_policies
from webhook.cluster.podgroups.native_gang import native_gang_rules
from webhook.commands.field_targets import (
    add_policy_paths,
    add_target_flags,
    compiler_from_flags,
    policy_paths,
    quiet_policy_log,
)
from webhook.engine.configuration import gang_not_enforced
from webhook.engine.enforcement import lint_lines
from webhook.gang.native import served_from, unavailable_on
from webhook.support.suggestions import counted


def add_parser(commands: Any) -> None:
    """`placer lint` and its flags."""
    lint = commands.add_parser("lint", help="check policies; exit 1 with every error located")
    add_policy_paths(lint)
    add_target_flags(lint)
    lint.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Everything lint says goes to stderr, as a compiler's diagnostics do: the errors (`file:line:column:
    ...`), warnings and notes, then a summary line. stdout stays empty; the verdict is the exit status: 0 the
    policies load, 1 an error (or no policy at all), 2 a flag naming no usable target."""
    quiet_policy_log()
    paths = policy_paths(args)
    compiler = compiler_from_flags(args)
    if isinstance(compiler, int):
        return compiler
    snapshot = load_policies(paths, required=True, compiler=compiler)
    for error in snapshot.errors:
        print(error, file=sys.stderr)
    if snapshot.errors:
        print(counted(len(snapshot.errors), "error"), file=sys.stderr)
        return 1
    if not snapshot.every_policy:
        print(f"no SchedulingPolicy found in {', '.join(paths)}", file=sys.stderr)
        return 1
    target = compiler.fields.version
    for policy in snapshot.every_policy:  # loads, but cannot work as written: said, not an error
        for finding in gang_not_enforced(policy):
            print(f"Warning: {policy.source}: {finding.message}", file=sys.stderr)
        for rule in native_gang_rules(policy) if not served_from(target) else ():
            print(f"Warning: {policy.source}: rule {policy.name}/{rule}: native gang unavailable: "
                  f"{unavailable_on(target)}", file=sys.stderr)
        for line in lint_lines(policy):
            print(line, file=sys.stderr)
    names = ", ".join(p.name for p in snapshot.every_policy)
    print(f"{counted(len(snapshot.every_policy), 'policy', 'policies')} OK: {names}", file=sys.stderr)
    return 0
