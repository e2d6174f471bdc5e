"""Which parts of the object an expression reads, so the engine knows when a second pass can change nothing.

The engine applies the rules until a pass changes nothing (engine/mutate.py). Most passes after the first
would only confirm it: a rule's outcome can change only if something it reads changed, and actions write a
few known places (node selector, tolerations, affinity, spread, labels, annotations...). So each rule
carries the paths its expressions (and the variables they use) read under `pod`, `object` and `workload`;
the engine compares them with the paths a pass changed.

The analysis is textual and conservative: `pod.spec.containers.exists(c, ...)` reads `spec.containers`
(and everything below it); a bare `pod`, an index that is not a literal, or anything it cannot follow reads
the whole root. Reading less than an expression really reads would be a bug; reading more only costs a pass.
"""

import re
from dataclasses import dataclass

Path = tuple[str, ...]

_ROOT = re.compile(r"(?<![\w.$])(pod|object|workload)\b")
_MEMBER = re.compile(r"\s*\.\s*\??\s*([A-Za-z_]\w*)")
_INDEX = re.compile(r"\s*\[\s*\??\s*(?:'([^'\\]*)'|\"([^\"\\]*)\")\s*\]")
_CALL = re.compile(r"\s*\(")


@dataclass(frozen=True, slots=True)
class Reads:
    """Paths read below the template (`pod`) and below the object (`object`, and `workload`'s metadata)."""

    template: frozenset[Path] = frozenset()
    object: frozenset[Path] = frozenset()

    def __or__(self, other: "Reads") -> "Reads":
        return Reads(self.template | other.template, self.object | other.object)

    def touched_by(self, changed: "Changes", template_path: tuple[str | int, ...]) -> bool:
        """Whether a change (paths from the object's root) may alter what is read."""
        if self.template:
            prefix = tuple(str(part) for part in template_path)  # list indexes are strings in JSON pointers
            if any(changed.touches(prefix + path) for path in self.template):
                return True
        return any(changed.touches(path) for path in self.object)


class Changes:
    """The paths one pass changed, indexed so that each read is checked in time linear in its length."""

    def __init__(self, paths: list[Path]) -> None:
        self._paths = set(paths)
        self._prefixes = {path[:length] for path in paths for length in range(len(path) + 1)}

    def touches(self, read: Path) -> bool:
        """A change inside what is read (the read is a prefix of it), or replacing a part of it."""
        return read in self._prefixes or any(read[:length] in self._paths for length in range(len(read)))


def reads_of(source: str) -> Reads:
    template: set[Path] = set()
    obj: set[Path] = set()
    for match in _ROOT.finditer(source):
        root = match.group(1)
        path = _follow(source, match.end())
        if root == "pod":
            template.add(path)
        elif root == "object":
            obj.add(path)
        elif not path or path[0] in ("labels", "annotations"):  # workload: only its metadata maps can change
            obj.add(("metadata", *path[:2]) if path else ("metadata",))
    return Reads(frozenset(template), frozenset(obj))


def _follow(source: str, position: int) -> Path:
    """The member and literal-index chain after a root, without a trailing function call (`.exists(`)."""
    parts: list[str] = []
    while True:
        member = _MEMBER.match(source, position)
        if member is not None:
            if _CALL.match(source, member.end()):
                return tuple(parts)  # a method call (`.exists(`, `.size(`): it reads what is before it
            parts.append(member.group(1))
            position = member.end()
            continue
        index = _INDEX.match(source, position)
        if index is not None:
            parts.append(index.group(1) if index.group(1) is not None else index.group(2))
            position = index.end()
            continue
        return tuple(parts)
