"""The field paths an expression selects below each variable, with where in the expression it selects them.

Read from the checked syntax tree (after macro expansion), as `field_reads` does, but keeping every
selection and its node: `pod.metadata.lables['tier']` selects `pod.metadata`, `pod.metadata.lables` and
`pod.metadata.lables.tier`; `has(x.f)`, `x.?f`, `x['f']` and `x[?'f']` select `f` of `x`; a computed index
(`x[i]`, `x[0]`) selects an element (`ANY_INDEX`); a comprehension's variable over `x` stands for every
element of `x` (`EACH`), so `pod.spec.containers.exists(c, c.resources.limits ...)` selects
`pod.spec.containers[*].resources.limits`; `cel.bind(v, x, ...)` lets `v` stand for `x`. A value computed
by a function (`filter`, `map`, `orValue`...) is not followed: what is selected below it is not checked.
"""

from dataclasses import dataclass

from webhook.policy.checked_ast import AstError, Expr
from webhook.policy.schemas import ANY_INDEX, EACH

Path = tuple[str, ...]
"""The variable, then the steps below it."""

_OPTIONAL_SELECTIONS = frozenset({"_[_]", "_[?_]", "_?._"})


@dataclass(frozen=True, slots=True)
class Selection:
    path: Path
    node: int
    """The id of the node that selects the path's last step (its position is in the source info)."""


def selections(root: Expr, variables: frozenset[str]) -> list[Selection]:
    """Every path `root` selects below `variables`, in the order met; raises AstError on a tree it cannot
    follow (the caller then checks nothing for that expression)."""
    walk = _Walk(variables)
    walk.value(root, {})
    return walk.found


Scope = dict[str, Path | None]


class _Walk:
    def __init__(self, variables: frozenset[str]) -> None:
        self.variables = variables
        self.found: list[Selection] = []
        self._seen: set[Path] = set()

    def _select(self, path: Path, node: Expr) -> Path:
        if path not in self._seen:
            self._seen.add(path)
            self.found.append(Selection(path, node.id))
        return path

    def value(self, node: Expr, scope: Scope) -> Path | None:
        """The path the node's value is found at, after walking what it uses; None if computed."""
        kind = node.kind
        if kind == "const":
            return None
        if kind == "ident":
            name = node.name.removeprefix(".")
            if name in scope:
                return scope[name]
            return (name,) if name in self.variables else None
        if kind == "select":
            if len(node.operands) != 1:
                raise AstError("a selection without its operand")
            path = self.value(node.operands[0], scope)
            if path is None:
                return None
            selected = self._select((*path, node.field), node)
            return None if node.test_only else selected
        if kind == "call":
            args = node.args
            if node.function in _OPTIONAL_SELECTIONS and node.target is None and len(args) == 2:
                path = self.value(args[0], scope)
                key = args[1].literal
                if not isinstance(key, str):
                    self.value(args[1], scope)
                    key = ANY_INDEX
                return None if path is None else self._select((*path, key), node)
            for operand in node.operands:
                self.value(operand, scope)
            return None
        if kind in ("list", "struct"):
            for operand in node.operands:
                self.value(operand, scope)
            return None
        if kind == "comprehension":
            return self._comprehension(node, scope)
        raise AstError(f"an expression node of unknown kind {kind!r}")

    def _comprehension(self, node: Expr, scope: Scope) -> Path | None:
        iter_range, accu_init, condition, step, result = node.loop
        first, second = node.iter_vars
        accu = node.accu_var
        range_path = self.value(iter_range, scope)
        inner = dict(scope)
        if second:  # `all(i, v, ...)`: an index or key, and the element
            inner[first] = None
            inner[second] = None if range_path is None else (*range_path, ANY_INDEX)
        else:
            inner[first] = None if range_path is None else (*range_path, EACH)
        keeps_accumulator = step.kind == "ident" and step.name == accu  # cel.bind
        accu_path = self.value(accu_init, scope)
        if not keeps_accumulator:
            accu_path = None
        inner[accu] = accu_path
        self.value(condition, inner)
        if not keeps_accumulator:
            self.value(step, inner)
        return self.value(result, {**scope, accu: accu_path})
