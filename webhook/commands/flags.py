"""The flag conventions every verb of `placer` and `kubectl placer` follows, in one place, so that a verb
added later takes them by calling these rather than by copying a neighbour:

- every flag has a help text, and a flag with a default says it (`(default: %(default)s)`, or in words where
  the default is not a value: "default: ./policies; a missing default directory is not an error");
- policy paths are described one way (`POLICIES`), whatever the verb does with them;
- a verb that talks to a cluster takes kubectl's `--kubeconfig FILE` and `--context NAME` (`add_cluster`);
- metavars are those of docs/cli.md's synopsis (a test compares them);
- `placer`'s help ends with how `PLACER_<FLAG>` sets a flag from the environment (`ENVIRONMENT`, set on every
  verb by `webhook.commands.cli`, which reads those variables).
"""

import argparse
from typing import Any

from webhook.support.config import DEFAULT_POLICIES

POLICIES = "a SchedulingPolicy file, or a directory read for *.yaml and *.yml (multi-document); repeatable"
"""What a policy path is, for every verb that reads policy files."""

ENVIRONMENT = ("environment: every flag not given is read from PLACER_<FLAG>, upper case with dashes as "
               "underscores (--log-level from PLACER_LOG_LEVEL); a repeatable flag's values comma-separated "
               "(PLACER_POLICIES=a.yaml,dir/)")
"""The epilog of every `placer` verb's help."""

LOG_LEVELS = ("debug", "info", "warning", "error")


def policies_help(default: str | None = DEFAULT_POLICIES) -> str:
    """The help of `--policies`: `POLICIES`, then its default (None: the verb reads no file unless asked)."""
    if default is None:
        return f"{POLICIES} (default: none)"
    return f"{POLICIES} (default: {default}; a missing default directory is not an error)"


def add_policies(command: argparse.ArgumentParser, *, default: str | None = DEFAULT_POLICIES,
                 role: str | None = None) -> None:
    """`--policies PATH` (repeatable; None when not given, so the verb can tell the default from a choice).
    `role`: what the verb does with them, when not the obvious."""
    text = policies_help(default)
    command.add_argument("--policies", action="append", metavar="PATH",
                         help=f"{text}: {role}" if role else text)


def add_cluster(command: argparse.ArgumentParser, *, when: str = "", in_cluster: bool = False) -> None:
    """kubectl's `--kubeconfig FILE` and `--context NAME`. `when`: the flag they go with (`--kube`);
    `in_cluster`: the verb uses the Pod's service account when it runs in one."""
    first = "in-cluster credentials, else " if in_cluster else ""
    suffix = f", with {when}" if when else ""
    command.add_argument("--kubeconfig", metavar="FILE",
                         help=f"kubeconfig file{suffix} (default: {first}$KUBECONFIG, else ~/.kube/config)")
    command.add_argument("--context", metavar="NAME",
                         help=f"kubeconfig context{suffix} (default: the kubeconfig's current context)")


def add_scope(group: Any) -> None:
    """kubectl's `-n NS` and `-A`, for a verb that reads workloads (in a mutually exclusive group)."""
    group.add_argument("-n", "--namespace", metavar="NS", help="the namespace (default: default)")
    group.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")


def add_log_level(command: argparse.ArgumentParser) -> None:
    command.add_argument("--log-level", default="info", choices=LOG_LEVELS, metavar="LEVEL",
                         help=f"{', '.join(LOG_LEVELS[:-1])} or {LOG_LEVELS[-1]} (default: %(default)s)")


def add_output(command: argparse.ArgumentParser, choices: list[str], what: str) -> None:
    """`-o/--output`, its first choice the default; `what`: what is printed, in each format."""
    command.add_argument("-o", "--output", default=choices[0], choices=choices,
                         help=f"{what} (default: %(default)s)")


def finish(command: argparse.ArgumentParser) -> None:
    """What every `placer` verb's help ends with."""
    command.epilog = ENVIRONMENT
