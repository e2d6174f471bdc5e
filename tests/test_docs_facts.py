"""One source of truth per fact: what the docs say about Placer is checked against Placer itself, whoever
writes the page.

- `kubectl get` output of a CRD Placer installs shows the columns the CRD prints (its
  additionalPrinterColumns), and prose that lists them lists them all;
- a page never calls missing a feature Placer has: a sentence saying something is missing ("not yet",
  "not available", "not used by Placer yet", "another issue") must not name an action, gang scheduler,
  workload kind or command Placer has, and must be one of `ABSENCES` below, whose probe shows that the
  thing is still missing (when it arrives, the probe fails and the page must change);
- the actions table names every action, the CLI synopsis every flag of every verb;
- the home page links every page the front page (README) links, and says what the README says in the
  paragraphs they share;
- pages for users speak to users: no test module names and no words of Placer's own development.
"""

import argparse
import base64
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import fixture_request
from tests.docs_text import DOCS, REPO, blocks, code_spans, nav_sections, pages, prose
from tests.rsgi_client import AppClient
from webhook.actions.registry import action_specs
from webhook.admission.offline import load_policies
from webhook.commands.cli import _parser
from webhook.gang.flavours import FLAVOURS
from webhook.policy.compiler import KIND, PolicyCompiler
from webhook.policy.snapshot import SnapshotHolder
from webhook.server.app import create_app
from webhook.support.config import Settings
from webhook.support.metrics import Metrics
from webhook.workloads import all_kinds

CONTRIBUTORS = {"Contributing"}
"""The nav sections written for people changing Placer: test names and in-house words belong there, and the
absence checks do not read them (they describe the checks)."""

# -- columns -------------------------------------------------------------------------------------------------


def placer_crds() -> list[dict[str, Any]]:
    """Every CRD deploy/ installs."""
    found = []
    for path in sorted((REPO / "deploy").rglob("*.yaml")):
        found += [doc for doc in yaml.safe_load_all(path.read_text()) if doc
                  and doc.get("kind") == "CustomResourceDefinition"]
    return found


def crd_for(resource: str) -> dict[str, Any] | None:
    """The CRD `kubectl get RESOURCE` lists (plural, singular, short name or plural.group)."""
    for crd in placer_crds():
        names = crd["spec"]["names"]
        known = {names["plural"], names.get("singular", ""), names["kind"].lower(), *names.get("shortNames", []),
                 f"{names['plural']}.{crd['spec']['group']}"}
        if resource.lower() in known:
            return crd
    return None


def printed_columns(crd: dict[str, Any], *, wide: bool = False, all_namespaces: bool = False) -> list[str]:
    """The header kubectl prints for the CRD: NAME, then each printer column of priority 0 (all of them with
    -o wide), in order; NAMESPACE first for a namespaced CRD listed with -A."""
    version = next(v for v in crd["spec"]["versions"] if v.get("served", True))
    columns = [c["name"].upper() for c in version.get("additionalPrinterColumns", [])
               if wide or not c.get("priority")]
    namespace = ["NAMESPACE"] if all_namespaces and crd["spec"]["scope"] == "Namespaced" else []
    return [*namespace, "NAME", *columns]


GET = re.compile(r"kubectl get ([a-z.]+)((?: +[^\s|;#]+)*)")


def test_kubectl_get_output_shows_the_columns_the_crd_prints() -> None:
    checked = 0
    for page in pages():
        for block in blocks(page):
            lines = block.body.splitlines()
            headers = [(lines[i - 1], line) for i, line in enumerate(lines) if line.startswith("NAME ")
                       and i > 0 and lines[i - 1].startswith("$ kubectl get ")]
            if lines and lines[0].startswith("NAME "):  # output alone: the command is named just before it
                text = page.read_text().splitlines()[: block.line - 1]
                named = [m.group(0) for line in text[-12:] for m in GET.finditer(line)]
                if named:
                    headers.append((named[-1], lines[0]))
            for command, header in headers:
                match = GET.search(command)
                crd = crd_for(match.group(1)) if match else None
                if crd is None:
                    continue
                words = match.group(2).split() if match else []
                expected = printed_columns(crd, wide="wide" in words, all_namespaces="-A" in words)
                assert header.split() == expected, f"{block.page}:{block.line}: `{command}` prints {expected}"
                checked += 1
    assert checked >= 3


def test_prose_that_lists_printed_columns_lists_the_crds() -> None:
    """A sentence naming `kubectl get` of a CRD and two or more of its columns names every column it prints
    by default (and none it does not print)."""
    for page in pages():
        for unit in prose(page):
            match = GET.search(unit.text)
            crd = crd_for(match.group(1)) if match else None
            if crd is None:
                continue
            every = printed_columns(crd, wide=True)
            named = [span for span in code_spans(unit.text) if re.fullmatch(r"[A-Z]{3,}", span)]
            assert set(named) <= set(every), f"{unit.page}:{unit.line}: {sorted(set(named) - set(every))} not printed"
            if len(named) >= 2 and "-o wide" not in unit.text:
                default = printed_columns(crd)[1:]
                assert sorted(set(named) | {"NAME"}) == sorted({"NAME", *default}), \
                    f"{unit.page}:{unit.line}: `kubectl get {match.group(1)}` prints {default}"


