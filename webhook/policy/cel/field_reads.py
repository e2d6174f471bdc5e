"""Which fields of each variable a compiled expression can observe, so the engine hands the runtime only those.

cel-expr-python converts a variable from Python to CEL values whole, on the first evaluation that reads it:
for an 8 KB Deployment that is 70-140 µs for `pod` and more for `object` — more than evaluating all 50 rules'
conditions. Policies read a few fields of these objects (`pod.spec.containers.exists(c, c.image ...)`,
`object.spec.replicas`), so the engine gives the runtime a copy of each object cut down to the fields some
expression of the snapshot can observe (`prune`), and the conversion costs what the policies read.

The analysis runs on the checked syntax tree (`checked_ast`), after macro expansion, and must never find
less than an expression can observe (more only costs conversion time). A value is observed *whole* when
anything other than a field selection uses it: a comparison, `in`, `size()`, a function or method call, a
list or map literal, the expression's result. A field selection (`x.f`, `x.?f`, `x['f']`, `x[?'f']`)
observes only that key of `x`; `has(x.f)` observes the key `f` (kept whole); an index that is not a string
literal (`x[0]`, `x[i]`) observes every element alike (`EACH`); a one-variable comprehension over `x` (the
macros `all`, `exists`, `map`, `filter`...) observes every element through its variable. So a map is cut
down only where nothing looked at its keys as a whole, and a list keeps its length and order, each element
cut down the same way. A two-variable comprehension observes its range whole; `cel.bind(v, x, ...)` lets
`v` stand for `x`.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.policy.cel.ast_paths import PathWalk
from webhook.policy.cel.checked_ast import Expr

Path = tuple[str | None, ...]
"""Keys below a variable; None stands for every element of a list (`EACH`)."""

EACH = None


@dataclass
class FieldTree:
    """What is observed of one value: all of it (`whole`), or some of its keys and/or its elements."""

    whole: bool = False
    keys: dict[str, "FieldTree"] = field(default_factory=dict)
    each: "FieldTree | None" = None
    """What is observed of every element (of a list; a map whose elements are asked for is kept whole)."""

    def child(self, key: str | None) -> "FieldTree":
        if key is EACH:
            if self.each is None:
                self.each = FieldTree()
            return self.each
        found = self.keys.get(key)
        if found is None:
            found = self.keys[key] = FieldTree()
        return found

    def merge(self, other: "FieldTree") -> None:
        """Observe also what `other` observes."""
        if self.whole:
            return
        if other.whole:
            self.whole, self.keys, self.each = True, {}, None
            return
        for key, tree in other.keys.items():
            self.child(key).merge(tree)
        if other.each is not None:
            self.child(EACH).merge(other.each)


FieldReads = Mapping[str, FieldTree]
"""Per variable the expression reads, what it observes of it; a variable it does not read is absent."""


def field_reads(root: Expr, variables: Iterable[str]) -> dict[str, FieldTree]:
    """What an expression (its checked tree) observes of each of `variables`. Raises AstError on a tree
    it cannot follow (the caller then treats every variable as read whole)."""
    analysis = _Analysis(frozenset(variables))
    analysis.use(root, {})
    return analysis.trees


def merged(reads: Iterable[FieldReads | None], variables: Iterable[str]) -> dict[str, FieldTree]:
    """One tree per variable observing everything any of `reads` does (None: an expression that could not be
    analysed, which observes every variable whole)."""
    trees: dict[str, FieldTree] = {}
    for one in reads:
        if one is None:
            return {name: FieldTree(whole=True) for name in variables}
        for name, tree in one.items():
            trees.setdefault(name, FieldTree()).merge(tree)
    return trees


def prune(value: Any, tree: FieldTree) -> Any:
    """`value` cut down to what `tree` observes: the same answer to every expression that was analysed."""
    if tree.whole:
        return value
    if isinstance(value, dict):
        if tree.each is not None:  # a map's elements asked for by a computed key or iterated: keep it all
            return value
        keys = tree.keys
        return {key: prune(item, keys[key]) for key, item in value.items() if key in keys}
    if isinstance(value, list):
        if tree.keys or tree.each is None:  # a field of a list: an error either way, keep it as it is
            return value
        each = tree.each
        return [prune(item, each) for item in value]
    return value


Scope = dict[str, Path | None]
"""Comprehension variables in scope: the path of the value each stands for, or None (not a variable's part)."""


class _Analysis(PathWalk[Path]):
    def __init__(self, variables: frozenset[str]) -> None:
        super().__init__(variables)
        self.trees: dict[str, FieldTree] = {}

    def use(self, node: Expr, scope: Scope) -> None:
        """The node's value is used as a whole."""
        path = self.origin(node, scope)
        if path is not None:
            self.reach(path).whole = True

    def reach(self, path: Path) -> FieldTree:
        """The tree node of `path`, created with its ancestors (so the keys on the way are kept)."""
        name, *keys = path
        assert isinstance(name, str)
        tree = self.trees.setdefault(name, FieldTree())
        for key in keys:
            if tree.whole:
                return tree
            tree = tree.child(key)
        return tree

    def root(self, name: str) -> Path:
        return (name,)

    def step(self, path: Path, key: str | None, node: Expr, test_only: bool) -> Path | None:
        if test_only:  # has(x.f): whether the key is there
            self.reach((*path, key)).whole = True
            return None
        return (*path, key)

    def iterated(self, range_path: Path | None, two_variables: bool) -> tuple[Path | None, Path | None]:
        if two_variables:  # `all(i, v, ...)`, `transformList`...: index or key with the element, observed whole
            if range_path is not None:
                self.reach(range_path).whole = True
            return None, None
        element = None if range_path is None else (*range_path, EACH)
        if element is not None:
            self.reach(element)  # iterated: kept with every element, even if no element is looked into
        return element, None
