"""`placer diff`: what a policy change does to manifests, offline, for review: per manifest, what the old
and the new policies write and how the results differ (`webhook.change.manifest_diff`), and the `placer test`
cases the change breaks (`--suites`). The old policies are files (`--base PATH`) or the same `--policies`
paths at a git revision (`--base REV`).

Exit status: 0 when nothing `--fail-on` names happens, 1 when it does (a broken test case counts under
`stranded` and `change`), 2 when the diff cannot be made (bad flags, policies or manifests that do not load,
a revision or path git cannot read).
"""

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from webhook.admission.offline import load_policies
from webhook.change.broken_suites import broken_cases
from webhook.change.git_revision import RevisionError, policies_at
from webhook.change.manifest_diff import diff_manifests
from webhook.change.output import render
from webhook.change.policy_change import change_policies
from webhook.commands.apply import namespace_labels
from webhook.commands.change_flags import add_report_flags
from webhook.commands.field_targets import add_target_flags, compiler_from_flags, quiet_policy_log
from webhook.commands.flags import add_policies
from webhook.commands.suites import find_suites, run_suite
from webhook.policy.compiler import PolicyCompiler

PROG = "placer diff"


def add_parser(commands: Any) -> None:
    """`placer diff` and its flags."""
    command = commands.add_parser(
        "diff", help="what a policy change does to manifests, offline, for review",
        description="Admit the manifests offline under the old policies (--base) and the new (--policies); per "
        "manifest whose result changes, what each writes and the difference. Exit 0, 1 when --fail-on is met, "
        "2 on errors.")
    command.add_argument("--base", metavar="OLD|REV",
                         help="the old policies: a file or directory, else a git revision at which the "
                              "--policies paths are read")
    add_policies(command, default=None, role="the new policies")
    command.add_argument("-f", "--filename", action="append", dest="manifests", metavar="MANIFEST",
                         help="manifests to admit; Namespace and Node objects among them are the cluster's "
                              "(repeatable)")
    command.add_argument("--namespace-labels", metavar="k=v,...", help="labels of the manifests' namespace")
    command.add_argument("--suites", action="append", default=[], metavar="PATH",
                         help="placer test suites (*-test.yaml) to name when the change breaks them (repeatable)")
    add_report_flags(command, "a manifest")
    add_target_flags(command)
    command.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    quiet_policy_log()
    missing = [flag for flag, value in (("--base", args.base), ("--policies", args.policies),
                                        ("-f", args.manifests)) if not value]
    if missing:
        print(f"{PROG}: {', '.join(missing)} required (or PLACER_BASE, PLACER_POLICIES, PLACER_FILENAME)",
              file=sys.stderr)
        return 2
    labels = namespace_labels(PROG, args.namespace_labels)
    if labels is None:
        return 2
    compiler = compiler_from_flags(args)
    if isinstance(compiler, int):
        return compiler
    with tempfile.TemporaryDirectory(prefix="placer-diff-") as scratch:
        try:
            base, where = _base(args.base, args.policies, Path(scratch))
        except RevisionError as error:
            print(f"{PROG}: {error}", file=sys.stderr)
            return 2
        return _diff(args, base, where, labels, compiler)


def _base(base: str, policies: list[str], scratch: Path) -> tuple[list[str], str]:
    """The old policy paths, and how the report names them."""
    if Path(base).exists():
        return [base], base
    try:
        return policies_at(base, policies, scratch), f"{', '.join(policies)} at {base}"
    except RevisionError as error:
        raise RevisionError(f"--base {base}: no such file or directory; as a git revision: {error}") from None


def _diff(args: argparse.Namespace, base: list[str], where: str, labels: dict[str, str],
          compiler: PolicyCompiler) -> int:
    old = load_policies(base, required=True, compiler=compiler)
    new = load_policies(args.policies, required=True, compiler=compiler)
    errors = [f"{label} policies: {error}" for label, snapshot in (("old", old), ("new", new))
              for error in snapshot.errors]
    if errors:
        print("\n".join(f"{PROG}: {error}" for error in errors), file=sys.stderr)
        return 2
    deleted = [policy.name for policy in old.policies if policy.name not in {p.name for p in new.policies}]
    change = change_policies(old, new, deleted)
    report, problems = diff_manifests(old, new, args.manifests, namespace_labels=labels,
                                      change=f"{change.describe()} (old: {where})")
    if problems:
        print("\n".join(f"{PROG}: {problem}" for problem in problems), file=sys.stderr)
        return 2
    suites = find_suites(args.suites)
    report.broken_suites = broken_cases(suites, args.policies, base,
                                        lambda suite, swap: run_suite(suite, compiler, swap))
    sys.stdout.write(render(report, args.output))
    return report.exit_code(args.fail_on)