# -- claims that something is missing ----------------------------------------------------------------------------

ABSENCE = re.compile(
    r"not \w+ by Placer yet|\bnot yet (?:supported|implemented|available|used)\b|(?:^|\|\s*)not yet\b"
    r"|\bnot available\b|\banother issue\b|\b(?:a later|a future) (?:issue|release|version)\b|\bcoming soon\b"
    r"|\bPlacer does not (?:yet )?support\b|\bnever fails closed\b|\bTODO\b", re.I)


def refused(condition: str) -> Callable[[], bool]:
    """A probe: a rule with this condition does not load (the function or variable is missing)."""
    def probe() -> bool:
        policy = {"apiVersion": "placer.dev/v1alpha1", "kind": KIND, "metadata": {"name": "p"},
                  "spec": {"rules": [{"name": "r", "condition": condition, "action": "add-labels",
                                      "parameters": {"a": "b"}}]}}
        return bool(PolicyCompiler().compile(policy, KIND).errors)
    return probe


ABSENCES: dict[tuple[str, str], Callable[[], bool]] = {
    ("cel.md", "| quantity division | `div`, `divInt` |"): refused("quantity('2').div(2) == quantity('1')"),
    ("cel.md", "| authorizer | `authorizer` |"): refused("authorizer.group('apps') != null"),
    ("cel.md", "| JSON patch | `jsonpatch.escapeKey` |"): refused("jsonpatch.escapeKey('a/b') == 'a~1b'"),
    ("cel.md", "| `string(cidr('10.0.0.0/8'))` |"): refused("string(cidr('10.0.0.0/8')) == '10.0.0.0/8'"),
}
"""Every sentence of the docs that says something is missing, by page and a piece of its text, with a probe
that is true while it is missing."""


def feature_terms() -> set[str]:
    """Names of what Placer has: actions, gang schedulers, workload kinds, commands."""
    verbs = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    return {*action_specs(), *(f"{flavour} gang" for flavour in FLAVOURS), *(f"scheduler: {f}" for f in FLAVOURS),
            *(kind.kind for kind in all_kinds() if kind.group), *(f"placer {verb}" for verb in verbs),
            "kubectl placer", "PolicyReport", "drift", "Enforced"}


def for_users() -> list[Path]:
    """The README and every page outside the contributors' sections."""
    sections = nav_sections()
    return [page for page in pages() if page.parent != DOCS or sections.get(page.name) not in CONTRIBUTORS]


def absences() -> list[tuple[str, int, str]]:
    return [(unit.page, unit.line, unit.text) for page in for_users() for unit in prose(page)
            if ABSENCE.search(unit.text)]


def test_no_page_calls_missing_what_placer_has() -> None:
    terms = {term: re.compile(rf"(?<![\w-]){re.escape(term)}(?![\w-])", re.I) for term in feature_terms()}
    wrong = [f"{page}:{line}: says missing, yet names {sorted(t for t, found in terms.items() if found.search(text))}"
             for page, line, text in absences() if any(found.search(text) for found in terms.values())]
    assert wrong == []


def test_every_absence_the_docs_claim_is_listed_with_a_probe_that_still_holds() -> None:
    found = absences()
    unlisted = [f"{page}:{line}: {text[:120]}" for page, line, text in found
                if not any(page == listed_page and piece in text for listed_page, piece in ABSENCES)]
    assert unlisted == [], "say what is missing in ABSENCES, with a probe"
    for (page, piece), still_missing in ABSENCES.items():
        assert any(page == p and piece in text for p, _, text in found), f"{page}: no longer says {piece!r}"
        assert still_missing(), f"{page} says {piece!r} is missing, but Placer has it now: change the page"


# -- lists that must be whole --------------------------------------------------------------------------------


def test_the_actions_table_names_every_action() -> None:
    rows = [unit.text for unit in prose(DOCS / "actions.md") if unit.text.startswith("| `")]
    named = {span for row in rows for span in code_spans(row.split("|")[1])}
    assert set(action_specs()) - named == set(), "docs/actions.md: add a row for each action"


