"""Where each value of a YAML document sits in its file, so that an error names the file's line and column.

A policy's CEL expression is a YAML scalar, written plain, quoted or as a block (`|`, `>`). A type error
points at a character of the expression (`1:19`); this module maps that character back to the line and
column of the file, through the way the scalar is written: a block's indentation, a quoted scalar's quotes
and escapes, the folding of a multi-line scalar (YAML 1.2, chapter 7 "Flow Style Productions" and chapter 8
"Block Style Productions").
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml

Path = tuple[str | int, ...]
Place = tuple[int, int]
"""(line, column), both from 1, as editors and compilers show them."""


@dataclass(frozen=True, slots=True)
class _Scalar:
    start: int
    """Offset in the file of the scalar's first character (its quote or block indicator)."""
    end: int
    value: str
    style: str | None


@dataclass(slots=True)
class Positions:
    """The places of one document's values, by their path (`("spec", "rules", 0, "condition")`)."""

    source: str
    values: dict[Path, _Scalar | int] = field(default_factory=dict)
    """A scalar, or the file offset where a collection starts."""
    keys: dict[Path, int] = field(default_factory=dict)
    """The file offset of each mapping key, by the path of its value: an unknown field is reported there."""
    _lines: list[int] = field(default_factory=list)

    @staticmethod
    def of_node(node: yaml.Node, source: str) -> "Positions":
        positions = Positions(source)
        positions._walk(node, ())
        return positions

    def _walk(self, node: yaml.Node, path: Path) -> None:
        if isinstance(node, yaml.ScalarNode):
            start, end = node.start_mark.index, node.end_mark.index
            self.values[path] = _Scalar(start, end, str(node.value), node.style)
        elif isinstance(node, yaml.SequenceNode):
            self.values[path] = node.start_mark.index
            for index, item in enumerate(node.value):
                self._walk(item, (*path, index))
        elif isinstance(node, yaml.MappingNode):
            self.values[path] = node.start_mark.index
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    self.keys[(*path, str(key.value))] = key.start_mark.index
                    self._walk(value, (*path, str(key.value)))

    def place(self, path: Path, offset: int | None = None, *, key: bool = False) -> Place | None:
        """The file's line and column of the value at `path`, or of its `offset`-th character (a scalar's
        value, in code points); the nearest enclosing value that has a place when `path` has none. `key`: of
        the key that holds the value (an unknown field is a mistake in the key, whatever its value)."""
        if key and path in self.keys:
            return self._line_column(self.keys[path])
        for end in range(len(path), -1, -1):
            found = self.values.get(path[:end])
            if found is None:
                continue
            if isinstance(found, int):
                return self._line_column(found)
            if offset is not None and end == len(path):
                mapped = _source_offset(self.source[found.start:found.end], found, offset)
                if mapped is not None:
                    return self._line_column(found.start + mapped)
            return self._line_column(found.start)
        return None

    def _line_column(self, index: int) -> Place:
        if not self._lines:
            self._lines = [0] + [position + 1 for position, char in enumerate(self.source) if char == "\n"]
        line = _bisect(self._lines, index)
        return line + 1, index - self._lines[line] + 1


def _bisect(starts: list[int], index: int) -> int:
    low, high = 0, len(starts) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if starts[middle] <= index:
            low = middle
        else:
            high = middle - 1
    return low


_ESCAPE_LENGTHS: Mapping[str, int] = {"x": 2, "u": 4, "U": 8}


def _source_offset(text: str, scalar: _Scalar, offset: int) -> int | None:
    """Where in `text` (the scalar as written) the value's `offset`-th character is; None if it cannot be told.

    The value's characters are found in order in the text, skipping what the value does not hold
    (indentation, the quotes, a block's header, a doubled `''`); a folded line break (a space in the value)
    is the line break in the text, and an escape (`\\n`, `\\x41`) is where it starts."""
    value = scalar.value
    if offset >= len(value):
        return None
    index = 0
    double = scalar.style == '"'
    for position, char in enumerate(value):
        while True:
            if index >= len(text):
                return None
            written = text[index]
            if double and written == "\\" and index + 1 < len(text):
                length = 2 + _ESCAPE_LENGTHS.get(text[index + 1], 0)
                if text[index + 1] == "\n":  # an escaped line break: no character of the value
                    index += 2
                    continue
                found, index = index, index + length
                break
            if written == char or (char == " " and written == "\n"):
                found, index = index, index + 1
                break
            index += 1
        if position == offset:
            return found
    return None
