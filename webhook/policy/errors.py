"""Load-time errors with their location: file, line and column, policy, rule, field and CEL position."""

import re
from dataclasses import dataclass
from typing import Protocol

DocumentPath = tuple[str | int, ...]
"""Where a value sits in a policy document: `("spec", "rules", 0, "condition")`."""
Place = tuple[int, int]
"""A line and a column of a file, both from 1."""


class Locate(Protocol):
    """The file's line and column of the value at a path, or of a character of it (its offset in the value),
    or (`key`) of the key holding it."""

    def __call__(self, path: DocumentPath, offset: int | None = None, /, *, key: bool = False) -> Place | None: ...


_CEL_POSITION = re.compile(r"^<input>:(\d+):(\d+): ")
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@dataclass(frozen=True, slots=True)
class PolicyError:
    """One problem that keeps a policy (or a file) from loading.

    Read from a file whose YAML positions are known, it is rendered as a compiler's error, with the line and
    column where the faulty value (or the character of an expression) is written:
    `policies/org.yaml:14:36: policy org-wide-policy, rule multi-zone-ha, condition: found no matching ...`.
    From the cluster (the validating webhook, policy status) the place is the policy, rule and field, and a
    position inside the expression: `cluster: policy org-wide-policy, rule multi-zone-ha, condition:
    <input>:1:19: found no matching ...`. The message itself is the same everywhere.
    """

    source: str
    message: str
    policy: str | None = None
    rule: str | None = None
    field: str | None = None
    place: Place | None = None
    """Line and column in `source` (a file), when its YAML positions are known."""

    def __str__(self) -> str:
        parts = [f"policy {self.policy}" if self.policy else None, f"rule {self.rule}" if self.rule else None]
        where = ", ".join(part for part in parts if part)
        location = f"{where}, {self.field}" if where and self.field else (where or self.field or "")
        message, source = self.message, self.source
        if self.place is not None:
            message = _CEL_POSITION.sub("", message)
            source = f"{source}:{self.place[0]}:{self.place[1]}"
        return f"{source}: {location}: {message}" if location else f"{source}: {message}"


def document_path(field: str) -> DocumentPath:
    """A field as the compiler names it (`spec.namespaceSelector.matchExpressions[0]`) as a document path.
    A key holding dots (`matchLabels.example.com/team`) splits too: its place is then its parent's."""
    return tuple(int(index) if index else name for name, index in _STEP.findall(field))


def cel_offset(text: str, message: str) -> int | None:
    """The offset in `text` of the `<input>:line:column` a message starts with (columns count code points)."""
    found = _CEL_POSITION.match(message)
    if found is None:
        return None
    line, column = int(found.group(1)), int(found.group(2))
    start = 0
    for _ in range(line - 1):
        start = text.find("\n", start) + 1
        if start == 0:
            return None
    offset = start + column - 1
    return offset if offset <= len(text) else None


class ErrorSink:
    """Collects located errors; a rule's sink shares the policy's list. `locate` gives the file's places of the
    document's values (None when the document came from the cluster); `base` is the path of what this sink's
    fields are relative to (a rule's sink: `spec.rules[i]`)."""

    def __init__(self, source: str, policy: str | None = None, rule: str | None = None,
                 items: list[PolicyError] | None = None, *, locate: Locate | None = None,
                 base: DocumentPath = ()) -> None:
        self.source, self.policy, self.rule = source, policy, rule
        self._items = items if items is not None else []
        self._locate = locate
        self._base = base

    @property
    def items(self) -> tuple[PolicyError, ...]:
        return tuple(self._items)

    def add(self, message: str, *, field: str | None = None, path: DocumentPath | None = None,
            text: str | None = None, key: bool = False) -> None:
        """One error at `field` (named for the message; its document path is `path`, else read from `field`).
        `text`: the expression the message's `<input>:line:column` is in, to place it on that character.
        `key`: the error is the key's (an unknown field): placed on the key, not on its value."""
        place = None
        if self._locate is not None:
            where = path if path is not None else (*self._base, *document_path(field or ""))
            offset = cel_offset(text, message) if text is not None else None
            place = self._locate(where, offset, key=key)
        self._items.append(PolicyError(self.source, message, self.policy, self.rule, field, place))

    def for_rule(self, rule: str, index: int) -> "ErrorSink":
        return ErrorSink(self.source, self.policy, rule, self._items, locate=self._locate,
                         base=(*self._base, "spec", "rules", index))
