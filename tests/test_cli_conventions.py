"""Every verb follows the same flag conventions (webhook/commands/flags.py), and docs/cli.md's synopsis shows
the flags as the parsers take them, metavars included, so the two cannot drift apart."""

import argparse
import re

from tests.docs_text import DOCS, blocks
from webhook.commands.cli import _parser, kubectl_parser
from webhook.commands.flags import ENVIRONMENT


def verbs() -> dict[str, argparse.ArgumentParser]:
    """`placer`'s verbs and `kubectl placer`'s (as `kubectl VERB`)."""
    found = dict(next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices)
    kubectl = next(a for a in kubectl_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    found.update({f"kubectl {name}": parser for name, parser in kubectl.items()})
    return found


def flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for action in parser._actions if "--help" not in action.option_strings]


def shown_metavar(action: argparse.Action) -> str | None:
    """What the synopsis must show after the flag: nothing for a switch, else its metavar, or its choices."""
    if action.nargs == 0:
        return None
    if isinstance(action.metavar, str):
        return action.metavar
    if action.choices:
        return "|".join(str(choice) for choice in action.choices)
    return action.dest.upper()


def test_every_flag_has_help_and_says_its_default() -> None:
    for verb, parser in verbs().items():
        for action in flags(parser):
            name = "/".join(action.option_strings) or action.dest
            assert action.help, f"{verb} {name}: no help text"
            if action.default not in (None, False, True, [], argparse.SUPPRESS) and action.option_strings:
                assert "default" in action.help, f"{verb} {name}: help does not say its default {action.default!r}"


def test_every_placer_verb_says_how_the_environment_sets_its_flags() -> None:
    for verb, parser in verbs().items():
        if not verb.startswith("kubectl "):
            assert parser.epilog == ENVIRONMENT, verb
            assert "PLACER_<FLAG>" in parser.format_help(), verb


def test_policies_are_described_one_way() -> None:
    helps = {action.help for parser in verbs().values() for action in flags(parser) if action.dest in
             ("policies", "paths")}
    assert len({text.split(" (default")[0] for text in helps if text}) == 1, helps


def test_every_verb_that_talks_to_a_cluster_takes_kubeconfig_and_context() -> None:
    for verb, parser in verbs().items():
        options = {option for action in flags(parser) for option in action.option_strings}
        if options & {"--kube", "--kubeconfig", "--context"} or verb.startswith("kubectl "):
            assert {"--kubeconfig", "--context"} <= options, verb


def synopsis_metavars() -> list[tuple[str, str, str | None]]:
    """(verb, flag, what follows it) for each flag of each `placer` line of docs/cli.md's synopsis."""
    block = next(b for b in blocks(DOCS / "cli.md") if b.body.startswith("placer serve"))
    found: list[tuple[str, str, str | None]] = []
    verb = ""
    pattern = re.compile(r"(?<![\w-])(--?[a-z][a-z-]*)(?:[ =](?![-\[(|])([^\s\[\]()]+))?")

    def pairs(line: str) -> list[tuple[str, str | None]]:
        """A repeatable flag's `PATH...` is PATH; `k=v,...` is a metavar of its own; `...` alone: as before."""
        return [(flag, re.sub(r"(?<=[A-Z_/])\.\.\.$|^\.\.\.$", "", value) if value else None)
                for flag, value in pattern.findall(line)]

    field_checks = next(pairs(line) for line in block.body.splitlines() if line.strip().startswith("FIELD CHECKS:"))
    for line in block.body.splitlines():
        if line.startswith("placer "):
            verb = line.split()[1]
        elif line.startswith("kubectl "):
            verb = ""
        if verb and not line.strip().startswith("FIELD CHECKS:"):
            found += [(verb, flag, value) for flag, value in pairs(line)]
            if "[FIELD CHECKS]" in line:
                found += [(verb, flag, value) for flag, value in field_checks]
    return found


def test_the_cli_synopsis_shows_each_flags_metavar() -> None:
    parsers = verbs()
    shown = synopsis_metavars()
    assert len(shown) > 70
    wrong = []
    for verb, flag, value in shown:
        if value == "":  # `[-o ...]`: as shown before
            continue
        action = next(a for a in flags(parsers[verb]) if flag in a.option_strings)
        if value != shown_metavar(action):
            wrong.append(f"placer {verb} {flag} {value or ''}: the parser takes {shown_metavar(action)}")
    assert wrong == [], "docs/cli.md's synopsis differs from the parsers"
