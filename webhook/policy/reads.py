"""Which parts of the object an expression reads, so the engine knows when a second pass can change nothing.

The engine applies the rules until a pass changes nothing (engine/mutate.py). Most passes after the first
would only confirm it: a rule's outcome can change only if something it reads changed, and actions write a
few known places (node selector, tolerations, affinity, spread, labels, annotations...). So each rule
carries the paths its expressions (and the variables they use) read under `pod`, `object` and `workload`;
the engine compares them with the paths a pass changed.

The paths come from what each compiled expression can observe (`field_reads`, on its checked tree), cut
at the first list: `pod.spec.containers.exists(c, c.image ...)` reads `spec.containers` (and everything
below it, whatever the index a pass wrote at); a bare `pod`, or an expression that could not be analysed,
reads the whole root. Reading less than an expression really reads would be a bug; reading more only costs
a pass.
"""

from collections.abc import Iterator
from dataclasses import dataclass

from webhook.policy.cel.field_reads import FieldReads, FieldTree

Path = tuple[str, ...]


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
            prefix = changed.tokens_of(template_path)
            if any(changed.touches(prefix + path) for path in self.template):
                return True
        return any(changed.touches(path) for path in self.object)


class Changes:
    """The paths one pass changed, indexed so that each read is checked in time linear in its length, and
    each answer kept: the rules of a policy set mostly read the same few paths (`spec.containers`)."""

    def __init__(self, paths: list[Path]) -> None:
        self._paths = set(paths)
        self._prefixes = {path[:length] for path in paths for length in range(len(path) + 1)}
        self._answers: dict[Path, bool] = {}
        self._tokens: dict[tuple[str | int, ...], Path] = {}

    def touches(self, read: Path) -> bool:
        """A change inside what is read (the read is a prefix of it), or replacing a part of it."""
        answer = self._answers.get(read)
        if answer is None:
            answer = read in self._prefixes or any(read[:length] in self._paths for length in range(len(read)))
            self._answers[read] = answer
        return answer

    def tokens_of(self, template_path: tuple[str | int, ...]) -> Path:
        """A template's path as pointer tokens (list indexes are strings in JSON pointers)."""
        tokens = self._tokens.get(template_path)
        if tokens is None:
            tokens = self._tokens[template_path] = tuple(str(part) for part in template_path)
        return tokens


def reads_of(fields: FieldReads | None) -> Reads:
    """What an expression reads of the template and the object, from what it observes of each variable
    (`Program.fields`; None: it could not be analysed, so it reads everything)."""
    if fields is None:
        return Reads(frozenset({()}), frozenset({()}))
    template = frozenset(_paths(fields["pod"])) if "pod" in fields else frozenset()
    obj = set(_paths(fields["object"])) if "object" in fields else set()
    workload = fields.get("workload")
    if workload is not None:  # of `workload`, only its metadata maps can change
        if workload.whole:
            obj.add(("metadata",))
        for key in ("labels", "annotations"):
            if key in workload.keys:
                obj.update(("metadata", key, *path[:1]) for path in _paths(workload.keys[key]))
    return Reads(template, frozenset(obj))


def _paths(tree: FieldTree, path: Path = ()) -> Iterator[Path]:
    """The paths below which `tree` observes anything, cut at a value observed whole or a list."""
    if tree.whole or tree.each is not None or not tree.keys:
        yield path
        return
    for key, below in tree.keys.items():
        yield from _paths(below, (*path, key))
