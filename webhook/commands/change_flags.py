"""The flags `kubectl placer preview` and `placer diff` share: what to print, and when to exit 1."""

import argparse

from webhook.change.output import OUTPUTS
from webhook.change.report import FAIL_ON


def add_report_flags(command: argparse.ArgumentParser, judged: str) -> None:
    """`-o` and `--fail-on`; `judged`: what is judged (`a workload`, `a manifest`), for the help."""
    command.add_argument("-o", "--output", default="text", choices=OUTPUTS,
                         help="text, json, or markdown for a pull-request comment (default text)")
    command.add_argument("--fail-on", default="stranded", choices=FAIL_ON,
                         help=f"exit 1 when {judged}'s pods would be stranded, or when any changes; never: exit "
                              "0 (default stranded)")
