"""Load-time errors the docs show are what Placer prints: shown in a block, they are the output of a command
the docs tests run (a `console` block, or one marked `<!-- output of: placer ... -->`); quoted in prose, they
have the format `PolicyError` renders, a file's errors with its line and column. A sample of a format the code
no longer prints (`policies/org.yaml: policy p, ..., condition: <input>:1:1: ...`) fails here."""

import re

from tests.docs_text import Block, blocks, code_spans, pages, prose
from webhook.policy.errors import PolicyError

SAMPLE = re.compile(r"^(?P<source>cluster|[\w./-]+\.ya?ml)(?::(?P<line>\d+):(?P<column>\d+))?: (?P<rest>.*)$")
LOCATION = re.compile(r"^policy (?P<policy>[^,:]+)(?:, rule (?P<rule>[^,:]+))?(?:, (?P<field>[^:]+))?: "
                      r"(?P<message>.*)$")


def checked(block: Block) -> bool:
    """A block the docs tests run the command of (tests/test_docs_site.py)."""
    return block.info == "console" or block.before.startswith(("<!-- output of: ", "<!-- part of the output of: "))


def is_sample(text: str) -> bool:
    found = SAMPLE.match(text)
    return found is not None and (found["rest"].startswith(("policy ", "cannot read: ")))


def rendered(sample: str) -> str:
    """`sample` parsed into the parts of a PolicyError and rendered again, as Placer prints it."""
    found = SAMPLE.match(sample)
    assert found is not None
    place = (int(found["line"]), int(found["column"])) if found["line"] else None
    location = LOCATION.match(found["rest"])
    if location is None:
        return str(PolicyError(found["source"], found["rest"], place=place))
    return str(PolicyError(found["source"], location["message"], location["policy"], location["rule"],
                           location["field"], place))


def test_error_samples_in_code_blocks_are_the_output_of_a_command_the_tests_run() -> None:
    unchecked = [f"{block.page}:{block.line + number}: {line}" for page in pages() for block in blocks(page)
                 if not checked(block) for number, line in enumerate(block.body.splitlines(), start=1)
                 if is_sample(line)]
    assert unchecked == [], "show load errors as the output of `$ placer lint FILE` in a console block"


def test_error_samples_quoted_in_prose_have_the_format_placer_prints() -> None:
    samples = [(f"{unit.page}:{unit.line}", span) for page in pages() for unit in prose(page)
               for span in code_spans(unit.text) if is_sample(span)]
    assert samples, "the docs quote load errors in prose; the pattern no longer finds them"
    for where, sample in samples:
        found = SAMPLE.match(sample)
        assert found is not None
        if found["source"] != "cluster":
            assert found["line"], f"{where}: an error in a file is at its line and column: {sample}"
        assert rendered(sample) == sample, f"{where}: Placer prints {rendered(sample)!r}"


def test_the_checks_catch_a_stale_sample() -> None:
    """The format docs/policies.md showed before errors were placed in their files."""
    stale = "policies/org.yaml: policy org-wide-policy, rule multi-zone-ha, condition: <input>:1:1: undeclared"
    assert is_sample(stale) and not SAMPLE.match(stale)["line"]  # type: ignore[index]
    placed = "policies/org.yaml:9:17: policy org-wide-policy, rule multi-zone-ha, condition: <input>:1:1: undeclared"
    assert rendered(placed) != placed, "with a place, Placer prints no <input> position"
    assert not checked(Block("policies.md", 60, "", stale + "\n", "return bool are reported ..."))
