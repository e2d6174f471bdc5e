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

from webhook.policy.checked_ast import AstError, Expr

Path = tuple[str | None, ...]
"""Keys below a variable; None stands for every element of a list (`EACH`)."""

EACH = None

_SELECTIONS = frozenset({"_[_]", "_[?_]", "_?._"})
"""Calls that select one key or element of their first argument (index, optional index, optional field)."""


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


class _Analysis:
    def __init__(self, variables: frozenset[str]) -> None:
        self.variables = variables
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

    def origin(self, node: Expr, scope: Scope) -> Path | None:
        """The path the node's value is found at (a variable's part), after visiting what the node uses;
        None for a value computed from something else."""
        kind = node.kind
        if kind == "const":
            return None
        if kind == "ident":
            name = node.name.removeprefix(".")
            if name in scope:
                return scope[name]
            return (name,) if name in self.variables else None
        if kind == "select":
            operands = node.operands
            if len(operands) != 1:
                raise AstError("a selection without its operand")
            path = self.origin(operands[0], scope)
            if path is None:
                return None
            if node.test_only:  # has(x.f): whether the key is there
                self.reach((*path, node.field)).whole = True
                return None
            return (*path, node.field)
        if kind == "call":
            return self._call(node, scope)
        if kind in ("list", "struct"):
            for operand in node.operands:
                self.use(operand, scope)
            return None
        if kind == "comprehension":
            return self._comprehension(node, scope)
        raise AstError(f"an expression node of unknown kind {kind!r}")

    def _call(self, node: Expr, scope: Scope) -> Path | None:
        args = node.args
        if node.function in _SELECTIONS and node.target is None and len(args) == 2:
            path = self.origin(args[0], scope)
            key = args[1].literal
            if not isinstance(key, str):
                self.use(args[1], scope)
                key = EACH
            return None if path is None else (*path, key)
        if node.target is not None:
            self.use(node.target, scope)
        for arg in args:
            self.use(arg, scope)
        return None

    def _comprehension(self, node: Expr, scope: Scope) -> Path | None:
        iter_range, accu_init, condition, step, result = node.loop
        first, second = node.iter_vars
        accu = node.accu_var
        range_path = self.origin(iter_range, scope)
        inner = dict(scope)
        if second:  # `all(i, v, ...)`, `transformList`...: index or key with the element, observed whole
            if range_path is not None:
                self.reach(range_path).whole = True
            inner[first] = inner[second] = None
        else:
            element = None if range_path is None else (*range_path, EACH)
            if element is not None:
                self.reach(element)  # iterated: kept with every element, even if no element is looked into
            inner[first] = element
        keeps_accumulator = step.kind == "ident" and step.name == accu  # cel.bind: the accumulator is its init
        if keeps_accumulator:
            accu_path = self.origin(accu_init, scope)
        else:
            self.use(accu_init, scope)
            accu_path = None
        inner[accu] = accu_path
        self.use(condition, inner)
        if not keeps_accumulator:
            self.use(step, inner)
        return self.origin(result, {**scope, accu: accu_path})
