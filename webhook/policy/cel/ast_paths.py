"""The walk over a checked expression that follows which part of a variable each node's value is.

Two analyses need it: `field_reads` (what an expression can observe of each variable, to cut the objects
handed to the runtime) and `field_paths` (every field path an expression selects, for the typed field
checks). Both follow values the same way: an identifier is a variable or a comprehension variable in scope;
a field selection (`x.f`, `has(x.f)`) and a selection call (`x['f']`, `x[?'f']`, `x.?f`) go one key below
their operand, a computed index (`x[i]`) one element below; a comprehension's variable stands for an
element of its range and `cel.bind(v, x, ...)` lets `v` stand for `x`; anything else is a computed value
(no path) whose operands are used. They differ in what they record at each step, which `PathWalk`'s
subclasses say in its hooks.
"""

from typing import Generic, TypeVar

from webhook.policy.cel.checked_ast import AstError, Expr

P = TypeVar("P", bound=tuple[str | None, ...])
"""The analysis' path: the variable, then the steps below it."""

SELECTION_CALLS = frozenset({"_[_]", "_[?_]", "_?._"})
"""Calls that select one key or element of their first argument (index, optional index, optional field)."""


class PathWalk(Generic[P]):
    """Walks a checked tree; `origin` is where a node's value is found, after walking what the node uses."""

    def __init__(self, variables: frozenset[str]) -> None:
        self.variables = variables

    def root(self, name: str) -> P:
        """The path of the variable `name` itself."""
        raise NotImplementedError

    def step(self, path: P, key: str | None, node: Expr, test_only: bool) -> P | None:
        """The path one step below `path` (`key`; None: an element picked by a computed index) that `node`
        selects; None when the node's value is not that part (`has()` only tests the key is there)."""
        raise NotImplementedError

    def iterated(self, range_path: P | None, two_variables: bool) -> tuple[P | None, P | None]:
        """The paths a comprehension's first and second variables stand for, over a range at `range_path`."""
        raise NotImplementedError

    def use(self, node: Expr, scope: dict[str, P | None]) -> None:
        """Walk a node whose value something other than a field selection uses."""
        raise NotImplementedError

    def origin(self, node: Expr, scope: dict[str, P | None]) -> P | None:
        """The path the node's value is found at (a variable's part), after walking what the node uses;
        None for a value computed from something else."""
        kind = node.kind
        if kind == "const":
            return None
        if kind == "ident":
            name = node.name.removeprefix(".")
            if name in scope:
                return scope[name]
            return self.root(name) if name in self.variables else None
        if kind == "select":
            if len(node.operands) != 1:
                raise AstError("a selection without its operand")
            path = self.origin(node.operands[0], scope)
            return None if path is None else self.step(path, node.field, node, node.test_only)
        if kind == "call":
            return self.call(node, scope)
        if kind in ("list", "struct"):
            for operand in node.operands:
                self.use(operand, scope)
            return None
        if kind == "comprehension":
            return self._comprehension(node, scope)
        raise AstError(f"an expression node of unknown kind {kind!r}")

    def call(self, node: Expr, scope: dict[str, P | None]) -> P | None:
        """A selection call's path; any other call uses its target and arguments."""
        args = node.args
        if node.function in SELECTION_CALLS and node.target is None and len(args) == 2:
            path = self.origin(args[0], scope)
            key = args[1].literal
            if not isinstance(key, str):
                self.use(args[1], scope)
                key = None
            return None if path is None else self.step(path, key, node, False)
        for operand in node.operands:
            self.use(operand, scope)
        return None

    def _comprehension(self, node: Expr, scope: dict[str, P | None]) -> P | None:
        iter_range, accu_init, condition, step, result = node.loop
        first, second = node.iter_vars
        accu = node.accu_var
        range_path = self.origin(iter_range, scope)
        inner = dict(scope)
        first_path, second_path = self.iterated(range_path, bool(second))
        inner[first] = first_path
        if second:
            inner[second] = second_path
        keeps_accumulator = step.kind == "ident" and step.name == accu  # cel.bind: the accumulator is its init
        accu_path: P | None = None
        if keeps_accumulator:
            accu_path = self.origin(accu_init, scope)
        else:
            self.use(accu_init, scope)
        inner[accu] = accu_path
        self.use(condition, inner)
        if not keeps_accumulator:
            self.use(step, inner)
        return self.origin(result, {**scope, accu: accu_path})
