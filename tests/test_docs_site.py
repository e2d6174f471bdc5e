"""The docs a newcomer reads are true: the site builds with no broken link or page, README stays a front page
with the two commands CI runs, and every `placer` example marked `console` prints what the docs show."""

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
RUN_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e . && .venv/bin/placer serve"
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e '.[test]' && .venv/bin/pytest"
CONSOLE_BLOCK = re.compile(r"^```console\n(.*?)^```", re.S | re.M)


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def console_examples() -> list[tuple[str, str, str]]:
    """(where, command, expected output) for every `$ placer ...` line of a `console` block."""
    examples = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        for block in CONSOLE_BLOCK.finditer(text):
            line_number = text[: block.start()].count("\n") + 1
            command, output = None, []
            for line in [*block.group(1).splitlines(), "$ "]:
                if line.startswith("$ "):
                    if command is not None:
                        examples.append((f"{path.name}:{line_number}", command, "\n".join(output)))
                    command, output = line[2:], []
                else:
                    output.append(line)
    return [example for example in examples if example[1].startswith("placer ")]


def test_the_site_builds_strictly_and_offline(tmp_path: Path) -> None:
    """`strict: true` turns a link to a missing page or anchor, or a nav entry without a page, into a failure.
    The theme and the search plugin need no network (the sandbox running this has none)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=REPO, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert (tmp_path / "site" / "getting-started" / "index.html").is_file()
    assert (tmp_path / "site" / "architecture" / "index.html").is_file()


def test_the_readme_is_a_front_page_with_the_commands_ci_runs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) < 15_000, "README.md is a front page: move reference material to docs/"
    assert f"```sh\n{RUN_COMMAND}\n```" in readme
    assert f"```sh\n{TEST_COMMAND}\n```" in readme
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / target).is_file(), f"README links to {target}, which does not exist"


def test_the_docs_commands_install_what_the_site_needs() -> None:
    """`pip install -e '.[docs]'` (as the README and the home page say) installs MkDocs and the theme
    mkdocs.yml names, each pinned in constraints.txt; the test extra includes it (the tests build the site)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    docs = {re.split(r"[<>=\[]", requirement)[0].lower() for requirement in project["optional-dependencies"]["docs"]}
    theme = yaml.safe_load((REPO / "mkdocs.yml").read_text())["theme"]["name"]
    assert {"mkdocs", f"mkdocs-{theme}"} <= docs
    lines = (REPO / "constraints.txt").read_text().splitlines()
    pinned = {line.split("==")[0].lower() for line in lines if "==" in line}
    assert docs <= pinned
    assert "placer[docs]" in project["optional-dependencies"]["test"]
    for page in (REPO / "README.md", REPO / "docs/index.md"):
        assert "install -c constraints.txt -e '.[docs]'" in page.read_text(), page


def test_the_readme_policy_is_the_example_file_the_commands_use() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    shown = next(yaml.safe_load(block) for block in re.findall(r"^```yaml\n(.*?)^```", readme, re.S | re.M)
                 if "kind: SchedulingPolicy" in block)
    assert shown == yaml.safe_load((REPO / "docs/examples/first-policy/gpu-pool.yaml").read_text())


@pytest.mark.parametrize(("where", "command", "expected"), console_examples())
def test_console_examples_print_what_the_docs_show(where: str, command: str, expected: str, tmp_path: Path) -> None:
    """stdout and stderr together, as a terminal shows them (`run_in_docs_tree`)."""
    output = run_in_docs_tree(command, tmp_path, stderr=subprocess.STDOUT)
    printed = [line.rstrip() for line in output.rstrip().splitlines()]
    assert printed == [line.rstrip() for line in expected.rstrip().splitlines()], f"{where}: $ {command}"


MARKED = re.compile(r"^<!-- (part of the )?output of: (placer .*) -->\n```\w*\n(.*?)^```", re.S | re.M)


def marked_outputs() -> list[tuple[str, str, bool, str]]:
    """(where, command, part, shown) of every block preceded by `<!-- output of: placer ... -->` (the block
    is the command's whole stdout) or `<!-- part of the output of: placer ... -->` (consecutive lines of it,
    a whole node: not cut short of deeper-indented lines that follow)."""
    found = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        for match in MARKED.finditer(text):
            where = f"{path.name}:{text[: match.start()].count(chr(10)) + 1}"
            found.append((where, match.group(2), bool(match.group(1)), match.group(3)))
    return found


def run_in_docs_tree(command: str, tmp_path: Path, *, stderr: int) -> str:
    """`command` run by bash from a directory that has the repository's `docs/`, `policies/`, `deploy/` and
    `tests/` (a redirection in it writes there, not into the repository), `placer` first on the PATH."""
    for name in ("docs", "policies", "deploy", "tests"):
        (tmp_path / name).symlink_to(REPO / name)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONUNBUFFERED": "1"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.run(["bash", "-c", command], cwd=tmp_path, stdout=subprocess.PIPE, stderr=stderr, text=True,
                          env=env, timeout=120, check=False).stdout


@pytest.mark.parametrize(("where", "command", "part", "shown"), marked_outputs())
def test_marked_outputs_are_what_the_commands_print(where: str, command: str, part: bool, shown: str,
                                                   tmp_path: Path) -> None:
    printed = [line.rstrip() for line in run_in_docs_tree(command, tmp_path, stderr=subprocess.DEVNULL).splitlines()]
    lines = [line.rstrip() for line in shown.rstrip().splitlines()]
    if part:  # whole: the line after the part (if any) is not indented deeper than its first line
        def indent(line: str) -> int:
            return len(line) - len(line.lstrip())
        ends = [i + len(lines) for i in range(len(printed)) if printed[i:i + len(lines)] == lines]
        assert ends, f"{where}: not in `{command}`"
        assert any(end == len(printed) or indent(printed[end]) <= indent(lines[0]) for end in ends), \
            f"{where}: cut short of what `{command}` prints next: {printed[ends[0]]!r}"
    else:
        assert printed == lines, f"{where}: $ {command}"


def test_there_are_console_examples_for_each_offline_command() -> None:
    commands = {command.split()[1] for _, command, _ in console_examples()}
    assert {"apply", "lint", "test", "export"} <= commands


def test_no_reference_to_a_design_document_outside_the_repository() -> None:
    """Every "see §x" points into the repository; a contributor cannot open a file only some machine has."""
    listed = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.yaml", "*.yml", "*.toml", "Dockerfile"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    pattern = re.compile("DESIGN" + r"(\.md)? ?§|/work/" + "shared")
    offenders = [name for name in listed if (REPO / name).is_file()
                 and pattern.search((REPO / name).read_text(encoding="utf-8", errors="replace"))]
    assert offenders == []
