"""What docs/changing-policies.md shows `kubectl placer preview` printing is what it prints: each session is
run from docs/examples/changing-policies against the fake API server holding the page's cluster (its
namespaces, nodes, gpu-pool.yaml and the workloads admitted under it), and compared line for line."""

import shlex
from pathlib import Path

import pytest

from tests.docs_text import DOCS, blocks
from tests.kube.changing_policies import EXAMPLES, put_example_cluster
from tests.kube.fake_apiserver import FakeApiServer
from webhook.commands.cli import kubectl_main

PAGE = DOCS / "changing-policies.md"


def sessions() -> list[tuple[str, str]]:
    """(command, output) of every `$ kubectl placer preview` block of the page."""
    found = []
    for block in blocks(PAGE):
        lines = block.body.splitlines()
        if lines and lines[0].startswith("$ kubectl placer preview"):
            found.append((lines[0][2:], "".join(f"{line}\n" for line in lines[1:])))
    return found


def test_the_page_shows_the_four_previews() -> None:
    assert len(sessions()) == 4


@pytest.mark.parametrize(("command", "shown"), sessions())
def test_each_preview_prints_what_the_page_shows(command: str, shown: str, apiserver: FakeApiServer,
                                                 kubeconfig: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    put_example_cluster(apiserver)
    monkeypatch.chdir(EXAMPLES)
    kubectl_main([*shlex.split(command)[2:], "--kubeconfig", str(kubeconfig)])
    assert capsys.readouterr().out == shown