def synopsis() -> dict[str, set[str]]:
    """Verb -> the flags docs/cli.md's synopsis shows for it (FIELD CHECKS expanded)."""
    block = next(b for b in blocks(DOCS / "cli.md") if b.body.startswith("placer serve"))
    field_checks: set[str] = set()
    shown: dict[str, set[str]] = {}
    verb = ""
    for line in block.body.splitlines():
        flags = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", line))
        if line.startswith(("placer ", "kubectl placer ")):
            verb = line.split()[2] if line.startswith("kubectl") else line.split()[1]
            verb = f"kubectl {verb}" if line.startswith("kubectl") else verb
        elif line.strip().startswith("FIELD CHECKS:"):
            field_checks |= flags
            continue
        shown.setdefault(verb, set()).update(flags)
        if "[FIELD CHECKS]" in line:
            shown[verb].add("FIELD CHECKS")
    return {verb: (flags - {"FIELD CHECKS"}) | (field_checks if "FIELD CHECKS" in flags else set())
            for verb, flags in shown.items()}


def test_the_cli_synopsis_shows_every_flag_of_every_verb() -> None:
    """Each flag of each verb is in docs/cli.md's synopsis (one of its spellings), and nothing else is."""
    verbs = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    shown = synopsis()
    for verb, parser in verbs.items():
        actions = [set(action.option_strings) for action in parser._actions if action.option_strings
                   and "--help" not in action.option_strings]
        missing = [sorted(spellings) for spellings in actions if not spellings & shown.get(verb, set())]
        assert missing == [], f"docs/cli.md synopsis of placer {verb} lacks {missing}"
        unknown = shown.get(verb, set()) - set().union(*actions)
        assert unknown == set(), f"docs/cli.md synopsis of placer {verb} shows {unknown}, which it does not take"


# -- the home page and the front page ------------------------------------------------------------------------


def test_the_home_page_links_every_page_the_front_page_links() -> None:
    readme = set(re.findall(r"\]\(docs/([a-z-]+\.md)", (REPO / "README.md").read_text()))
    home = set(re.findall(r"\]\(([a-z-]+\.md)", (DOCS / "index.md").read_text()))
    assert readme - home == set(), "docs/index.md: link these from the home page"


def test_paragraphs_the_home_page_shares_with_the_front_page_say_the_same() -> None:
    """A paragraph of the home page that starts as one of the README does (its first six words) is that
    paragraph: the two pages never disagree."""
    readme = {" ".join(unit.text.split()[:6]): unit.text.replace("](docs/", "](")
              for unit in prose(REPO / "README.md")}
    for unit in prose(DOCS / "index.md"):
        start = " ".join(unit.text.split()[:6])
        if start in readme:
            assert unit.text == readme[start], f"index.md:{unit.line} differs from the README's paragraph"


# -- pages for users -------------------------------------------------------------------------------------------

IN_HOUSE = re.compile(
    r"living (?:v1\.\d+ )?cluster|the original CRD|fake API server|recorded-API server"
    r"|cluster tier|another issue|\bissue \d+|test suite's|\btest_\w+\.py\b|::test_\w+|tests/\w+/test_\w+", re.I)
COMMAND = re.compile(r"^(?:\.venv/bin/)?(?:pytest|python3? -m|PLACER_\w+=)")


def test_pages_for_users_name_no_test_module_and_no_in_house_word() -> None:
    wrong = []
    for page in for_users():
        for unit in prose(page):
            text = re.sub(r"`[^`]+`", lambda m: "" if COMMAND.match(m.group(0)[1:]) else m.group(0), unit.text)
            found = IN_HOUSE.findall(text)
            if found:
                wrong.append(f"{unit.page}:{unit.line}: {found}")
    assert wrong == []


def test_every_page_is_in_a_nav_section() -> None:
    sections = nav_sections()
    assert {p.name for p in DOCS.glob("*.md")} <= set(sections), "mkdocs.yml: put the page in the nav"


def test_the_helpers_read_what_they_should(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("A para\ncontinues.\n\n| a | b |\n\n```text\nNAME X\n```\n- item one\n- item `two`\n")
    assert [u.text for u in prose(page)] == ["A para continues.", "| a | b |", "- item one", "- item `two`"]
    assert [(b.info, b.body, b.before) for b in blocks(page)] == [("text", "NAME X\n", "| a | b |")]


def test_the_curl_answer_getting_started_shows_is_the_webhooks() -> None:
    """Section 4's output: what `placer serve` (the example policies of `policies/`) answers the captured
    request, as the page's python one-liner prints it."""
    page = DOCS / "getting-started.md"
    curl = next(b for b in blocks(page) if b.body.startswith("curl "))
    shown = next(b for b in blocks(page) if b.line > curl.line)
    snapshot = load_policies([str(REPO / "policies")], required=True)
    app = create_app(holder=SnapshotHolder(snapshot), settings=Settings(), metrics=Metrics())
    review = AppClient(app).post("/mutate?timeout=5s", json=fixture_request("deployment-create-dryrun"))
    response = review.get_json()["response"]
    patch = json.loads(base64.b64decode(response["patch"]))
    printed = f"{response['auditAnnotations']}\n{json.dumps(patch, indent=1)}\n"
    assert shown.body == printed
