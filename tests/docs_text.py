"""The docs as the doc checks read them: pages, their prose (paragraphs, list items, table rows, outside code)
and their code blocks, each with the line it starts on."""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
FENCE = re.compile(r"^(```|~~~)")


def pages() -> list[Path]:
    """The front page and every page of the site."""
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def nav_sections() -> dict[str, str]:
    """Page file name -> the top-level nav section it is in (mkdocs.yml), "Home" for index.md."""
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    sections: dict[str, str] = {}
    for entry in nav:
        for title, value in entry.items():
            if isinstance(value, str):
                sections[value] = title
            else:
                for item in value:
                    sections.update(dict.fromkeys(item.values(), title))
    return sections


def name(path: Path) -> str:
    return path.relative_to(REPO).as_posix() if path.parent != DOCS and path.is_relative_to(REPO) else path.name


@dataclass(frozen=True)
class Prose:
    page: str
    line: int
    text: str


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    info: str
    body: str
    before: str
    """The last non-empty line before the fence."""


def prose(path: Path) -> Iterator[Prose]:
    """Paragraphs, list items and table rows outside code blocks and HTML comments, joined into one line each."""
    unit: list[str] = []
    start = 0
    fenced = False
    for number, line in enumerate([*path.read_text(encoding="utf-8").splitlines(), ""], start=1):
        if FENCE.match(line):
            fenced = not fenced
        stripped = line.strip()
        new_unit = (fenced or FENCE.match(line) or not stripped or stripped.startswith(("|", "#", "<!--", "- ", "* "))
                    or re.match(r"^\d+\. ", stripped))
        if new_unit and unit:
            yield Prose(name(path), start, " ".join(unit))
            unit = []
        if fenced or FENCE.match(line) or not stripped or stripped.startswith(("#", "<!--")):
            continue
        if stripped.startswith("|"):
            yield Prose(name(path), number, stripped)
            continue
        if not unit:
            start = number
        unit.append(stripped)


def blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        info = lines[index][3:].strip()
        end = next((i for i in range(index + 1, len(lines)) if lines[i].startswith(opening.group(1))), len(lines))
        before = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        yield Block(name(path), index + 1, info, "\n".join(lines[index + 1:end]) + "\n", before.strip())
        index = end + 1


def code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def shown_output(page: Path, command: str) -> str:
    """What a page shows `$ command` printing: the lines after it in its code block, up to the next `$ ` line
    or the end of the block (the first such command on the page)."""
    for block in blocks(page):
        lines = block.body.splitlines()
        if f"$ {command}" in lines:
            start = lines.index(f"$ {command}") + 1
            end = next((i for i in range(start, len(lines)) if lines[i].startswith("$ ")), len(lines))
            return "".join(f"{line}\n" for line in lines[start:end])
    raise AssertionError(f"{page.name} shows no `$ {command}`")
