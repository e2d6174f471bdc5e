"""Policy files re-read while serving: a set of files replaced together is never served half old, half new."""

import logging
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import node_selector_policy, write_configmap_volume
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.sources.documents import read_documents_separately
from webhook.policy.sources.files import FilePolicySource


def policy_set(generation: str) -> dict[str, str]:
    """Two files, two policies; every policy's name carries the set it belongs to."""
    return {"one.yaml": node_selector_policy(f"{generation}-one", "pool", generation),
            "two.yaml": node_selector_policy(f"{generation}-two", "zone", generation)}


def served(source: FilePolicySource) -> set[str]:
    return {policy.name for policy in source.snapshot().policies}


class SwappingCompiler(PolicyCompiler):
    """Runs `during` once, just after the first policy of a read has been compiled: a swap mid-read."""

    def __init__(self, during: Any) -> None:
        super().__init__()
        self.during = during

    def compile(self, document: Any, source: str, locate: Any = None) -> Any:
        result = super().compile(document, source, locate)
        if self.during is not None:
            action, self.during = self.during, None
            action()
        return result


def test_a_configmap_swapped_while_being_read_is_served_whole(tmp_path: Path) -> None:
    volume = tmp_path / "policies"
    write_configmap_volume(volume, policy_set("blue"), "1")
    compiler = SwappingCompiler(None)
    source = FilePolicySource([volume], compiler=compiler)
    assert source.refresh() is True
    assert served(source) == {"blue-one", "blue-two"}

    # one.yaml is read from the old version; the volume then flips before two.yaml is read.
    write_configmap_volume(volume, policy_set("green"), "2")
    compiler.during = lambda: write_configmap_volume(volume, policy_set("red"), "3")
    assert source.refresh() is True
    assert served(source) == {"red-one", "red-two"}
    assert source.refresh() is False


def test_files_that_keep_changing_are_left_for_the_next_round(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    volume = tmp_path / "policies"
    write_configmap_volume(volume, policy_set("blue"), "1")
    caplog.set_level(logging.WARNING, logger="webhook.policy")  # the CLI tests quiet it in-process
    source = FilePolicySource([volume], compiler=PolicyCompiler())
    source.refresh()
    versions = iter(range(10, 100))

    class Churn(PolicyCompiler):
        def compile(self, document: Any, source: str, locate: Any = None) -> Any:
            write_configmap_volume(volume, policy_set(f"v{next(versions)}"), str(next(versions)))
            return super().compile(document, source, locate)

    churning = FilePolicySource([volume], compiler=Churn())
    churning._files = source._files
    write_configmap_volume(volume, policy_set("green"), "2")
    assert churning.refresh() is False
    assert served(churning) == {"blue-one", "blue-two"}
    assert "kept changing while being read" in caplog.text


def test_a_broken_file_keeps_its_last_good_content_and_is_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "policies"
    directory.mkdir()
    for name, text in policy_set("blue").items():
        (directory / name).write_text(text)
    source = FilePolicySource([directory], compiler=PolicyCompiler())
    source.refresh()
    (directory / "two.yaml").write_text("spec: [unclosed")
    with caplog.at_level(logging.ERROR, logger="webhook.policy"):
        assert source.refresh() is True
        assert source.refresh() is False  # the same broken content is not re-read and re-reported each round
    assert served(source) == {"blue-one", "blue-two"}
    assert caplog.text.count("policy blue-two in") == 1
    assert "a document of the file does not parse; keeping its last good version" in caplog.text
    assert next(error.message for error in source.content().errors).startswith("cannot read")

    (directory / "two.yaml").unlink()
    assert source.refresh() is True
    assert served(source) == {"blue-one"}


THREE = "---\n".join(node_selector_policy(name, "pool", name) for name in ("one", "two", "three"))


def test_one_broken_document_costs_only_its_own_policies(tmp_path: Path) -> None:
    """An unclosed `{` in the second of three documents: reported at its own line and column (not at the next
    `---`, where the parser notices), the first and third documents load; while serving, the policy of the
    broken document keeps its last good version."""
    path = tmp_path / "three.yaml"
    path.write_text(THREE)
    source = FilePolicySource([path], compiler=PolicyCompiler())
    source.refresh()
    assert served(source) == {"one", "two", "three"}
    path.write_text(THREE.replace("{pool: two}}", "{pool: two}"))
    assert source.refresh() is True
    assert served(source) == {"one", "two", "three"}, "the broken document's policy keeps serving"
    [error] = source.content().errors
    assert error.place == (13, 5), "the line and column of the `{` left open"
    assert error.message.startswith("cannot read: flow mapping not closed: did not find expected ',' or '}'")
    assert "(at line 14, column 1)" in error.message, "and where the parser noticed"

    fresh = FilePolicySource([path], compiler=PolicyCompiler())
    fresh.refresh()
    assert served(fresh) == {"one", "three"}


def test_a_dash_line_inside_a_block_scalar_is_text_not_a_document_start(tmp_path: Path) -> None:
    """Only `---` at the start of a line separates documents (as PyYAML's scanner reads it); one indented in
    a block scalar is text, even when the file is cut into documents after a mistake in another."""
    text = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata:\n  name: first\n  annotations:\n"
            "    note: |\n      above\n      ---\n      below\nspec:\n  rules:\n"
            "  - {name: place, action: add-node-selector, parameters: {pool: a}}\n---\nbroken: [a, b\n")
    path = tmp_path / "block.yaml"
    path.write_text(text)
    source = FilePolicySource([path], compiler=PolicyCompiler())
    source.refresh()
    assert served(source) == {"first"}
    [policy] = source.snapshot().policies
    assert policy.document["metadata"]["annotations"]["note"] == "above\n---\nbelow\n"
    [error] = source.content().errors
    assert error.place == (14, 9)


def test_python_tags_in_a_policy_file_are_refused_not_executed(tmp_path: Path) -> None:
    """Policy files are parsed with the safe loader (and ruff's S506 forbids any other in webhook/)."""
    marker = tmp_path / "executed"
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "evil.yaml").write_text(f"!!python/object/apply:os.system ['touch {marker}']\n")
    source = FilePolicySource([directory], compiler=PolicyCompiler())
    source.refresh()
    assert not marker.exists()
    [error] = source.content().errors
    assert error.source.endswith("evil.yaml") and "python/object/apply" in error.message


@pytest.mark.parametrize(("text", "message"), [
    ("a: {b: 1\n---\nc: 1\n",
     "line 1, column 4: flow mapping not closed: did not find expected ',' or '}' (at line 2, column 1)"),
    ("a: 'x\n", "line 1, column 4: quoted scalar not closed: found unexpected end of stream (at line 2, column 1)"),
    ("a: {b: [1, 2}\n",
     "line 1, column 13: did not find expected ',' or ']', in the flow sequence opened at line 1, column 8"),
])
def test_a_yaml_mistake_is_placed_where_it_was_made(text: str, message: str) -> None:
    """Left open to the end (of the text, or of its document), a `{` or quote is the mistake; closed with the
    wrong bracket, the mistake is where the parser stopped."""
    _, errors = read_documents_separately(text)
    assert [str(error) for error in errors] == [message]
