"""`placer` and `kubectl placer`: one parser whose verbs each add their own flags (one module per verb in
`webhook.commands`), and `PLACER_<FLAG>` for every flag left unset."""

import argparse
import os
from collections.abc import Sequence
from typing import Any

from webhook import __version__
from webhook.commands import apply, certs, diff, drift, export, lint, preview, serve, shares, suites
from webhook.commands.dev import command as dev
from webhook.commands.flags import add_cluster, add_output, finish

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
    for verb in (serve, certs, apply, lint, suites, diff, export, dev):
        verb.add_parser(commands)
    for command in commands.choices.values():  # every verb's help says how PLACER_<FLAG> sets its flags
        finish(command)
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


KUBECTL_GLOBAL_FLAGS = ((("--kubeconfig",), "kubeconfig", "FILE"), (("--context",), "context", "NAME"),
                        (("-n", "--namespace"), "namespace", "NS"))
"""kubectl's global flags a plugin takes. kubectl refuses flags before a plugin's name and runs `kubectl-placer`
with every argument after `placer` (staging/src/k8s.io/kubectl/pkg/cmd/plugin.go, `HandlePluginCommand`), so
`kubectl placer --kubeconfig FILE drift` hands them to the plugin before its verb, where kubectl users write
them: kubectl's own commands take them anywhere (persistent flags, cmd.go `NewKubectlCommand`)."""


def kubectl_parser() -> argparse.ArgumentParser:
    """`kubectl placer` and its verbs."""
    parser = argparse.ArgumentParser(prog="kubectl placer", description="Which Placer policy does what, live.")
    for flags, name, metavar in KUBECTL_GLOBAL_FLAGS:
        parser.add_argument(*flags, dest=f"global_{name}", metavar=metavar, help=f"kubectl's --{name}")
    commands = parser.add_subparsers(dest="command", required=True)
    explain = commands.add_parser("explain", help="what the cluster's SchedulingPolicies do to objects now")
    explain.add_argument("targets", nargs="*", metavar="KIND/NAME", help="live objects (deploy/web, sts/db)")
    explain.add_argument("-f", "--filename", action="append", default=[], metavar="FILE",
                         help="manifests to admit, as if created (repeatable)")
    explain.add_argument("-n", "--namespace", metavar="NS",
                         help="namespace of the objects and of manifests without one (default: default)")
    add_cluster(explain)
    add_output(explain, ["explain", "yaml", "json", "patch"],
               "every rule's verdict and why, the mutated objects (yaml, json), or their JSON patches")
    drift.add_parser(commands)
    shares.add_parser(commands)
    preview.add_parser(commands)
    return parser


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """`kubectl placer [--kubeconfig F] [--context C] [-n NS] explain|drift|shares|preview ...`: the kubectl plugin
    (installed as `kubectl-placer`); `explain` is `placer apply --kube` with kubectl's flag conventions. The
    global flags go before or after the verb; after it, they win."""
    parser = kubectl_parser()
    args = parser.parse_args(argv)
    for _, name, _ in KUBECTL_GLOBAL_FLAGS:
        if getattr(args, name, None) is None:
            setattr(args, name, getattr(args, f"global_{name}"))
    if args.command in ("drift", "shares", "preview"):
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
    return int(apply.run(forwarded_args))


if __name__ == "__main__":
    raise SystemExit(main())
